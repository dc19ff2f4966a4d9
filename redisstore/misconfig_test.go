package redisstore_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgatehq/floodgate/internal/redistest"
	"github.com/floodgatehq/floodgate/redisstore"
)

// TestMisconfigured: against a real redis-server, each misconfiguration no
// retry can mend is told apart from what may pass (a server not there).
func TestMisconfigured(t *testing.T) {
	srv := redistest.StartServer(t, redistest.WithUser("floodgate", "the-right-password"))
	ping := func(o *redis.Options) error {
		c := redis.NewClient(o)
		defer c.Close()
		s, err := redisstore.New(c)
		if err != nil {
			t.Fatal(err)
		}
		// Every case answers at once, well or not: the deadline and the
		// dial timeout only keep a loaded machine from failing a good one.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.Ping(ctx); err != nil {
			return err
		}
		return s.Preload(ctx)
	}
	base := func() *redis.Options {
		return &redis.Options{Addr: srv.Addr, Username: srv.User, Password: srv.Password, MaxRetries: -1,
			DialTimeout: time.Minute, ReadTimeout: clientRead, WriteTimeout: clientRead}
	}
	if err := ping(base()); err != nil {
		t.Fatalf("a good configuration: %v", err)
	}
	// A user the ACL lets read the clock but not run scripts.
	if _, err := srv.Do(t, "ACL", "SETUSER", "clock-only", "on", ">clock-only-pw", "~*", "+time", "+ping", "+hello", "+auth", "+client"); err != nil {
		t.Fatal(err)
	}
	// Refused for the whole test: a port freed at once could be taken
	// by a parallel test's server, which would answer or hang.
	refused := redistest.RefusedAddr(t)
	for _, c := range []struct {
		name      string
		opts      func(o *redis.Options)
		permanent bool
	}{
		{"wrong password", func(o *redis.Options) { o.Password = "not-the-password" }, true},
		{"unknown user", func(o *redis.Options) { o.Username = "nobody" }, true},
		{"an ACL without scripts", func(o *redis.Options) { o.Username, o.Password = "clock-only", "clock-only-pw" }, true},
		{"database out of range", func(o *redis.Options) { o.DB = 99 }, true},
		{"port out of range", func(o *redis.Options) { o.Addr = "127.0.0.1:99999" }, true},
		{"no port", func(o *redis.Options) { o.Addr = "127.0.0.1" }, true},
		{"connection refused", func(o *redis.Options) { o.Addr = refused }, false},
	} {
		o := base()
		c.opts(o)
		err := ping(o)
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		if got := redisstore.Misconfigured(err); got != c.permanent {
			t.Errorf("%s: Misconfigured(%v) = %v, want %v", c.name, err, got, c.permanent)
		}
	}
	if redisstore.Misconfigured(nil) || redisstore.Misconfigured(errors.New("i/o timeout")) {
		t.Error("nil or a timeout called misconfigured")
	}

	// A full server (maxmemory below its used memory, noeviction) answers
	// TIME and refuses every write: not misconfigured (keys expire, or it
	// gets more memory), not a replica, but out of memory.
	full := redistest.StartServer(t)
	if _, err := full.Do(t, "CONFIG", "SET", "maxmemory", "1"); err != nil {
		t.Fatal(err)
	}
	fo := base()
	fo.Addr, fo.Username, fo.Password = full.Addr, "", ""
	err := ping(fo)
	if redisstore.WritesRefused(err) != "OOM" || redisstore.Misconfigured(err) || redisstore.ReadOnlyReplica(err) {
		t.Errorf("at a full server: %v; WritesRefused %q, Misconfigured %v, ReadOnlyReplica %v; want OOM, false, false",
			err, redisstore.WritesRefused(err), redisstore.Misconfigured(err), redisstore.ReadOnlyReplica(err))
	}
	if _, err := full.Do(t, "CONFIG", "SET", "maxmemory", "0"); err != nil {
		t.Fatal(err)
	}
	if err := ping(fo); err != nil {
		t.Errorf("once the server has room: %v", err)
	}
	if redisstore.WritesRefused(nil) != "" || redisstore.WritesRefused(errors.New("i/o timeout")) != "" {
		t.Error("nil or a timeout called a refusal of writes")
	}

	// A replica answers Ping (TIME) and refuses the library's load: not
	// misconfigured (a failover may promote it), but a read-only replica.
	master := redistest.StartServer(t)
	host, port, _ := net.SplitHostPort(master.Addr)
	if _, err := srv.Do(t, "REPLICAOF", host, port); err != nil {
		t.Fatal(err)
	}
	err = ping(base())
	if !redisstore.ReadOnlyReplica(err) || redisstore.WritesRefused(err) != "READONLY" || redisstore.Misconfigured(err) {
		t.Errorf("at a replica: %v; ReadOnlyReplica %v, WritesRefused %q, Misconfigured %v; want true, READONLY, false",
			err, redisstore.ReadOnlyReplica(err), redisstore.WritesRefused(err), redisstore.Misconfigured(err))
	}
	if redisstore.ReadOnlyReplica(nil) || redisstore.ReadOnlyReplica(errors.New("i/o timeout")) {
		t.Error("nil or a timeout called a replica's refusal")
	}
}

// TestPreloadNamesTheMaster: on a Cluster whose one master refuses
// writes (full: maxmemory of 1 byte), Preload's error names the refusal
// and that master's address, so that an operator knows which to mend;
// once it has room, Preload succeeds.
func TestPreloadNamesTheMaster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	s := newStore(t, clusterClient(t, cl))
	full := cl.Nodes[1]
	if _, err := full.Do(t, "CONFIG", "SET", "maxmemory", "1"); err != nil {
		t.Fatal(err)
	}
	err := s.Preload(context.Background())
	if redisstore.WritesRefused(err) != "OOM" || !strings.Contains(err.Error(), "(master "+full.Addr+")") {
		t.Errorf("Preload with a full master: %v; want OOM, naming master %s", err, full.Addr)
	}
	if _, err := full.Do(t, "CONFIG", "SET", "maxmemory", "0"); err != nil {
		t.Fatal(err)
	}
	if err := s.Preload(context.Background()); err != nil {
		t.Errorf("Preload once the master has room: %v", err)
	}
}

// TestAuthRefused: a refusal of credentials is found in any line of a
// failover client's error, and said to be the sentinels' or the master's.
func TestAuthRefused(t *testing.T) {
	const all = "redis: all sentinels specified in configuration are unreachable: "
	for _, c := range []struct {
		err       error
		reply     string
		sentinels bool
	}{
		{errors.New(all + "dial tcp 127.0.0.1:1: connect: connection refused\nNOAUTH Authentication required.\nNOAUTH Authentication required."), "NOAUTH Authentication required.", true},
		{errors.New(all + "i/o timeout\nWRONGPASS invalid username-password pair or user is disabled."), "WRONGPASS invalid username-password pair or user is disabled.", true},
		{errors.New("floodgate: store unavailable: redisstore: NOAUTH Authentication required."), "NOAUTH Authentication required.", false},
		{errors.New("ERR Client sent AUTH, but no password is set"), "ERR Client sent AUTH, but no password is set", false},
		{errors.New(all + "dial tcp 127.0.0.1:1: connect: connection refused"), "", false},
		{errors.New("NOPERM this user has no permissions to run the 'fcall' command"), "", false},
		{nil, "", false},
	} {
		reply, sentinels := redisstore.AuthRefused(c.err)
		if reply != c.reply || sentinels != c.sentinels {
			t.Errorf("AuthRefused(%v) = %q, %v; want %q, %v", c.err, reply, sentinels, c.reply, c.sentinels)
		}
	}
}
