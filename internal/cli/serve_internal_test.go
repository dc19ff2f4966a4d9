package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/floodgatehq/floodgate/config"
)

// TestStoreSummary: the start-up line names the store, and for Redis the
// settings that change how it decides.
func TestStoreSummary(t *testing.T) {
	for _, c := range []struct {
		store config.Store
		want  string
	}{
		{config.Store{}, "memory"},
		{config.Store{Type: "memory", Clock: "service", Counters: true}, "memory"},
		{config.Store{Type: "redis", Clock: "redis"}, "redis"},
		{config.Store{Type: "redis-cluster", Clock: "service"}, "redis-cluster, clock service"},
		{config.Store{Type: "redis-sentinel", Clock: "service", Counters: true}, "redis-sentinel, clock service, counters"},
	} {
		if got := storeSummary(c.store); got != c.want {
			t.Errorf("storeSummary(%+v) = %q, want %q", c.store, got, c.want)
		}
	}
}

// TestCredentialsRefused: behind Sentinel, a refusal of credentials names
// the sentinels' settings or the master's, by who refused; other errors,
// and other stores, are left as they are.
func TestCredentialsRefused(t *testing.T) {
	const all = "floodgate: store unavailable: redisstore: redis: all sentinels specified in configuration are unreachable: "
	sentinel := &openedStore{sentinel: &redis.FailoverOptions{MasterName: "m"}}
	for _, c := range []struct {
		st   *openedStore
		err  string
		want string // "" for nil
	}{
		{sentinel, all + "NOAUTH Authentication required.\nNOAUTH Authentication required.", "the sentinels ask for a password (NOAUTH Authentication required.): give it as store.sentinel_password or FLOODGATE_REDIS_SENTINEL_PASSWORD (their requirepass, with store.sentinel_username for an ACL user of theirs; store.password is the master's)"},
		{sentinel, all + "dial tcp: connection refused\nWRONGPASS invalid username-password pair or user is disabled.", "the sentinels refuse the credentials given (WRONGPASS invalid username-password pair or user is disabled.): check store.sentinel_username and store.sentinel_password or FLOODGATE_REDIS_SENTINEL_PASSWORD"},
		{sentinel, all + "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?", "the sentinels ask for no password, but one was given (ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?): drop store.sentinel_password or FLOODGATE_REDIS_SENTINEL_PASSWORD"},
		{sentinel, "redisstore: NOAUTH Authentication required.", "the master the sentinels name asks for a password (NOAUTH Authentication required.): give it as store.password or FLOODGATE_REDIS_PASSWORD (store.sentinel_password is the sentinels' own)"},
		{sentinel, "redisstore: WRONGPASS invalid username-password pair or user is disabled.", "the master the sentinels name refuses the credentials given (WRONGPASS invalid username-password pair or user is disabled.): check store.username and store.password or FLOODGATE_REDIS_PASSWORD"},
		{sentinel, "redisstore: ERR Client sent AUTH, but no password is set", "the master the sentinels name asks for no password, but one was given (ERR Client sent AUTH, but no password is set): drop store.password or FLOODGATE_REDIS_PASSWORD"},
		{sentinel, "redisstore: NOPERM this user has no permissions to run the 'fcall' command", ""},
		{&openedStore{}, "redisstore: NOAUTH Authentication required.", ""},
	} {
		got := c.st.credentialsRefused(errors.New(c.err))
		switch {
		case c.want == "" && got != nil:
			t.Errorf("%q: %v, want nil", c.err, got)
		case c.want != "" && (got == nil || got.Error() != c.want):
			t.Errorf("%q:\n got %v\nwant %s", c.err, got, c.want)
		}
	}
}

// TestTimedOut: an attempt cut short by its deadline is told from a
// failure that says why the store refuses.
func TestTimedOut(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{context.DeadlineExceeded, true},
		{fmt.Errorf("floodgate: store unavailable: redisstore: %w", context.DeadlineExceeded), true},
		{&net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, true},
		{errors.New("floodgate: store unavailable: redisstore: i/o timeout"), true},
		{errors.New("floodgate: store unavailable: redisstore: loading the function library: READONLY You can't write against a read only replica."), false},
		{errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), false},
	} {
		if got := timedOut(c.err); got != c.want {
			t.Errorf("timedOut(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
