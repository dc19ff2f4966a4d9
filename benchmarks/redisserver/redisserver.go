// Package redisserver starts and stops a private redis-server for the
// Redis benchmarks and their tests: on a free port of 127.0.0.1, with
// persistence off (no RDB snapshots, no AOF), its files in a temporary
// directory. It never touches any other Redis.
package redisserver

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a running redis-server started by Start.
type Server struct {
	Addr string // host:port
	Port int

	cmd  *exec.Cmd
	dir  string
	done chan error
}

// Binary is the redis-server executable Start runs (looked up in PATH).
var Binary = "redis-server"

// Available reports whether Binary can be found.
func Available() bool {
	_, err := exec.LookPath(Binary)
	return err == nil
}

// Start runs a fresh redis-server on a free port of 127.0.0.1 with
// persistence off, plus any extra "--name value" arguments, and waits until
// it answers PING. Stop it with Stop.
func Start(extra ...string) (*Server, error) {
	bin, err := exec.LookPath(Binary)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "fg-redis-")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 5 { // a free port may be taken between the probe and the bind
		port, err := freePort()
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		args := []string{
			"--port", strconv.Itoa(port),
			"--bind", "127.0.0.1",
			"--save", "",
			"--appendonly", "no",
			"--dir", dir,
			"--logfile", filepath.Join(dir, "redis.log"),
			"--daemonize", "no",
		}
		args = append(args, extra...)
		cmd := exec.Command(bin, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
		if err := cmd.Start(); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Port: port, cmd: cmd, dir: dir, done: make(chan error, 1)}
		go func() { s.done <- cmd.Wait() }()
		if lastErr = s.waitReady(5 * time.Second); lastErr == nil {
			return s, nil
		}
		s.Stop()
		dir, _ = os.MkdirTemp("", "fg-redis-")
	}
	os.RemoveAll(dir)
	return nil, fmt.Errorf("redisserver: could not start %s: %w", bin, lastErr)
}

// Pid is the server's process id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Admin returns a new client of the server for a harness's own commands
// (FLUSHALL, CONFIG RESETSTAT, INFO): at most two connections, and no
// retries, so that a failure shows at once. The caller closes it.
func (s *Server) Admin() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.Addr, PoolSize: 2, MaxRetries: -1})
}

// Stop terminates the server (SIGTERM; SIGKILL after 5 s) and removes its
// directory. It is idempotent.
func (s *Server) Stop() {
	if s == nil || s.cmd == nil {
		return
	}
	select {
	case <-s.done:
	default:
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
			s.cmd.Process.Kill()
			<-s.done
		}
	}
	os.RemoveAll(s.dir)
	s.cmd = nil
}

func (s *Server) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		select {
		case err := <-s.done:
			s.done <- err
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			return fmt.Errorf("redis-server exited (%v): %s", err, strings.TrimSpace(string(log)))
		default:
		}
		if err := ping(s.Addr); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ping sends an inline PING and expects +PONG.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return errors.New("redisserver: PING answered " + strings.TrimSpace(line))
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
