package bench

import (
	"io"
	"os"
	"syscall"
	"unsafe"
)

// IsTerminal reports whether w is a terminal: an *os.File on which the
// TCGETS ioctl succeeds, as isatty(3) tests.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	var t syscall.Termios
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), syscall.TCGETS, uintptr(unsafe.Pointer(&t)))
	return errno == 0
}
