// Package redistest starts real redis-server processes for tests: single
// servers (StartServer), clusters (StartCluster) and Sentinel setups
// (StartSentinel). Each process listens on a free loopback port, keeps its
// configuration and log in its own temporary directory, runs with
// persistence off, and is stopped by t.Cleanup. The package talks to the
// servers with a small RESP client of its own and depends on the standard
// library only; production code must not import it.
//
// Every function may be called from parallel tests (t.Parallel): ports are
// chosen fresh for each server and never handed out twice by one test
// binary. On Linux a server is killed when the test binary dies, so an
// interrupted or crashed test run leaves no process behind.
//
// When redis-server is not on PATH, the helpers skip the calling test, or
// fail it when the environment sets FLOODGATE_REQUIRE_REDIS=1.
package redistest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	// startTimeout bounds the wait for a process to answer, and for a
	// cluster or Sentinel setup to settle.
	startTimeout = 15 * time.Second
	// stopTimeout is how long Stop waits after SIGTERM before SIGKILL.
	stopTimeout = 10 * time.Second
	// startAttempts is how many ports a start tries when redis-server finds
	// the chosen one taken.
	startAttempts = 5
	// busOffset is the distance from a cluster node's port to its bus port.
	busOffset = 10000
	// sharedPort is the development Redis's port, which redistest never uses.
	sharedPort = 6379
)

// Binary returns the path of redis-server found on PATH. When there is none
// it skips the test, or fails it if the environment variable
// FLOODGATE_REQUIRE_REDIS is "1". It is safe for concurrent use.
func Binary(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err == nil {
		return path
	}
	if os.Getenv("FLOODGATE_REQUIRE_REDIS") == "1" {
		t.Fatal("redis-server not found; make test installs it")
	}
	t.Skip("redis-server not found on PATH (set FLOODGATE_REQUIRE_REDIS=1 to fail instead)")
	return ""
}

// An Option configures StartServer.
type Option func(*options)

type options struct {
	user, password string
	args           []string
	port           int
	tls            *Certs
	authClients    bool
}

// WithUser creates the ACL user user with password and every permission
// (the rules of ACL SETUSER user on >password ~* &* +@all, set in the
// configuration file so that they survive Restart) and disables the default
// user, so the server refuses unauthenticated clients with NOAUTH and wrong
// passwords with WRONGPASS. Server.Do authenticates as this user. Both
// user and password must be non-empty.
func WithUser(user, password string) Option {
	return func(o *options) { o.user, o.password = user, password }
}

// WithArgs appends command-line arguments for redis-server, such as
// WithArgs("--maxmemory", "10mb"); they override the generated
// configuration and persist across Restart.
func WithArgs(args ...string) Option {
	return func(o *options) { o.args = append(o.args, args...) }
}

// WithPort makes the server listen on port instead of a free port chosen by
// the package. The test fails if the port is taken (or is 6379, the shared
// development server's).
func WithPort(port int) Option {
	return func(o *options) { o.port = port }
}

// WithTLS makes the server listen for TLS as well, on TLSPort, with the
// server certificate of certs; with authClients, a client must present a
// certificate signed by certs' CA (tls-auth-clients yes). Replication is
// over TLS too. The plain port stays open for this package's own client
// (Do, and the setup of clusters).
func WithTLS(certs *Certs, authClients bool) Option {
	return func(o *options) { o.tls, o.authClients = certs, authClients }
}

// A Server is one redis-server process started by this package. Its
// exported fields do not change once StartServer, StartCluster or
// StartSentinel has returned it. Stop,
// Kill and Restart may be called from any goroutine; calls are serialized.
// Do and LogTail may run concurrently with anything.
type Server struct {
	// Addr is "127.0.0.1:<Port>".
	Addr string
	// Port is the TCP port the server listens on, the same after Restart.
	Port int
	// User and Password are the credentials Do authenticates with (WithUser,
	// or StartSentinel's WithMasterAuth and WithSentinelAuth), or empty.
	User, Password string
	// TLSAddr is "127.0.0.1:<TLSPort>", where a server started WithTLS
	// listens for TLS; both are empty otherwise.
	TLSAddr string
	TLSPort int

	bin        string
	dir        string   // the server's temporary directory
	conf       string   // its configuration file, in dir
	directives []string // the configuration file's lines except port
	args       []string // command-line arguments after conf
	fixedPort  bool     // WithPort: never pick another port
	tls        *Certs   // WithTLS
	authTLS    bool     // WithTLS's authClients
	bus        bool     // a cluster node: port+busOffset must be free too

	mu   sync.Mutex // serializes starting and stopping; guards proc
	proc *process   // nil when not running
}

// process is one run of redis-server.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd.Wait returns
	err    error         // cmd.Wait's result, set before exited closes
}

// StartServer starts a redis-server with persistence off (save "",
// appendonly no), bound to 127.0.0.1 with protected mode off, its working
// directory and log file in a new t.TempDir(). It returns once the server
// answers, failing the test with the end of the server's log if it does
// not within 15 seconds. t.Cleanup stops the server. It is safe for
// concurrent use.
func StartServer(t testing.TB, opts ...Option) *Server {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	s := newServer(t, Binary(t), o).plain()
	startAll(t, s)
	return s
}

// newServer prepares a server that is not running yet and registers the
// cleanup that stops it and frees its port.
func newServer(t testing.TB, bin string, o options) *Server {
	t.Helper()
	dir := t.TempDir()
	s := &Server{
		User: o.user, Password: o.password,
		bin: bin, dir: dir, conf: filepath.Join(dir, "redis.conf"),
		args: o.args, tls: o.tls, authTLS: o.authClients,
		directives: []string{
			"bind 127.0.0.1",
			"protected-mode no",
			"daemonize no",
			"dir " + quote(dir),
			"logfile " + quote(filepath.Join(dir, "redis.log")),
		},
	}
	if o.port != 0 {
		if o.port == sharedPort || o.port < 1 || o.port > 65535 || !reserve(o.port, false) {
			t.Fatalf("redistest: WithPort(%d): port is invalid, the shared server's, or another test server's", o.port)
		}
		s.Port, s.fixedPort = o.port, true
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port))
	}
	if o.password != "" || o.user != "" {
		if o.user == "" || o.password == "" {
			t.Fatalf("redistest: WithUser(%q, %q): need a user name and a password", o.user, o.password)
		}
		s.directives = append(s.directives,
			"user "+quote(o.user)+" on "+quote(">"+o.password)+" ~* &* +@all",
			"user default off")
	}
	t.Cleanup(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if err := s.stop(); err != nil {
			t.Errorf("redistest: %v", err)
		}
		if s.Port != 0 {
			release(s.Port, s.bus)
		}
		if s.TLSPort != 0 {
			release(s.TLSPort, s.bus)
		}
	})
	return s
}

// plain adds the directives of a data server (not a sentinel) to s.
func (s *Server) plain() *Server {
	s.directives = append(s.directives,
		`save ""`,
		"appendonly no",
		"shutdown-timeout 0", // do not wait for replicas on SIGTERM
	)
	return s
}

// startAll starts servers concurrently and fails the test, with the end of
// each failed server's log, if any does not come up.
func startAll(t testing.TB, servers ...*Server) {
	t.Helper()
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Go(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			errs[i] = s.start(false)
		})
	}
	wg.Wait()
	failed := false
	for i, err := range errs {
		if err != nil {
			failed = true
			t.Errorf("redistest: redis-server on %s did not start: %v\n%s", servers[i].Addr, err, servers[i].tail())
		}
	}
	if failed {
		t.FailNow()
	}
}

var errPortInUse = errors.New("port already in use")

// start starts the process and waits until it answers. On a first start
// without WithPort it picks a free port, and another one when redis-server
// finds it taken; otherwise it retries the same port a few times. A restart
// keeps the configuration file as it is (Sentinel rewrites its own). The
// caller holds s.mu.
func (s *Server) start(restart bool) error {
	for attempt := 1; ; attempt++ {
		if !restart {
			if s.Port == 0 {
				port, err := reservePort(s.bus)
				if err != nil {
					return err
				}
				s.Port = port
			}
			s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port))
			conf := "port " + strconv.Itoa(s.Port) + "\n" + strings.Join(s.directives, "\n") + "\n"
			if s.tls != nil {
				if s.TLSPort == 0 {
					// A cluster node's bus is at its TLS port + 10000
					// when the bus is over TLS.
					port, err := reservePort(s.bus)
					if err != nil {
						return err
					}
					s.TLSPort = port
					s.TLSAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
				}
				conf += strings.Join(tlsDirectives(s.tls, s.TLSPort, s.authTLS), "\n") + "\n"
			}
			if err := os.WriteFile(s.conf, []byte(conf), 0o600); err != nil {
				return err
			}
		}
		err := s.launch()
		if !errors.Is(err, errPortInUse) || attempt == startAttempts {
			return err
		}
		if restart || s.fixedPort {
			time.Sleep(time.Duration(attempt) * 100 * time.Millisecond)
		} else {
			release(s.Port, s.bus)
			s.Port = 0
			if s.TLSPort != 0 {
				release(s.TLSPort, s.bus)
				s.TLSPort, s.TLSAddr = 0, ""
			}
		}
	}
}

// launch runs redis-server once and waits until it answers as itself: the
// process_id in INFO must be its own, so a server of someone else's on the
// same port does not count. The caller holds s.mu.
func (s *Server) launch() error {
	logOff, outOff := fileSize(s.path("redis.log")), fileSize(s.path("redis.out"))
	out, err := os.OpenFile(s.path("redis.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.bin, append([]string{s.conf}, s.args...)...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = sysProcAttr()
	err = cmd.Start()
	out.Close()
	if err != nil {
		return err
	}
	p := &process{cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-p.exited:
			if strings.Contains(readFrom(s.path("redis.log"), logOff)+readFrom(s.path("redis.out"), outOff), "Address already in use") {
				return errPortInUse
			}
			return fmt.Errorf("redis-server exited before answering: %v", p.err)
		default:
		}
		pid, err := s.pid()
		if err == nil && pid == cmd.Process.Pid {
			s.proc = p
			return nil
		}
		if err == nil {
			err = fmt.Errorf("%s is answered by process %d, not by ours (%d)", s.Addr, pid, cmd.Process.Pid)
		}
		if time.Now().After(deadline) {
			killAll(cmd.Process)
			<-p.exited
			return fmt.Errorf("no answer within %v: %v", startTimeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// pid asks the server for its process ID. It gives up soon, so that launch
// notices a process that has exited while something else holds its port.
func (s *Server) pid() (int, error) {
	reply, err := doWithin(250*time.Millisecond, s.Addr, s.User, s.Password, "INFO", "server")
	if err != nil {
		return 0, err
	}
	info, _ := reply.(string)
	return strconv.Atoi(infoField(info, "process_id"))
}

// Stop stops the server with SIGTERM (persistence is off, so nothing is
// saved) and waits until the process has exited, sending SIGKILL after 10
// seconds. Stopping a server that is not running does nothing.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.stop(); err != nil {
		t.Errorf("redistest: %v", err)
	}
}

func (s *Server) stop() error {
	p := s.proc
	if p == nil {
		return nil
	}
	s.proc = nil
	select {
	case <-p.exited:
		return nil // it exited on its own, say after SHUTDOWN
	default:
	}
	terminate(p.cmd.Process)
	select {
	case <-p.exited:
		return nil
	case <-time.After(stopTimeout):
		killAll(p.cmd.Process)
		<-p.exited
		return fmt.Errorf("redis-server on %s ignored SIGTERM for %v and was killed", s.Addr, stopTimeout)
	}
}

// Kill kills the server with SIGKILL, as a crash would, and waits until the
// process has exited. Killing a server that is not running does nothing.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	if p == nil {
		return
	}
	s.proc = nil
	select {
	case <-p.exited:
	default:
		killAll(p.cmd.Process)
		<-p.exited
	}
}

// Restart stops the server if it is running, then starts it again on the
// same port with the same configuration, and waits up to 15 seconds until
// it answers. Its data is gone (persistence is off), but a cluster node
// keeps its identity and slots, and a sentinel its state. The test fails
// if the server does not come back.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.stop(); err != nil {
		t.Errorf("redistest: %v", err)
	}
	if err := s.start(true); err != nil {
		t.Fatalf("redistest: redis-server on %s did not restart: %v\n%s", s.Addr, err, s.tail())
	}
}

// Do sends one command to the server on a fresh connection, authenticating
// first when the server has a password, and returns the reply: a string for
// simple and bulk strings, an int64 for integers, []any for arrays, nil for
// null replies. An error reply comes back as an err of type Error, and a
// network failure (the server is stopped, say) as another error: Do never
// fails the test itself. It gives up after 5 seconds of I/O and is safe for
// concurrent use.
func (s *Server) Do(t testing.TB, args ...string) (reply any, err error) {
	t.Helper()
	return do(s.Addr, s.User, s.Password, args...)
}

// Must is Do for a command that must succeed: it fails t (from the
// goroutine running the test) on an error reply or a network failure.
func (s *Server) Must(t testing.TB, args ...string) any {
	t.Helper()
	reply, err := s.Do(t, args...)
	if err != nil {
		t.Fatalf("redistest: %s on %s: %v", strings.Join(args, " "), s.Addr, err)
	}
	return reply
}

// Calls returns how many times the server ran cmd (lower case, as INFO
// commandstats names it: "fcall", "time"), since it started or its last
// CONFIG RESETSTAT; 0 for a command it never ran. It fails t when the
// server does not answer.
func (s *Server) Calls(t testing.TB, cmd string) int64 {
	t.Helper()
	return s.infoCount(t, "commandstats", "cmdstat_"+cmd+":calls=")
}

// Errors returns how many error replies of kind (their first word, as
// INFO errorstats names it: "TRYAGAIN", "ASK") the server has given since
// it started or its last CONFIG RESETSTAT; 0 for a kind it never gave. It
// fails t when the server does not answer.
func (s *Server) Errors(t testing.TB, kind string) int64 {
	t.Helper()
	return s.infoCount(t, "errorstats", "errorstat_"+kind+":count=")
}

// infoCount returns the integer that follows field in INFO section (up to
// a comma or the line's end), 0 when field is missing.
func (s *Server) infoCount(t testing.TB, section, field string) int64 {
	t.Helper()
	info, err := s.Do(t, "INFO", section)
	if err != nil {
		t.Fatalf("redistest: INFO %s: %v", section, err)
	}
	text, _ := info.(string)
	_, rest, found := strings.Cut(text, field)
	if !found {
		return 0
	}
	v, _, _ := strings.Cut(strings.SplitN(rest, "\n", 2)[0], ",")
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil {
		t.Fatalf("redistest: INFO %s: %s%q", section, field, v)
	}
	return n
}

// LogTail returns the last n lines (all of them when n < 0) of the
// server's output: what it printed before opening its log file
// (configuration errors), then the log file, over all its runs. It is safe
// for concurrent use.
func (s *Server) LogTail(n int) string {
	var lines []string
	for _, name := range []string{"redis.out", "redis.log"} {
		b, _ := os.ReadFile(s.path(name))
		if text := strings.TrimRight(string(b), "\n"); text != "" {
			lines = append(lines, strings.Split(text, "\n")...)
		}
	}
	if n >= 0 && n < len(lines) {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// tail formats the end of the log for a failure message.
func (s *Server) tail() string {
	return "--- last lines of its log (" + s.dir + ") ---\n" + s.LogTail(30)
}

func (s *Server) path(name string) string { return filepath.Join(s.dir, name) }

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// readFrom returns the contents of path from offset on.
func readFrom(path string, offset int64) string {
	b, err := os.ReadFile(path)
	if err != nil || offset > int64(len(b)) {
		return ""
	}
	return string(b[offset:])
}

// ports holds the ports (and cluster bus ports) of this test binary's
// servers, so parallel tests never pick the same one, not even while a
// server is stopped before a Restart.
var ports struct {
	sync.Mutex
	used map[int]bool
}

// reserve marks port (and with bus, port+busOffset) as used, or reports
// false if one of them already is.
func reserve(port int, bus bool) bool {
	ports.Lock()
	defer ports.Unlock()
	if ports.used == nil {
		ports.used = map[int]bool{}
	}
	if ports.used[port] || bus && ports.used[port+busOffset] {
		return false
	}
	ports.used[port] = true
	if bus {
		ports.used[port+busOffset] = true
	}
	return true
}

func release(port int, bus bool) {
	ports.Lock()
	defer ports.Unlock()
	delete(ports.used, port)
	if bus {
		delete(ports.used, port+busOffset)
	}
}

// reservePort finds and reserves a loopback port that is free now (with
// bus, one whose port+busOffset is free too and at most 65535). Someone may
// still take it before redis-server binds it; start then picks another.
func reservePort(bus bool) (int, error) {
	for range 200 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		ok := port != sharedPort
		if ok && bus {
			ok = port+busOffset <= 65535 && portFree(port+busOffset)
		}
		l.Close()
		if ok && reserve(port, bus) {
			return port, nil
		}
	}
	return 0, errors.New("redistest: found no free port")
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// poll calls check every 25 milliseconds until it returns nil, or returns
// its last error once timeout has passed.
func poll(timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(25 * time.Millisecond)
	}
}
