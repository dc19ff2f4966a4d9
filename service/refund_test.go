package service_test

import (
	"testing"

	"github.com/floodgatehq/floodgate"
)

// TestOverLimitCacheRefundsAndMax: a refund is never answered from the
// over-limit cache (it reaches the store) and drops its key's entry, so
// the room it gives back is seen at once; a policy of the same name and a
// larger max (an Envoy override sharing a rule's counter) is not answered
// from an entry of a smaller max, and one of a smaller max is.
func TestOverLimitCacheRefundsAndMax(t *testing.T) {
	r := newRig(t, false, "policies:\n  fw: \"fixed_window 2/1m\"\n")
	svc := r.svc
	var fw *floodgate.Policy
	for _, p := range svc.Policies() {
		if p.Name == "fw" {
			fw = p
		}
	}
	bigger, smaller := *fw, *fw
	bigger.Max, smaller.Max = 4, 1
	calls := int64(0)
	decide := func(req floodgate.Request, wantAllowed, storeCalled bool, when string) {
		t.Helper()
		if req.N == 0 {
			req.N = 1
		}
		ds, err := svc.Decide(ctx, []floodgate.Request{req})
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		d := ds[0]
		if storeCalled {
			calls++
		}
		if d.Allowed != wantAllowed {
			t.Fatalf("%s: %v; want allowed %v", when, d, wantAllowed)
		}
		wantCalls(t, r.store, calls, when)
	}
	decide(floodgate.Request{Policy: fw, Key: "k"}, true, true, "first")
	decide(floodgate.Request{Policy: fw, Key: "k"}, true, true, "second")
	decide(floodgate.Request{Policy: fw, Key: "k"}, false, true, "third, denied by the store") // count 2 (no count_denied)
	decide(floodgate.Request{Policy: fw, Key: "k"}, false, false, "fourth, cached")
	decide(floodgate.Request{Policy: &smaller, Key: "k"}, false, false, "max 1, cached")
	decide(floodgate.Request{Policy: &bigger, Key: "k"}, true, true, "max 4: not the cache's to answer")
	// count 3 now; fw's entry (max 2) is still there.
	decide(floodgate.Request{Policy: fw, Key: "k"}, false, false, "fw again, cached")
	decide(floodgate.Request{Policy: fw, Key: "k", N: 2, Refund: true}, true, true, "refund of 2, through the store") // count 1
	decide(floodgate.Request{Policy: fw, Key: "k"}, true, true, "after the refund, the store's")
	decide(floodgate.Request{Policy: fw, Key: "k"}, false, true, "denied by the store again")
	decide(floodgate.Request{Policy: fw, Key: "k"}, false, false, "cached again")
	decide(floodgate.Request{Policy: fw, Key: "k", Refund: true}, true, true, "a refund of 1 (count 2 to 1), through the store")
	decide(floodgate.Request{Policy: fw, Key: "k"}, true, true, "the room it gave back")
}
