package rls_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/rls"
)

// BenchmarkMatchSummarise is the engine's own work on a request, without
// the store: matching its descriptors to rules, planning the store
// requests, and answering from the decisions.
func BenchmarkMatchSummarise(b *testing.B) {
	eng, _ := newService(b, planDomain)
	tab := eng.Table()
	users := make([]string, 1024)
	for i := range users {
		users[i] = "u" + strconv.Itoa(i)
	}
	for _, c := range []struct {
		name string
		ds   func(i int) []rls.Descriptor
	}{
		{"one", func(i int) []rls.Descriptor { return []rls.Descriptor{d("user", users[i%len(users)])} }},
		{"three", func(i int) []rls.Descriptor {
			return []rls.Descriptor{d("user", users[i%len(users)]), d("path", "/login/otp"), d("open", "x")}
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			decided := []floodgate.Decision{
				{Allowed: true, Limit: 10, Remaining: 7, ResetAfter: 1500 * time.Millisecond},
				{Allowed: true, Limit: 1, Remaining: 0, ResetAfter: 300 * time.Millisecond},
			}
			ds := make([]floodgate.Decision, 2)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				plan, err := tab.Match(rls.Request{Domain: "p", Descriptors: c.ds(i)})
				if err != nil {
					b.Fatal(err)
				}
				n := copy(ds, decided[:len(plan.Requests)])
				if resp := plan.Summarise(ds[:n]); resp.OverallCode != rls.CodeOK {
					b.Fatal("not OK")
				}
			}
		})
	}
}
