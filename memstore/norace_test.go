//go:build !race

package memstore_test

// raceEnabled is set when the race detector is on: tests that are slow
// under it and have nothing concurrent to check use fewer keys.
const raceEnabled = false
