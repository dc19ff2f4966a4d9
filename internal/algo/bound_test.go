package algo

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate"
)

// base is a start time that is a multiple of every duration below, as the
// vectors' replay base is.
const base = 1_699_992_000_000_000

func mustPolicy(t testing.TB, text string) *floodgate.Policy {
	t.Helper()
	p, err := floodgate.ParsePolicy("p", text)
	if err != nil {
		t.Fatal(err)
	}
	return &p
}

// replay returns the cost the exact twin admits to one key, from no
// state, for requests of cost at the given µs.
func replay(p *floodgate.Policy, cost int64, at []int64) int64 {
	var s State
	var d floodgate.Decision
	var admitted int64
	for _, t := range at {
		Step(p, &s, t, cost, false, &d)
		if d.Allowed {
			admitted += cost
		}
	}
	return admitted
}

// saturate returns the cost the exact twin admits to one key, from no
// state, when requests of cost arrive at every µs from first to last, as
// many at each as pass (and one more, denied).
func saturate(p *floodgate.Policy, cost, first, last int64) int64 {
	var s State
	var d floodgate.Decision
	var admitted int64
	for t := first; t <= last; t++ {
		for {
			Step(p, &s, t, cost, false, &d)
			if !d.Allowed {
				break
			}
			admitted += cost
		}
	}
	return admitted
}

// Saturating policies: windows of a few ms, so that requests at every µs
// over a few windows are a short replay. None counts denied requests,
// which would keep a saturating client out (sliding_log's default).
var saturated = []string{
	"fixed_window 7/1ms",
	"fixed_window 7/1ms align first",
	"fixed_window 0/1ms",
	"sliding_window 5/1ms resolution 100us",
	"sliding_window 5/1ms resolution 300us",
	"sliding_window 5/1ms resolution 1ms",
	"sliding_window 4/1ms resolution 250us, 9/5ms resolution 1ms",
	"sliding_log 6/1ms count_denied false",
	"sliding_log 6/1ms min_interval 50us count_denied false",
	"sliding_log 6/1ms min_interval 300us count_denied false",
	"token_bucket 10/1ms burst 3",
	"token_bucket 4/1ms burst 4",
	"gcra 7/1ms burst 3",
	"gcra 1000/1s burst 6",
}

// Bound is not reached, only approached, where whole µs matter: a bucket
// refilling a token every µs loses what the cap cuts off, and a GCRA key
// with burst = cost waits for the next whole µs at each admission, so its
// schedule drifts.
var loose = []string{
	"token_bucket 1000/1ms burst 1",
	"gcra 3/1ms burst 1",
}

// TestBoundIsReached: when requests arrive at every µs, the exact twin
// admits exactly Bound, for every algorithm but ar1 (whose bound is only a
// bound): the formulas of the package documentation are tight.
func TestBoundIsReached(t *testing.T) {
	for _, text := range saturated {
		p := mustPolicy(t, text)
		for _, cost := range []int64{1, 2, 3} {
			for _, off := range []int64{0, 337} {
				for _, span := range []int64{0, 999, 1000, 2500, 4321} {
					first := base + off
					got := saturate(p, cost, first, first+span)
					if want := Bound(p, cost, first, first+span); got != want {
						t.Errorf("%s, cost %d, from +%dµs for %dµs: the twin admits %d, Bound = %d", text, cost, off, span, got, want)
					}
				}
			}
		}
	}
}

// TestBoundHolds: whatever the demand (random gaps, count_denied or not),
// the twin never admits more than Bound, ar1 included.
func TestBoundHolds(t *testing.T) {
	texts := append([]string{
		"ar1 3/100us decay 2",
		"ar1 2.5/200us decay 1.5, 6/1ms decay 3",
		"ar1 1/1ms decay 10",
		"sliding_window 5/1ms resolution 100us count_denied true",
		"gcra 7/1ms burst 3 count_denied true",
		"token_bucket 10/1ms burst 3 count_denied true",
		"fixed_window 7/1ms count_denied true",
		"sliding_log 6/1ms",
		"sliding_log 6/1ms min_interval 300us",
	}, append(saturated, loose...)...)
	rng := rand.New(rand.NewPCG(3, 4))
	for _, text := range texts {
		p := mustPolicy(t, text)
		for trial := range 40 {
			cost := int64(1 + rng.IntN(3))
			first := base + rng.Int64N(2000)
			var at []int64
			for t, n := first, 50+rng.IntN(400); len(at) < n; t += rng.Int64N(40) { // gaps of 0 too
				at = append(at, t)
			}
			last := at[len(at)-1]
			got := replay(p, cost, at)
			if b := Bound(p, cost, first, last); got > b {
				t.Errorf("%s trial %d, cost %d: the twin admits %d, above Bound %d", text, trial, cost, got, b)
			}
		}
	}
}

// TestBoundExamples are worked examples, one per formula.
func TestBoundExamples(t *testing.T) {
	const s = int64(1_000_000)
	for _, c := range []struct {
		text              string
		cost, first, last int64
		want              int64
	}{
		// The seed's minute: within one, 100; across a minute's end, 200.
		{"fixed_window 100/1m", 1, base, base + 59*s, 100},
		{"fixed_window 100/1m", 1, base + 59*s, base + 61*s, 200},
		{"fixed_window 100/1m", 3, base, base + s, 99},
		{"fixed_window 100/1m align first", 1, base + 59*s, base + 61*s, 100},
		// gcra 10/1s burst 20 over 2 s: 20 at once, then one per 100 ms.
		{"gcra 10/1s burst 20", 1, base, base + 2*s, 40},
		{"gcra 10/1s burst 20", 25, base, base + 2*s, 0},
		// PlugLimit's example (vector TB-09): 3 at once, one more at 5 s.
		{"token_bucket 15/1m burst 3", 1, base, base + 5*s, 4},
		{"token_bucket 15/1m burst 3", 1, base, base + 60*s, 14 + 3},
		// The seed's login policy over 2 minutes: the 1-minute limit
		// renews once (twice 5), the hourly one does not bind.
		{"sliding_window 5/1m resolution 1s, 20/1h resolution 1m", 1, base, base + 2*60*s, 15},
		{"sliding_log 10/1s min_interval 100ms", 1, base, base + s/2, 6},
		{"sliding_log 10/1s", 1, base, base + s, 20},
		{"ar1 10/1s decay 2", 1, base, base + 2*s, 20},
	} {
		p := mustPolicy(t, c.text)
		if got := Bound(p, c.cost, c.first, c.last); got != c.want {
			t.Errorf("Bound(%s, cost %d, %+dµs .. %+dµs) = %d, want %d", c.text, c.cost, c.first-base, c.last-base, got, c.want)
		}
	}
}

func Example_bound() {
	p, _ := floodgate.ParsePolicy("api", "gcra 10/1s burst 20")
	start := int64(1_700_000_000_000_000)
	fmt.Println(Bound(&p, 1, start, start+2_000_000))
	// Output: 40
}

// TestBoundCalendar: a calendar window's bound counts the windows its span
// touches, New York's short and long days included.
func TestBoundCalendar(t *testing.T) {
	p := floodgate.Policy{Name: "c", Algorithm: floodgate.FixedWindow, Max: 10, Align: "calendar", Period: "day", TZ: "America/New_York"}
	at := func(s string) int64 {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v.UnixMicro()
	}
	for _, c := range []struct {
		first, last string
		want        int64
	}{
		{"2026-03-08T05:00:00Z", "2026-03-09T03:59:59Z", 10}, // the 23-hour day
		{"2026-03-08T05:00:00Z", "2026-03-09T04:00:00Z", 20}, // and the next
		{"2026-11-01T04:00:00Z", "2026-11-02T04:59:59Z", 10}, // the 25-hour day
		{"2026-10-31T04:00:00Z", "2026-11-03T04:59:59Z", 30}, // three days
	} {
		if got := Bound(&p, 1, at(c.first), at(c.last)); got != c.want {
			t.Errorf("Bound from %s to %s = %d, want %d", c.first, c.last, got, c.want)
		}
	}
}
