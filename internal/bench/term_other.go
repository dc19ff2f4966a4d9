//go:build !linux

package bench

import (
	"io"
	"os"
)

// IsTerminal reports whether w is a terminal. Outside Linux it tests for
// a character device, which a terminal is (and /dev/null too: the
// progress line then goes nowhere, harmlessly).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
