package main_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate/internal/redistest"
)

// exitOf runs the binary until it exits (at most limit) and returns its
// status, its stderr and how long it ran; a run that outlasts limit is
// killed and fails the test.
func exitOf(t *testing.T, env []string, limit time.Duration, args ...string) (int, string, time.Duration) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		took := time.Since(start)
		var ee *exec.ExitError
		switch {
		case err == nil:
			return 0, stderr.String(), took
		case errors.As(err, &ee):
			return ee.ExitCode(), stderr.String(), took
		}
		t.Fatal(err)
	case <-time.After(limit):
		cmd.Process.Kill()
		<-done
		t.Fatalf("floodgate %s still running after %v:\n%s", strings.Join(args, " "), limit, stderr.String())
	}
	return 0, "", 0
}

// exitsAtOnce runs serve's args with --store-wait 1m in a clean
// environment with env, and fails the test unless it exits non-zero
// without waiting for the store, saying each of wants and none of
// secrets. It exits in well under a second; the bound of 20 s tells that
// from the wait on a loaded machine (exitOf kills it at 30 s).
func exitsAtOnce(t *testing.T, env, args, wants []string, secrets ...string) {
	t.Helper()
	code, stderr, took := exitOf(t, cleanEnv(env...), 30*time.Second, append(args, "--store-wait", "1m")...)
	if code == 0 {
		t.Fatalf("exit status 0:\n%s", stderr)
	}
	if took > 20*time.Second {
		t.Errorf("exited after %v with --store-wait 1m: it waited for the store", took)
	}
	for _, w := range wants {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr lacks %q:\n%s", w, stderr)
		}
	}
	for _, s := range secrets {
		if strings.Contains(stderr, s) {
			t.Errorf("stderr shows a password (%q):\n%s", s, stderr)
		}
	}
}

// TestStoreMisconfiguration: a store configuration no retry can mend makes
// serve exit non-zero at start, without waiting for --store-wait, with a
// message naming where the
// setting came from (flag, environment variable or configuration field)
// and what is wrong; a store that does not answer yet is waited for until
// --store-wait, then serve exits, unless --start-degraded starts it
// unready, deciding by the failure mode.
func TestStoreMisconfiguration(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.WithUser("floodgate", "right-password"))
	if _, err := srv.Do(t, "ACL", "SETUSER", "clockonly", "on", ">clock-pw", "~*", "+time", "+ping", "+hello", "+auth", "+client", "+info"); err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(srv.Addr)
	good := fmt.Sprintf("redis://floodgate:right-password@%s", srv.Addr)
	// Refused for the whole test: a port freed at once could be taken
	// by a parallel test's server, which would answer or hang.
	refused := redistest.RefusedAddr(t)
	cfgWithURL := func(url string) string {
		return writeConfig(t, "policies: {api: \"gcra 10/1s\"}\nstore: {url: \""+url+"\"}\n")
	}
	listen := []string{"--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--watch", "0"}
	certs := redistest.NewCerts(t)
	tlsSrv := redistest.StartServer(t, redistest.WithTLS(certs, true))
	for _, c := range []struct {
		name  string
		env   []string
		args  []string
		wants []string // in stderr
	}{
		{"wrong password", nil, []string{"--redis", fmt.Sprintf("redis://floodgate:wrong@%s", srv.Addr)},
			[]string{"--redis", "WRONGPASS", "misconfigured"}},
		{"unknown user", nil, []string{"--redis", fmt.Sprintf("redis://nobody:right-password@%s", srv.Addr)},
			[]string{"--redis", "WRONGPASS"}},
		{"database out of range", nil, []string{"--redis", good + "/99"},
			[]string{"--redis", "DB index"}},
		{"an ACL without scripts", nil, []string{"--redis", fmt.Sprintf("redis://clockonly:clock-pw@%s", srv.Addr)},
			[]string{"--redis", "NOPERM"}},
		{"port out of range", nil, []string{"--redis", "redis://" + host + ":99999"},
			[]string{"--redis", "port 99999", "1 to 65535"}},
		{"cluster seed without a port", nil, []string{"--redis-cluster", "foo"},
			[]string{"--redis-cluster", `"foo"`, "host:port"}},
		{"sentinel without a port", nil, []string{"--redis-sentinel", "mymaster@foo"},
			[]string{"--redis-sentinel", `"foo"`}},
		{"from the environment", []string{"FLOODGATE_REDIS_URL=redis://floodgate:wrong@" + srv.Addr}, nil,
			[]string{"FLOODGATE_REDIS_URL", "WRONGPASS"}},
		{"from the configuration", nil, []string{"--config", cfgWithURL("redis://floodgate:wrong@" + srv.Addr)},
			[]string{"store.url of ", "WRONGPASS"}},
		{"a port in the configuration", nil, []string{"--config", cfgWithURL("redis://" + host + ":99999")},
			[]string{"store.url", "port 99999"}},
		{"TLS: a server certificate of an unknown CA", nil, []string{"--redis", "rediss://" + tlsSrv.TLSAddr},
			[]string{"--redis", "certificate signed by unknown authority", "store.tls.ca_file"}},
		{"TLS: no client certificate", nil, []string{"--config", writeConfig(t, "policies: {api: \"gcra 10/1s\"}\nstore:\n  url: rediss://"+tlsSrv.TLSAddr+"\n  tls: {ca_file: "+certs.CAFile+"}\n")},
			[]string{"store.url of ", "certificate required", "store.tls.cert_file"}},
		{"TLS to a server that has none", nil, []string{"--redis", "rediss://" + srv.Addr},
			[]string{"--redis", "answers without TLS"}},
		{"no TLS to a server that demands it", nil, []string{"--redis", "redis://" + tlsSrv.TLSAddr},
			[]string{"--redis", "speaks TLS: write its address rediss://"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			exitsAtOnce(t, c.env, append(append([]string{"serve"}, listen...), c.args...), c.wants, "right-password", "wrong@", ":wrong")
		})
	}
	_ = port

	t.Run("TLS with the CA and a client certificate: decides", func(t *testing.T) {
		// A timeout of a minute: a busy machine's TLS handshake, or a
		// goroutine stalled for seconds, must not degrade the decision
		// this checks.
		path := writeConfig(t, "policies: {api: \"gcra 10/1s\"}\nstore:\n  timeout: 1m\n  url: rediss://"+tlsSrv.TLSAddr+
			"\n  tls: {ca_file: "+certs.CAFile+", cert_file: "+certs.ClientCert+", key_file: "+certs.ClientKey+"}\n")
		s := start(t, cleanEnv(), append(append([]string{"serve"}, listen...), "--config", path)...)
		defer s.stop()
		resp, r, err := post(s.http, "/v1/check", `{"policy":"api","key":"k"}`)
		if err != nil || resp.StatusCode != http.StatusOK || len(r.Decisions) != 1 || r.Decisions[0].Degraded {
			t.Fatalf("check over TLS: %v %+v", err, r)
		}
		if n, err := tlsSrv.Do(t, "DBSIZE"); err != nil || n.(int64) != 1 {
			t.Errorf("the TLS server holds %v keys (%v), want the decision's one", n, err)
		}
	})
	t.Run("TLS: a certificate that names another host", func(t *testing.T) {
		// A managed Redis's certificate names its endpoint, not the
		// address dialed: refused at once without store.tls.server_name,
		// decided with it.
		named := redistest.NewCertsNamed(t, "redis.internal")
		srv := redistest.StartServer(t, redistest.WithTLS(named, false))
		conf := func(extra string) string {
			return writeConfig(t, "policies: {api: \"gcra 10/1s\"}\nstore:\n  timeout: 1m\n  url: rediss://"+srv.TLSAddr+"\n  tls: {ca_file: "+named.CAFile+extra+"}\n")
		}
		exitsAtOnce(t, nil, append(append([]string{"serve"}, listen...), "--config", conf("")),
			[]string{"cannot validate certificate for 127.0.0.1", "set store.tls.server_name to a name it carries"})
		s := start(t, cleanEnv(), append(append([]string{"serve"}, listen...), "--config", conf(", server_name: redis.internal"))...)
		defer s.stop()
		resp, r, err := post(s.http, "/v1/check", `{"policy":"api","key":"k"}`)
		if err != nil || resp.StatusCode != http.StatusOK || len(r.Decisions) != 1 || r.Decisions[0].Degraded {
			t.Fatalf("check with store.tls.server_name: %v %+v", err, r)
		}
	})
	t.Run("not answering: waits --store-wait, then exits", func(t *testing.T) {
		code, stderr, took := exitOf(t, cleanEnv(), 30*time.Second, append(append([]string{"serve"}, listen...), "--redis", "redis://"+refused, "--store-wait", "1500ms")...)
		if code == 0 || took < 1500*time.Millisecond {
			t.Fatalf("exit %d after %v; want non-zero after --store-wait 1.5s:\n%s", code, took, stderr)
		}
		for _, w := range []string{"did not answer within 1.5s (--store-wait)", "--start-degraded", "connection refused"} {
			if !strings.Contains(stderr, w) {
				t.Errorf("stderr lacks %q:\n%s", w, stderr)
			}
		}
	})
	t.Run("a replica: says so, waits --store-wait, then exits", func(t *testing.T) {
		replica := redistest.StartServer(t)
		master := redistest.StartServer(t)
		h, p, _ := net.SplitHostPort(master.Addr)
		if _, err := replica.Do(t, "REPLICAOF", h, p); err != nil {
			t.Fatal(err)
		}
		refusedAtStart(t, listen, replica.Addr, "1500ms", "Redis answers as a read-only replica; waiting for it to become a master",
			"the store (--redis) is a read-only replica, and did not become a master within 1.5s (--store-wait)", "READONLY",
			"point it at the master, or at the Sentinels (--redis-sentinel)")

		// Started degraded, it is not ready while the server is a
		// replica (which answers PING and TIME), and is once the
		// replica is promoted; then it decides on it.
		degradedUntilMended(t, listen, replica.Addr, "READONLY", "starting degraded: the store is a read-only replica", func() {
			if _, err := replica.Do(t, "REPLICAOF", "NO", "ONE"); err != nil {
				t.Fatal(err)
			}
		})
	})
	t.Run("a full Redis: says so, waits --store-wait, then exits", func(t *testing.T) {
		// maxmemory of 1 byte and noeviction (the default policy): the
		// server answers PING and TIME and refuses every write (OOM).
		full := redistest.StartServer(t)
		if _, err := full.Do(t, "CONFIG", "SET", "maxmemory", "1"); err != nil {
			t.Fatal(err)
		}
		refusedAtStart(t, listen, full.Addr, "1500ms", "Redis is full: it refuses writes (its used memory is above its maxmemory); waiting for room",
			"the store (--redis) is full: its used memory is above its maxmemory, and it refused writes for 1.5s (--store-wait)", "OOM",
			`give it more memory (maxmemory) or let it evict (maxmemory-policy: see "Redis memory" in docs/operations.md)`)

		// Started degraded, it is not ready while the server is full,
		// and is once it has room; then it decides on it.
		degradedUntilMended(t, listen, full.Addr, "OOM", "starting degraded: the store is full (out of memory)", func() {
			if _, err := full.Do(t, "CONFIG", "SET", "maxmemory", "0"); err != nil {
				t.Fatal(err)
			}
		})
	})
	t.Run("a server that refuses writes: says why, waits --store-wait, then exits", func(t *testing.T) {
		var misconfDir string
		for _, c := range []struct {
			name        string
			args        []string // redis-server's, beyond --dir
			setup       func(t *testing.T, srv *redistest.Server)
			wants       []string
			reply, line string   // /readyz's and --start-degraded's
			mend        []string // the command that mends it
		}{
			{"MISCONF: its snapshot fails", nil, func(t *testing.T, srv *redistest.Server) {
				// A save point, and a BGSAVE into a directory that is
				// gone: Redis refuses writes until a save succeeds.
				if _, err := srv.Do(t, "CONFIG", "SET", "save", "3600 1"); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					// Else SIGTERM's save fails too, and Redis stays up.
					if _, err := srv.Do(t, "CONFIG", "SET", "save", ""); err != nil {
						t.Error(err)
					}
				})
				if err := os.RemoveAll(misconfDir); err != nil {
					t.Fatal(err)
				}
				if _, err := srv.Do(t, "BGSAVE"); err != nil {
					t.Fatal(err)
				}
				for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
					info, err := srv.Do(t, "INFO", "persistence")
					if err != nil {
						t.Fatal(err)
					}
					if strings.Contains(fmt.Sprint(info), "rdb_last_bgsave_status:err") {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("the BGSAVE did not fail: %v", info)
					}
				}
			}, []string{"Redis refuses writes: it cannot save its RDB snapshot (stop-writes-on-bgsave-error); waiting for it",
				"the store (--redis) cannot save its RDB snapshot, and refused writes (stop-writes-on-bgsave-error) for 1s (--store-wait)", "MISCONF",
				"set stop-writes-on-bgsave-error no"},
				"MISCONF", "starting degraded: the store refuses writes: it cannot save its RDB snapshot (MISCONF)",
				[]string{"CONFIG", "SET", "stop-writes-on-bgsave-error", "no"}},
			{"NOREPLICAS: too few replicas", nil, func(t *testing.T, srv *redistest.Server) {
				if _, err := srv.Do(t, "CONFIG", "SET", "min-replicas-to-write", "1"); err != nil {
					t.Fatal(err)
				}
			}, []string{"Redis refuses writes: it has fewer good replicas than its min-replicas-to-write; waiting for them",
				"the store (--redis) has fewer good replicas than its min-replicas-to-write, and refused writes for 1s (--store-wait)", "NOREPLICAS",
				"lower min-replicas-to-write"},
				"NOREPLICAS", "starting degraded: the store refuses writes: it has fewer good replicas than its min-replicas-to-write (NOREPLICAS)",
				[]string{"CONFIG", "SET", "min-replicas-to-write", "0"}},
			// 100,000 keys loaded at 150 µs each: at least 15 s of
			// LOADING, far beyond --store-wait, whatever the machine's
			// speed; answering while it loads, after every 1 KiB read
			// (about 100 keys, 15 ms).
			{"LOADING: its dataset", []string{"--key-load-delay", "150", "--loading-process-events-interval-bytes", "1024"},
				func(t *testing.T, srv *redistest.Server) {
					if _, err := srv.Do(t, "EVAL", "for i = 1, 100000 do redis.call('SET', 'k' .. i, i) end", "0"); err != nil {
						t.Fatal(err)
					}
					if _, err := srv.Do(t, "SAVE"); err != nil {
						t.Fatal(err)
					}
					srv.Restart(t) // it answers INFO while it loads
					if _, err := srv.Do(t, "GET", "k1"); err == nil || !strings.Contains(err.Error(), "LOADING") {
						t.Fatalf("after the restart, GET: %v; want LOADING", err)
					}
				}, []string{"Redis is loading its dataset into memory; waiting for it",
					"the store (--redis) was still loading its dataset after 1s (--store-wait)", "LOADING",
					"give --store-wait the time its load takes"},
				"LOADING", "starting degraded: the store is loading its dataset (LOADING)",
				// The rest loads at once.
				[]string{"CONFIG", "SET", "key-load-delay", "0"}},
		} {
			t.Run(c.name, func(t *testing.T) {
				// The server's working directory, its own (Redis 7 does
				// not let CONFIG SET change it): the MISCONF case removes it.
				misconfDir = t.TempDir()
				srv := redistest.StartServer(t, redistest.WithArgs(append([]string{"--dir", misconfDir}, c.args...)...))
				c.setup(t, srv)
				refusedAtStart(t, listen, srv.Addr, "1s", c.wants...)
				degradedUntilMended(t, listen, srv.Addr, c.reply, c.line, func() {
					if _, err := srv.Do(t, c.mend...); err != nil {
						t.Fatal(err)
					}
				})
			})
		}
	})
	t.Run("a reload to another store", func(t *testing.T) {
		// The new settings apply at the next start: a store no retry can
		// mend is refused now; one that cannot decide yet (here: full) is
		// taken, with a warning that says why it does not decide.
		full := redistest.StartServer(t)
		if _, err := full.Do(t, "CONFIG", "SET", "maxmemory", "1"); err != nil {
			t.Fatal(err)
		}
		path := writeConfig(t, "policies: {api: \"gcra 10/1s\"}\n")
		s := start(t, cleanEnv(), "serve", "--config", path, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--watch", "50ms")
		defer s.stop()
		rewrite := func(text string) {
			if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		// A minute: a loaded machine may take long to notice the file.
		rewrite("policies: {api: \"gcra 10/1s\"}\nstore: {url: \"redis://floodgate:wrong@" + srv.Addr + "\"}\n")
		_, at, ok := s.logs.waitFor(regexp.MustCompile(`the new store settings: .*WRONGPASS`), 0, time.Minute)
		if !ok {
			t.Fatalf("a reload to a store with a wrong password is not refused naming WRONGPASS:\n%s", s.logs)
		}
		rewrite("policies: {api: \"gcra 10/1s\"}\nstore: {url: \"redis://" + full.Addr + "\"}\n")
		if _, _, ok := s.logs.waitFor(regexp.MustCompile(`the store settings changed.*new_store_answers=false.*OOM`), at, time.Minute); !ok {
			t.Errorf("the warning of a reload to a full store does not say why it does not decide (OOM):\n%s", s.logs)
		}
	})
	t.Run("sentinels that monitor no such master", func(t *testing.T) {
		// The sentinels answer: the name is wrong, which no wait mends.
		sn := redistest.StartSentinel(t)
		code, stderr, took := exitOf(t, cleanEnv(), 30*time.Second, append(append([]string{"serve"}, listen...),
			"--redis-sentinel", "nosuch@"+strings.Join(sn.Addrs, ","), "--store-wait", "1m")...)
		if code == 0 {
			t.Fatalf("exit status 0:\n%s", stderr)
		}
		if took > 20*time.Second {
			t.Errorf("exited after %v with --store-wait 1m: it waited for the store", took)
		}
		for _, w := range []string{`3 of the 3 sentinels answer, and none monitors a master named "nosuch" (they monitor "` + sn.MasterName + `")`,
			"(--redis-sentinel): fix it and start again"} {
			if !strings.Contains(stderr, w) {
				t.Errorf("stderr lacks %q:\n%s", w, stderr)
			}
		}
		if strings.Contains(stderr, "unreachable") {
			t.Errorf("stderr calls sentinels that answer unreachable:\n%s", stderr)
		}
	})
	t.Run("sentinels and a master that ask for passwords", func(t *testing.T) {
		// Each refusal is final: serve names the setting and exits at
		// once; with both passwords it decides.
		sn := redistest.StartSentinel(t, redistest.WithMasterAuth("", "master-secret"), redistest.WithSentinelAuth("", "sentinel-secret"))
		sentinels := "--redis-sentinel=" + sn.MasterName + "@" + strings.Join(sn.Addrs, ",")
		masterPW, sentinelPW := "FLOODGATE_REDIS_PASSWORD=master-secret", "FLOODGATE_REDIS_SENTINEL_PASSWORD=sentinel-secret"
		for _, c := range []struct {
			name  string
			env   []string
			args  []string
			wants []string
		}{
			{"no sentinel password", []string{masterPW}, []string{sentinels},
				[]string{"the sentinels ask for a password", "store.sentinel_password or FLOODGATE_REDIS_SENTINEL_PASSWORD", "(--redis-sentinel)"}},
			{"a wrong sentinel password", []string{masterPW, "FLOODGATE_REDIS_SENTINEL_PASSWORD=wrong-secret"}, []string{sentinels},
				[]string{"the sentinels refuse the credentials", "FLOODGATE_REDIS_SENTINEL_PASSWORD"}},
			{"no master password", []string{sentinelPW}, []string{sentinels},
				[]string{"the master the sentinels name", "asks for a password", "store.password or FLOODGATE_REDIS_PASSWORD"}},
			{"an unknown master, asked with the password", []string{masterPW, sentinelPW}, []string{"--redis-sentinel=nosuch@" + strings.Join(sn.Addrs, ",")},
				[]string{`3 of the 3 sentinels answer, and none monitors a master named "nosuch"`}},
			{"the sentinels' password for a single server", []string{sentinelPW}, []string{"--redis", "redis://" + sn.Master.Addr},
				[]string{"FLOODGATE_REDIS_SENTINEL_PASSWORD: applies to a store behind Sentinel", `found store type "redis"`}},
			{"a sentinel user without a password", []string{masterPW}, []string{sentinels, "--config", writeConfig(t, "policies: {api: \"gcra 10/1s\"}\nstore: {sentinel_username: watcher}\n")},
				[]string{`store.sentinel_username "watcher" needs a password`}},
		} {
			t.Run(c.name, func(t *testing.T) {
				exitsAtOnce(t, c.env, append(append([]string{"serve"}, listen...), c.args...), c.wants, "-secret")
			})
		}
		t.Run("both passwords: decides", func(t *testing.T) {
			path := writeConfig(t, "policies: {api: \"gcra 10/1s\"}\nstore:\n  timeout: 1m\n  sentinel_password: sentinel-secret\n")
			s := start(t, cleanEnv(masterPW), append(append([]string{"serve"}, listen...), sentinels, "--config", path)...)
			defer s.stop()
			resp, r, err := post(s.http, "/v1/check", `{"policy":"api","key":"k"}`)
			if err != nil || resp.StatusCode != http.StatusOK || len(r.Decisions) != 1 || r.Decisions[0].Degraded {
				t.Fatalf("check behind sentinels with passwords: %v %+v", err, r)
			}
			if n, err := sn.Master.Do(t, "DBSIZE"); err != nil || n.(int64) != 1 {
				t.Errorf("the master holds %v keys (%v), want the decision's one", n, err)
			}
		})
	})
	t.Run("not answering, --start-degraded: serves unready", func(t *testing.T) {
		began := time.Now()
		s := start(t, cleanEnv(), append(append([]string{"serve"}, listen...),
			"--redis", "redis://"+refused, "--store-wait", "500ms", "--start-degraded", "--log-format", "json")...)
		if code, _ := get(t, s.http, "/readyz"); code != http.StatusServiceUnavailable {
			t.Errorf("/readyz %d, want 503", code)
		}
		for range 200 {
			resp, r, err := post(s.http, "/v1/check", `{"policy":"api","key":"k"}`)
			if err != nil || resp.StatusCode != http.StatusOK || len(r.Decisions) != 1 || !r.Decisions[0].Degraded {
				t.Fatalf("check with the store down, failing open: %v %+v", err, r)
			}
		}
		s.stop()
		ran := time.Since(began)
		// Every line is JSON, go-redis's own included, and those come at
		// most one a second.
		redisLines := 0
		for _, line := range strings.Split(strings.TrimSpace(s.logs.String()), "\n") {
			var v map[string]any
			if err := json.Unmarshal([]byte(line), &v); err != nil {
				t.Errorf("a log line that is not JSON: %q", line)
				continue
			}
			if v["msg"] == "redis client" {
				redisLines++
			}
		}
		if redisLines == 0 || redisLines > int(ran/time.Second)+1 {
			t.Errorf("%d lines of the Redis client in %v; want some, at most one a second", redisLines, ran)
		}
		if !strings.Contains(s.logs.String(), "starting degraded") {
			t.Errorf("the log does not say it starts degraded:\n%s", s.logs)
		}
	})
}

// refusedAtStart runs serve at a Redis that answers and refuses writes,
// with --store-wait wait: serve must wait that long, then exit non-zero,
// its stderr holding every one of wants and never saying that the server
// does not answer.
func refusedAtStart(t *testing.T, listen []string, addr, wait string, wants ...string) {
	t.Helper()
	d, err := time.ParseDuration(wait)
	if err != nil {
		t.Fatal(err)
	}
	code, stderr, took := exitOf(t, cleanEnv(), 30*time.Second, append(append([]string{"serve"}, listen...), "--redis", "redis://"+addr, "--store-wait", wait)...)
	if code == 0 || took < d {
		t.Fatalf("exit %d after %v; want non-zero after --store-wait %v:\n%s", code, took, d, stderr)
	}
	for _, w := range wants {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr lacks %q:\n%s", w, stderr)
		}
	}
	if strings.Contains(stderr, "not answering") || strings.Contains(stderr, "did not answer") {
		t.Errorf("stderr calls a server that answers one that does not:\n%s", stderr)
	}
	if strings.Contains(stderr, ".;") {
		t.Errorf("stderr ends Redis's reply with a full stop before the advice (\".;\"):\n%s", stderr)
	}
}

// degradedUntilMended starts serve --start-degraded at a Redis that
// refuses writes: /readyz must answer 503 naming reply (the refusal's
// code) and the log hold logLine; once mend has run, /readyz must answer
// 200 within 30 s, and a check be decided by the store. The store's
// timeout is 2 s (20 s for /readyz's check), not the default 50 ms: a
// server loading its dataset, or a loaded machine, may take longer to
// answer than that, which would say "timeout" where the test looks for
// the server's reply, or degrade the check.
func degradedUntilMended(t *testing.T, listen []string, addr, reply, logLine string, mend func()) {
	t.Helper()
	conf := writeConfig(t, "policies: {api: \"gcra 10/1s\"}\nstore: {timeout: 2s}\n")
	s := start(t, cleanEnv(), append(append([]string{"serve"}, listen...),
		"--config", conf, "--redis", "redis://"+addr, "--store-wait", "500ms", "--start-degraded")...)
	defer s.stop()
	if code, body := get(t, s.http, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, reply) {
		t.Errorf("/readyz: %d %s; want 503 naming %s", code, body, reply)
	}
	if !strings.Contains(s.logs.String(), logLine) {
		t.Errorf("the log lacks %q:\n%s", logLine, s.logs)
	}
	mend()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		code, body := get(t, s.http, "/readyz")
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz %d %s 30 s after the store was mended", code, body)
		}
	}
	resp, r, err := post(s.http, "/v1/check", `{"policy":"api","key":"k"}`)
	if err != nil || resp.StatusCode != http.StatusOK || len(r.Decisions) != 1 || r.Decisions[0].Degraded {
		t.Errorf("check once the store was mended: %v %+v", err, r)
	}
}
