package redisstore

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate"
)

func TestDecode(t *testing.T) {
	pr := &prepared{limits: []int64{10, 20}}
	d, err := decode([]any{int64(2), int64(3), int64(-1), int64(2500)}, pr)
	want := floodgate.Decision{Limit: 20, Remaining: 3, RetryAfter: floodgate.Never, ResetAfter: 2500 * time.Microsecond, Binding: 1}
	if err != nil || d != want {
		t.Errorf("decode = %v, %v; want %v", d, err, want)
	}
	d, err = decode([]any{int64(1), int64(9), int64(0), int64(100)}, pr)
	want = floodgate.Decision{Allowed: true, Limit: 10, Remaining: 9, ResetAfter: 100 * time.Microsecond}
	if err != nil || d != want {
		t.Errorf("decode = %v, %v; want %v", d, err, want)
	}
	// One integer: allowed, binding 1, remaining 7, reset 123456 µs.
	d, err = decode(int64(1+2+32*(7+65536*123456)), pr)
	want = floodgate.Decision{Allowed: true, Limit: 20, Remaining: 7, ResetAfter: 123456 * time.Microsecond, Binding: 1}
	if err != nil || d != want {
		t.Errorf("decode = %v, %v; want %v", d, err, want)
	}
	for _, bad := range []any{
		nil, "OK", []any{}, []any{int64(1)},
		int64(0),                       // one integer: denied
		int64(-1),                      // negative
		int64(1 << 53),                 // beyond a double's integers
		int64(1 + 4 + 32*(7+65536*12)), // binding 2 of 2 limits
		[]any{int64(0), int64(1), int64(0), int64(5)},           // denied without a retry
		[]any{int64(1), int64(1), int64(0)},                     // short
		[]any{int64(1), int64(1), int64(0), int64(0), int64(0)}, // long
		[]any{"1", int64(1), int64(0), int64(0)},                // a string
		[]any{int64(-1), int64(1), int64(0), int64(0)},          // code < 0
		[]any{int64(4), int64(1), int64(0), int64(0)},           // binding 2 of 2 limits
		[]any{int64(1), int64(-5), int64(0), int64(0)},          // remaining < 0
		[]any{int64(0), int64(1), int64(-2), int64(0)},          // retry < -1
		[]any{int64(1), int64(1), int64(5), int64(0)},           // allowed with a retry
		[]any{int64(0), int64(1), int64(0), int64(-1)},          // reset < 0
		[]any{int64(0), int64(1), int64(0), nil},
		[]any{int64(0), int64(1), int64(0), 1.5},
	} {
		if _, err := decode(bad, pr); !errors.Is(err, floodgate.ErrUnavailable) {
			t.Errorf("decode(%#v) = %v, want ErrUnavailable", bad, err)
		}
	}
}

// FuzzDecode: no reply, however odd, makes decode panic; what it accepts
// is a well-formed decision.
func FuzzDecode(f *testing.F) {
	f.Add(int64(1), int64(10), int64(0), int64(100), uint8(4), uint8(0))
	f.Add(int64(2), int64(0), int64(-1), int64(0), uint8(4), uint8(3))
	pr := &prepared{limits: []int64{10, 20, 30}}
	f.Fuzz(func(t *testing.T, a, b, c, d int64, n, kind uint8) {
		vals := []int64{a, b, c, d}
		reply := make([]any, 0, 8)
		for i := 0; i < int(n%7); i++ {
			var v any = vals[i%4]
			switch (int(kind) + i) % 5 {
			case 1:
				v = "x"
			case 2:
				v = nil
			case 3:
				v = []any{v}
			}
			reply = append(reply, v)
		}
		var r any = reply
		if kind%7 == 6 {
			r = a // one integer
		}
		dec, err := decode(r, pr)
		if err != nil {
			if !errors.Is(err, floodgate.ErrUnavailable) {
				t.Fatalf("decode error %v does not wrap ErrUnavailable", err)
			}
			return
		}
		if dec.Remaining < 0 || dec.ResetAfter < 0 || dec.RetryAfter < 0 || dec.Binding < 0 || int(dec.Binding) >= len(pr.limits) ||
			dec.Allowed && dec.RetryAfter != 0 || dec.Limit != pr.limits[dec.Binding] {
			t.Fatalf("decode accepted %v as %v", r, dec)
		}
	})
}

// redisErr is a server's error reply, as go-redis gives it.
type redisErr string

func (e redisErr) Error() string { return string(e) }
func (redisErr) RedisError()     {}

// TestRefused: the replies that say a call did not run, for a reason
// that passes, and only those, are sent again; MOVED and ASK only by a
// store on a Cluster client (to a plain client they mean a
// misconfiguration).
func TestRefused(t *testing.T) {
	for _, c := range []struct {
		msg     string
		cluster bool // only on a cluster client
	}{
		{"TRYAGAIN Multiple keys request during rehashing of slot", false},
		{"MOVED 3999 127.0.0.1:6381", true},
		{"ASK 3999 127.0.0.1:6381", true},
		{"CLUSTERDOWN The cluster is down", false},
		{"CLUSTERDOWN Hash slot not served", false},
		{"LOADING Redis is loading the dataset in memory", false},
		{"MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.", false},
		{"READONLY You can't write against a read only replica.", false},
	} {
		if !refused(redisErr(c.msg), true) {
			t.Errorf("refused(%q, cluster) = false; want true", c.msg)
		}
		if got := refused(redisErr(c.msg), false); got == c.cluster {
			t.Errorf("refused(%q, plain client) = %v; want %v", c.msg, got, !c.cluster)
		}
		if refused(errors.New(c.msg), true) {
			t.Errorf("refused(%q) = true for an error that is not a server's reply; want false", c.msg)
		}
	}
	for _, err := range []error{
		nil,
		redisErr("ERR Error running script: @user_function: READONLY You can't write against a read only replica."),
		redisErr("ERR Function not found"), // sent again as EVAL, not here
		redisErr("NOSCRIPT No matching script."),
		redisErr("OOM command not allowed when used memory > 'maxmemory'."),
		redisErr("WRONGTYPE Operation against a key holding the wrong kind of value"),
		redisErr("ASKING"),
		context.DeadlineExceeded,
		io.EOF,
	} {
		if refused(err, true) {
			t.Errorf("refused(%v) = true; want false", err)
		}
	}
}

// TestTopologyError: which failures make the store read a cluster's slot
// map again: every refusal the store sends again but MOVED and ASK (which
// go-redis reloads on itself), and failures to reach a node; not a
// server's answer to the command, nor a caller that left.
func TestTopologyError(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{redisErr("CLUSTERDOWN The cluster is down"), true},
		{redisErr("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{redisErr("READONLY You can't write against a read only replica."), true},
		{redisErr("LOADING Redis is loading the dataset in memory"), true},
		{redisErr("MOVED 3999 127.0.0.1:6381"), false},
		{redisErr("WRONGPASS invalid username-password pair"), false},
		{redisErr("ERR Error running script"), false},
		{io.EOF, true},
		{context.DeadlineExceeded, true},
		{context.Canceled, false},
	} {
		if got := topologyError(c.err); got != c.want {
			t.Errorf("topologyError(%v) = %v; want %v", c.err, got, c.want)
		}
	}
}
