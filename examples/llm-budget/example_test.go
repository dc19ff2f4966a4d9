package main

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/memstore"
)

// Example sends completions for one tenant on the 30th of November 2026
// at noon: a budget of 2,000 tokens a minute and 3,000 a month. Each
// request reserves its max_tokens (1,500) and gives back what the model
// did not use: the first uses 18, so that 1,982 are left this minute and
// 2,982 this month; the second all 1,500. A minute later the minute's
// bucket is full again, but the month has 1,482 left: the third is
// refused until the month ends, in 12 hours less 2 minutes (RateLimit's t
// is the group's: its longest reset).
func Example() {
	clock := floodgatetest.NewManualClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	store, err := memstore.New(memstore.WithClock(clock))
	if err != nil {
		panic(err)
	}
	defer store.Close()
	b, err := newBudget(store, 2000, 3000, "UTC")
	if err != nil {
		panic(err)
	}
	b.now = clock.Now
	h := b.handler()
	send := func(maxTokens int, prompt string) {
		body := fmt.Sprintf(`{"prompt":%q,"max_tokens":%d}`, prompt, maxTokens)
		r := httptest.NewRequest("POST", "/v1/complete", strings.NewReader(body))
		r.Header.Set("X-Tenant", "acme")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Code, strings.TrimSpace(w.Body.String()))
		for _, k := range []string{"RateLimit-Policy", "RateLimit", "Retry-After"} {
			if v := w.Header().Get(k); v != "" {
				fmt.Printf("  %s: %s\n", k, v)
			}
		}
	}
	send(1500, "write a haiku about rate limits") // 18 of 1500 used
	clock.Advance(time.Minute)
	send(1500, strings.Repeat("word ", 500)) // all 1500 used
	clock.Advance(time.Minute)
	send(1500, "one more please") // 1,482 left this month
	// Output:
	// 200 {"completion":"write a haiku about rate limits write a haiku about rate lim…","reserved":1500,"used":18}
	//   RateLimit-Policy: "tokens-per-minute";q=2000;w=60, "tokens-per-month";q=3000;w=2592000
	//   RateLimit: "tokens-per-minute";r=1981;t=43200
	// 200 {"completion":"word word word word word word word word word word word word …","reserved":1500,"used":1500}
	//   RateLimit-Policy: "tokens-per-minute";q=2000;w=60, "tokens-per-month";q=3000;w=2592000
	//   RateLimit: "tokens-per-minute";r=499;t=43140
	// 429 {"reserved":0,"used":0,"error":"token budget exhausted"}
	//   RateLimit-Policy: "tokens-per-minute";q=2000;w=60, "tokens-per-month";q=3000;w=2592000
	//   RateLimit: "tokens-per-month";r=1482;t=43080
	//   Retry-After: 43080
}
