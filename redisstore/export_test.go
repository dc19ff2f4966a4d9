package redisstore

import "github.com/floodgatehq/floodgate/storekit"

// WithScripts makes the store call scripts (EVALSHA) as on a server
// without Redis Functions, so that tests on Redis 7 cover that path too.
func WithScripts() Option {
	return func(s *Store) error {
		s.scriptsOnly.Store(true)
		return nil
	}
}

// LibraryName returns the name of the function library, for checks of
// what each node holds.
func LibraryName() string { return library.name }

// ScriptSHAs returns the SHA-1 of every script of the EVALSHA path.
func ScriptSHAs() []string {
	var out []string
	for _, a := range storekit.Algorithms() {
		for _, sc := range scripts[a] {
			out = append(out, sc.sha)
		}
	}
	return out
}

// LibrarySource returns the function library's source, for measurements.
func LibrarySource() string { return library.src }
