package redistest

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// mustDo runs a command that must succeed and returns its reply.
func mustDo(t *testing.T, s *Server, args ...string) any {
	t.Helper()
	reply, err := s.Do(t, args...)
	if err != nil {
		t.Fatalf("%v on %s: %v", args, s.Addr, err)
	}
	return reply
}

// wantRedisError checks that err is an error reply starting with prefix.
func wantRedisError(t *testing.T, what string, err error, prefix string) {
	t.Helper()
	var re Error
	if !errors.As(err, &re) || !strings.HasPrefix(string(re), prefix) {
		t.Errorf("%s: error %v, want a %s error reply", what, err, prefix)
	}
}

func TestServerLifecycle(t *testing.T) {
	t.Parallel()
	s := StartServer(t)
	if s.Port == 0 || s.Port == sharedPort || s.Addr != "127.0.0.1:"+strconv.Itoa(s.Port) {
		t.Fatalf("Addr %q, Port %d", s.Addr, s.Port)
	}
	if got := mustDo(t, s, "PING"); got != "PONG" {
		t.Errorf("PING = %#v, want PONG", got)
	}
	mustDo(t, s, "SET", "k", "v")
	if got := mustDo(t, s, "GET", "k"); got != "v" {
		t.Errorf("GET k = %#v, want v", got)
	}
	if got := mustDo(t, s, "GET", "missing"); got != nil {
		t.Errorf("GET missing = %#v, want nil", got)
	}
	if got := mustDo(t, s, "INCR", "n"); got != int64(1) {
		t.Errorf("INCR = %#v, want int64 1", got)
	}
	if got := mustDo(t, s, "CONFIG", "GET", "save"); len(got.([]any)) != 2 || got.([]any)[1] != "" {
		t.Errorf("CONFIG GET save = %#v, want persistence off", got)
	}
	_, err := s.Do(t, "NOSUCHCOMMAND")
	wantRedisError(t, "unknown command", err, "ERR")

	s.Stop(t)
	if _, err := s.Do(t, "PING"); err == nil {
		t.Error("PING answered after Stop")
	}
	s.Stop(t) // idempotent
	s.Restart(t)
	if got := mustDo(t, s, "PING"); got != "PONG" {
		t.Errorf("PING after Restart = %#v", got)
	}
	if got := mustDo(t, s, "GET", "k"); got != nil {
		t.Errorf("GET k after Restart = %#v, want nil (no persistence)", got)
	}
	s.Kill(t)
	if _, err := s.Do(t, "PING"); err == nil {
		t.Error("PING answered after Kill")
	}
	s.Kill(t) // idempotent
	s.Stop(t)
	s.Restart(t)
	s.Restart(t) // of a running server
	if got := mustDo(t, s, "PING"); got != "PONG" {
		t.Errorf("PING after second Restart = %#v", got)
	}
	if log := s.LogTail(100); strings.Count(log, "Ready to accept connections") != 4 {
		t.Errorf("log shows %d starts, want 4:\n%s", strings.Count(log, "Ready to accept connections"), log)
	}
	if n := strings.Count(s.LogTail(3), "\n"); n != 2 {
		t.Errorf("LogTail(3) has %d newlines, want 2", n)
	}
}

func TestWithUser(t *testing.T) {
	t.Parallel()
	s := StartServer(t, WithUser("floodgate", `pa ss"word`))
	if s.User != "floodgate" || s.Password != `pa ss"word` {
		t.Fatalf("User %q, Password %q", s.User, s.Password)
	}
	for range 2 {
		if got := mustDo(t, s, "PING"); got != "PONG" {
			t.Errorf("PING as the user = %#v", got)
		}
		_, err := do(s.Addr, "", "", "PING")
		wantRedisError(t, "unauthenticated PING", err, "NOAUTH")
		_, err = do(s.Addr, "floodgate", "wrong", "PING")
		wantRedisError(t, "wrong password", err, "WRONGPASS")
		_, err = do(s.Addr, "", `pa ss"word`, "PING")
		wantRedisError(t, "password without user (the default user)", err, "WRONGPASS")
		s.Restart(t) // the ACL survives
	}
}

func TestWithArgsAndPort(t *testing.T) {
	t.Parallel()
	port, err := reservePort(false)
	if err != nil {
		t.Fatal(err)
	}
	release(port, false) // WithPort reserves it again
	s := StartServer(t, WithPort(port), WithArgs("--maxmemory", "12345678"), WithArgs("--hz", "20"))
	if s.Port != port {
		t.Errorf("Port %d, want %d", s.Port, port)
	}
	if got := mustDo(t, s, "CONFIG", "GET", "maxmemory"); got.([]any)[1] != "12345678" {
		t.Errorf("CONFIG GET maxmemory = %#v", got)
	}
	s.Restart(t)
	if got := mustDo(t, s, "CONFIG", "GET", "hz"); got.([]any)[1] != "20" {
		t.Errorf("CONFIG GET hz after Restart = %#v", got)
	}
}

func TestParallelServersGetDistinctPorts(t *testing.T) {
	t.Parallel()
	const n = 6
	servers := make([]*Server, n)
	var wg sync.WaitGroup
	for i := range servers {
		wg.Go(func() { servers[i] = StartServer(t) })
	}
	wg.Wait()
	seen := map[int]bool{}
	for _, s := range servers {
		if seen[s.Port] {
			t.Errorf("port %d handed out twice", s.Port)
		}
		seen[s.Port] = true
		if got := mustDo(t, s, "PING"); got != "PONG" {
			t.Errorf("PING %s = %#v", s.Addr, got)
		}
	}
}

func TestCluster(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := StartCluster(t, 3)
	t.Logf("3 masters up in %v", time.Since(start))
	if len(c.Addrs) != 3 || len(c.Nodes) != 3 {
		t.Fatalf("%d addresses, %d nodes", len(c.Addrs), len(c.Nodes))
	}
	for i, s := range c.Nodes {
		if c.Addrs[i] != s.Addr {
			t.Errorf("Addrs[%d] = %s, Nodes[%d].Addr = %s", i, c.Addrs[i], i, s.Addr)
		}
		info := mustDo(t, s, "CLUSTER", "INFO").(string)
		for field, want := range map[string]string{
			"cluster_state": "ok", "cluster_slots_assigned": "16384", "cluster_slots_ok": "16384",
			"cluster_known_nodes": "3", "cluster_size": "3",
		} {
			if got := infoField(info, field); got != want {
				t.Errorf("%s: %s:%s, want %s", s.Addr, field, got, want)
			}
		}
	}
	if got := mustDo(t, c.Nodes[0], "CLUSTER", "KEYSLOT", "foo"); got != int64(12182) {
		t.Errorf("CLUSTER KEYSLOT foo = %#v, want 12182", got)
	}
	// Slot 12182 lies in the third range, [10923, 16383].
	owner := c.Nodes[2]
	mustDo(t, owner, "SET", "foo", "bar")
	_, err := c.Nodes[0].Do(t, "GET", "foo")
	wantRedisError(t, "GET foo on another node", err, "MOVED 12182 "+owner.Addr)

	// A restarted node keeps its identity and slots and the cluster heals.
	start = time.Now()
	owner.Restart(t)
	c.Wait(t)
	t.Logf("restarted node back in %v", time.Since(start))
	if got := mustDo(t, owner, "GET", "foo"); got != nil {
		t.Errorf("GET foo after restart = %#v, want nil", got)
	}
	mustDo(t, owner, "SET", "foo", "baz")
}

// TestClusterReplicas: WithReplicas gives each master a replica in sync,
// which every node lists and which serves reads of its master's slots.
func TestClusterReplicas(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := StartCluster(t, 3, WithReplicas(1))
	t.Logf("3 masters with a replica each up in %v", time.Since(start))
	if len(c.Replicas) != 3 {
		t.Fatalf("%d replica sets, want 3", len(c.Replicas))
	}
	for i, rs := range c.Replicas {
		if len(rs) != 1 {
			t.Fatalf("master %d has %d replicas, want 1", i, len(rs))
		}
		info := mustDo(t, rs[0], "INFO", "replication").(string)
		if infoField(info, "role") != "slave" || infoField(info, "master_port") != strconv.Itoa(c.Nodes[i].Port) {
			t.Errorf("replica %s: role %s of port %s, want a replica of %s", rs[0].Addr, infoField(info, "role"), infoField(info, "master_port"), c.Nodes[i].Addr)
		}
		cinfo := mustDo(t, rs[0], "CLUSTER", "INFO").(string)
		if got := infoField(cinfo, "cluster_known_nodes"); got != "6" {
			t.Errorf("replica %s knows %s nodes, want 6", rs[0].Addr, got)
		}
	}
	// Slot 12182 (foo) lies in the third range; its replica serves it once
	// the write has reached it.
	mustDo(t, c.Nodes[2], "SET", "foo", "bar")
	replica := c.Replicas[2][0]
	if err := poll(30*time.Second, func() error {
		reply, err := replica.Do(t, "GET", "foo")
		if err == nil {
			return fmt.Errorf("GET foo on a replica without READONLY answered %v, want MOVED", reply)
		}
		var re Error
		if errors.As(err, &re) && strings.HasPrefix(string(re), "MOVED") {
			return nil
		}
		return err
	}); err != nil {
		t.Error(err)
	}
	// The write may still be on its way to the replica.
	if err := poll(30*time.Second, func() error {
		if n := mustDo(t, replica, "DBSIZE"); n != int64(1) {
			return fmt.Errorf("replica holds %v keys, want 1", n)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}

func TestSentinel(t *testing.T) {
	t.Parallel()
	start := time.Now()
	sn := StartSentinel(t)
	t.Logf("master, replica and 3 sentinels up in %v", time.Since(start))
	if len(sn.Addrs) != 3 || len(sn.Sentinels) != 3 || sn.MasterName == "" {
		t.Fatalf("%d addresses, %d sentinels, master name %q", len(sn.Addrs), len(sn.Sentinels), sn.MasterName)
	}
	for i, s := range sn.Sentinels {
		if sn.Addrs[i] != s.Addr {
			t.Errorf("Addrs[%d] = %s, Sentinels[%d].Addr = %s", i, sn.Addrs[i], i, s.Addr)
		}
		got := mustDo(t, s, "SENTINEL", "get-master-addr-by-name", sn.MasterName).([]any)
		if len(got) != 2 || got[0] != "127.0.0.1" || got[1] != strconv.Itoa(sn.Master.Port) {
			t.Errorf("sentinel %s: master at %v, want %s", s.Addr, got, sn.Master.Addr)
		}
	}
	info := mustDo(t, sn.Replica, "INFO", "replication").(string)
	if infoField(info, "role") != "slave" || infoField(info, "master_port") != strconv.Itoa(sn.Master.Port) {
		t.Errorf("replica's INFO replication:\n%s", info)
	}
	mustDo(t, sn.Master, "SET", "k", "v")

	// A restarted sentinel keeps monitoring the master.
	sn.Sentinels[0].Restart(t)
	got := mustDo(t, sn.Sentinels[0], "SENTINEL", "get-master-addr-by-name", sn.MasterName).([]any)
	if len(got) != 2 || got[1] != strconv.Itoa(sn.Master.Port) {
		t.Errorf("restarted sentinel: master at %v, want %s", got, sn.Master.Addr)
	}
}

// fakeTB records Errorf, Fatal and Skip instead of acting on them, and
// ends the goroutine where they would. Run what uses it in a goroutine of
// its own (see capture).
type fakeTB struct {
	testing.TB
	mu                  sync.Mutex
	errors, fatal, skip string
}

func (f *fakeTB) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errors += fmt.Sprintf(format, args...) + "\n"
}
func (f *fakeTB) FailNow()          { runtime.Goexit() }
func (f *fakeTB) Fatal(args ...any) { f.fatal = fmt.Sprint(args...); runtime.Goexit() }
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (f *fakeTB) Skip(args ...any) { f.skip = fmt.Sprint(args...); runtime.Goexit() }

// capture runs fn with a fakeTB wrapping t and returns the fakeTB once fn
// has returned or stopped the goroutine.
func capture(t *testing.T, fn func(testing.TB)) *fakeTB {
	f := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	return f
}

func TestBinaryMissing(t *testing.T) {
	if Binary(t) == "" {
		t.Fatal("Binary returned an empty path")
	}
	t.Setenv("PATH", t.TempDir())
	t.Setenv("FLOODGATE_REQUIRE_REDIS", "")
	f := capture(t, func(tb testing.TB) { Binary(tb) })
	if f.skip == "" || f.fatal != "" {
		t.Errorf("without FLOODGATE_REQUIRE_REDIS: Skip(%q), Fatal(%q), want the test skipped", f.skip, f.fatal)
	}
	t.Setenv("FLOODGATE_REQUIRE_REDIS", "1")
	f = capture(t, func(tb testing.TB) { Binary(tb) })
	if f.fatal != "redis-server not found; make test installs it" {
		t.Errorf("with FLOODGATE_REQUIRE_REDIS=1: Fatal(%q), want the test failed", f.fatal)
	}
}

// TestPortTaken starts servers on a port someone else listens on: a chosen
// port is replaced, a port given with WithPort fails the test.
func TestPortTaken(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	busy := l.Addr().(*net.TCPAddr).Port

	s := newServer(t, Binary(t), options{}).plain()
	if !reserve(busy, false) {
		t.Fatalf("port %d already reserved", busy)
	}
	s.Port = busy // as if reservePort had picked it
	s.mu.Lock()
	err = s.start(false)
	s.mu.Unlock()
	if err != nil {
		t.Fatalf("start after a taken port: %v\n%s", err, s.tail())
	}
	if s.Port == busy || mustDo(t, s, "PING") != "PONG" {
		t.Errorf("server on %s, want it moved off the taken port %d", s.Addr, busy)
	}
	if !strings.Contains(s.LogTail(-1), "Address already in use") {
		t.Errorf("the log does not show the failed attempt:\n%s", s.LogTail(-1))
	}

	f := capture(t, func(tb testing.TB) { StartServer(tb, WithPort(busy)) })
	if !strings.Contains(f.errors, "port already in use") || !strings.Contains(f.errors, "Address already in use") {
		t.Errorf("WithPort(taken port) reported %q, want the port in use and the log", f.errors)
	}
	if f := capture(t, func(tb testing.TB) { StartServer(tb, WithPort(sharedPort)) }); !strings.Contains(f.fatal, "shared server") {
		t.Errorf("WithPort(6379) reported %q, want a refusal", f.fatal)
	}
}

// tlsDo sends one command over TLS with cfg and returns the raw first
// line of the reply.
func tlsDo(addr string, cfg *tls.Config, args ...string) (string, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 30 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second)) // only a hang
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	return strings.TrimSpace(line), err
}

// TestTLS: a server WithTLS answers over TLS a client that trusts the CA
// (and, with authClients, presents its certificate), refuses one that
// does not, and keeps its plain port for Do; a cluster WithClusterTLS
// names its TLS ports to a TLS client.
func TestTLS(t *testing.T) {
	certs := NewCerts(t)
	srv := StartServer(t, WithTLS(certs, true))
	if srv.TLSAddr == "" || srv.TLSPort == srv.Port {
		t.Fatalf("TLSAddr %q, TLSPort %d, Port %d", srv.TLSAddr, srv.TLSPort, srv.Port)
	}
	if got, err := tlsDo(srv.TLSAddr, certs.ClientConfig(), "PING"); err != nil || got != "+PONG" {
		t.Errorf("PING over TLS with a client certificate: %q, %v", got, err)
	}
	noCert := &tls.Config{RootCAs: certs.Pool}
	if got, err := tlsDo(srv.TLSAddr, noCert, "PING"); err == nil && got == "+PONG" {
		t.Error("a client without a certificate was answered (tls-auth-clients yes)")
	}
	if _, err := tlsDo(srv.TLSAddr, &tls.Config{}, "PING"); err == nil {
		t.Error("a client that does not trust the CA completed the handshake")
	}
	if reply, err := srv.Do(t, "PING"); err != nil || reply != "PONG" {
		t.Errorf("Do on the plain port: %v, %v", reply, err)
	}
	srv.Restart(t)
	if got, err := tlsDo(srv.TLSAddr, certs.ClientConfig(), "PING"); err != nil || got != "+PONG" {
		t.Errorf("PING over TLS after Restart: %q, %v", got, err)
	}

	cl := StartCluster(t, 3, WithClusterTLS(certs))
	if len(cl.TLSAddrs) != 3 {
		t.Fatalf("TLSAddrs %v", cl.TLSAddrs)
	}
	conn, err := tls.Dial("tcp", cl.TLSAddrs[0], certs.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second)) // only a hang
	c := &client{conn: conn, r: bufio.NewReader(conn), timeout: 30 * time.Second}
	slots, err := c.do("CLUSTER", "SLOTS")
	if err != nil {
		t.Fatal(err)
	}
	ports := map[int64]bool{}
	for _, r := range slots.([]any) {
		ports[r.([]any)[2].([]any)[1].(int64)] = true
	}
	for _, n := range cl.Nodes {
		if !ports[int64(n.TLSPort)] || ports[int64(n.Port)] {
			t.Errorf("CLUSTER SLOTS over TLS names ports %v; want the TLS port %d of %s", ports, n.TLSPort, n.Addr)
		}
	}
}

// TestSentinelAuth: with WithMasterAuth and WithSentinelAuth the master,
// the replica and the sentinels refuse clients without credentials, and
// still replicate and monitor each other; both forms, requirepass and an
// ACL user.
func TestSentinelAuth(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, masterUser, sentinelUser string }{
		{"requirepass", "", ""},
		{"ACL users", "app", "watcher"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			sn := StartSentinel(t, WithMasterAuth(c.masterUser, "master-secret"), WithSentinelAuth(c.sentinelUser, "sentinel-secret"))
			for _, s := range []*Server{sn.Master, sn.Replica, sn.Sentinels[0]} {
				if _, err := do(s.Addr, "", "", "PING"); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
					t.Errorf("PING %s without credentials: %v, want NOAUTH", s.Addr, err)
				}
			}
			if s := sn.Sentinels[1]; s.User != c.sentinelUser || s.Password != "sentinel-secret" {
				t.Errorf("a sentinel's credentials %q %q", s.User, s.Password)
			}
			// StartSentinel returned: each sentinel found the replica and
			// the two others, through the master and each other.
			mustDo(t, sn.Master, "SET", "k", "v")
			if reply, err := sn.Master.Do(t, "WAIT", "1", "10000"); err != nil || reply != int64(1) {
				t.Errorf("WAIT for the replica: %v %v", reply, err)
			}
		})
	}
}

// TestSentinelTLS: with WithSentinelTLS the sentinels monitor the master's
// TLS port and answer over TLS.
func TestSentinelTLS(t *testing.T) {
	certs := NewCerts(t)
	sn := StartSentinel(t, WithSentinelTLS(certs))
	if len(sn.TLSAddrs) != 3 {
		t.Fatalf("TLSAddrs %v", sn.TLSAddrs)
	}
	if got, err := tlsDo(sn.TLSAddrs[0], certs.ClientConfig(), "PING"); err != nil || got != "+PONG" {
		t.Errorf("PING a sentinel over TLS: %q, %v", got, err)
	}
}
