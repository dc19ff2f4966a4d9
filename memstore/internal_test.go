package memstore

import (
	"testing"
	"unsafe"
)

// TestEntrySize guards the memory per key: an entry is the key, the
// policy, the algorithm's five-word state, a chain pointer and a usage
// pointer. Growing it costs every decision on a store with many keys
// (BENCHMARKS.md).
func TestEntrySize(t *testing.T) {
	if got := unsafe.Sizeof(entry{}); got != 80 {
		t.Errorf("entry is %d bytes, want 80", got)
	}
}
