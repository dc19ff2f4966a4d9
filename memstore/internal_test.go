package memstore

import (
	"testing"
	"unsafe"
)

// TestEntrySize guards the memory per key: an entry is the key, the
// policy, the algorithm's five-word state, its born (SPEC.md "State birth",
// for settles), a chain pointer and a usage
// pointer. Growing it costs every decision on a store with many keys
// (BENCHMARKS.md).
func TestEntrySize(t *testing.T) {
	if got := unsafe.Sizeof(entry{}); got != 88 {
		t.Errorf("entry is %d bytes, want 88", got)
	}
}
