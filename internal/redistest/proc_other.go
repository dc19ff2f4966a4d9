//go:build !linux

package redistest

import (
	"os"
	"syscall"
)

// sysProcAttr has nothing to set outside Linux, where a server can outlive
// a test binary that is killed.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// terminate asks redis-server to shut down, or kills it where there are no
// signals.
func terminate(p *os.Process) {
	if p.Signal(syscall.SIGTERM) != nil {
		_ = p.Kill()
	}
}

// killAll kills redis-server.
func killAll(p *os.Process) { _ = p.Kill() }
