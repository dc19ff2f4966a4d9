package redisstore

import (
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/storekit"
)

// WithScripts makes the store call scripts (EVALSHA) as on a server
// without Redis Functions, so that tests on Redis 7 cover that path too.
func WithScripts() Option {
	return func(s *Store) error {
		s.scriptsOnly.Store(true)
		return nil
	}
}

// WithTryAgainFor sets how long a call a Cluster refuses with TRYAGAIN is
// sent again (a second by default), so that tests of slot migrations do
// not depend on the machine's speed.
func WithTryAgainFor(d time.Duration) Option {
	return func(s *Store) error {
		s.tryAgainFor = d
		return nil
	}
}

// Refused reports whether err wraps a server's refusal of a call before
// it ran, which a store on a Cluster sends again for a while (tryAgain).
func Refused(err error) bool { return refused(err, true) }

// LibraryName returns the name of the function library, for checks of
// what each node holds.
func LibraryName() string { return library.name }

// ScriptSHAs returns the SHA-1 of every script of the EVALSHA path: the
// algorithms', group.lua's and counter.lua's.
func ScriptSHAs() []string {
	var out []string
	for _, a := range storekit.Algorithms() {
		for _, sc := range scripts[a] {
			out = append(out, sc.sha)
		}
	}
	return append(out, groupScript.sha, counterScript.sha)
}

// LibrarySource returns the function library's source, for measurements.
func LibrarySource() string { return library.src }

// DecisionKeys returns the keys a decision of p on key reads and writes,
// in order: its state keys, then its usage hash when p tracks usage.
func DecisionKeys(s *Store, p *floodgate.Policy, key string) []string {
	pr, err := s.prepare(p)
	if err != nil {
		panic(err)
	}
	return s.keys(p, pr, key, false)
}

// KeySlot returns the cluster slot of key.
func KeySlot(key string) int { return keySlot(key) }

// BatchKeyCounts returns the key counts a batch of reqs sends in its
// first call of the batch function, in order: negative for a decision
// that shares the batch's state cache (joinBatch).
func BatchKeyCounts(s *Store, reqs []floodgate.Request) []int {
	calls := make([]*call, 0, len(reqs))
	for i := range reqs {
		pr, err := s.prepare(reqs[i].Policy)
		if err != nil {
			panic(err)
		}
		c, err := s.newCall(pr, &reqs[i])
		if err != nil {
			panic(err)
		}
		calls = append(calls, c)
	}
	for _, b := range s.joinBatch(calls) {
		if b.subs == nil {
			continue
		}
		var out []int
		for i := 1; i < len(b.args); i += 4 {
			out = append(out, b.args[i].(int))
		}
		return out
	}
	return nil
}
