package algo_test

import (
	"math/rand/v2"
	"testing"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/internal/algo"
)

// TestStepBornIsAdd: StepBorn, the plain add stores use, decides exactly
// as Add on a group of one and keeps born as Add does, on random policies
// and histories (resets, peeks, the clock going back, costs beyond max).
func TestStepBornIsAdd(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	c := floodgatetest.RandChooser{R: r}
	for run := 0; run < 400; run++ {
		p := floodgatetest.RandomPolicy(c, "p")
		var s1, s2 algo.State
		var b1, b2 int64
		now := floodgatetest.BaseMicros
		for i := 0; i < 60; i++ {
			switch r.IntN(8) {
			case 0:
				now -= r.Int64N(2_000_000)
			case 1, 2:
			default:
				now += r.Int64N(3_000_000)
			}
			if r.IntN(20) == 0 {
				s1.Reset()
				s2.Reset()
				continue
			}
			n := []int64{1, 1, 2, 3, 1 + r.Int64N(12), floodgate.MaxCost}[r.IntN(6)]
			peek := r.IntN(5) == 0
			var d floodgate.Decision
			algo.StepBorn(&p, &s1, &b1, now, n, peek, &d)
			var o algo.Outcome
			if err := algo.Add([]algo.Member{{Policy: &p, State: &s2, Born: &b2}}, now, n, peek, &o); err != nil {
				t.Fatal(err)
			}
			if d != o.Decision || b1 != b2 {
				t.Fatalf("%s step %d (n=%d peek %t at %d): StepBorn %+v born %d, Add %+v born %d", p.String(), i, n, peek, now, d, b1, o.Decision, b2)
			}
		}
	}
}
