package redistest

import (
	"os"
	"syscall"
)

// sysProcAttr puts redis-server in a process group of its own, so killAll
// reaches the children it forks (for replication), and has the kernel kill
// it when the test binary dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// terminate asks redis-server to shut down.
func terminate(p *os.Process) { _ = p.Signal(syscall.SIGTERM) }

// killAll sends SIGKILL to redis-server's process group.
func killAll(p *os.Process) { _ = syscall.Kill(-p.Pid, syscall.SIGKILL) }
