package main

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/internal/redistest"
	"github.com/floodgatehq/floodgate/memstore"
	"github.com/floodgatehq/floodgate/redisstore"
	"github.com/floodgatehq/floodgate/storekit"
)

// answers sends the same completions as Example to a budget on store and
// returns each answer: status, body and RateLimit fields.
func answers(t *testing.T, store floodgate.Store, clock *floodgatetest.ManualClock) []string {
	t.Helper()
	b, err := newBudget(store, 2000, 3000, "Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	b.now = clock.Now
	h := b.handler()
	var out []string
	for _, c := range []struct {
		max    int
		prompt string
		after  time.Duration // the clock moves on after the request
	}{
		{1500, "write a haiku", 20 * time.Second},
		{1500, strings.Repeat("w ", 600), 40 * time.Second},
		{1500, "again", 60 * time.Second},
		{400, "small one", 80 * time.Second},
		{2000, "too big for the month", time.Hour}, // past midnight in Paris: December
		{1500, "a new month", 0},
	} {
		r := httptest.NewRequest("POST", "/v1/complete", strings.NewReader(fmt.Sprintf(`{"prompt":%q,"max_tokens":%d}`, c.prompt, c.max)))
		r.Header.Set("X-Tenant", "acme")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		out = append(out, fmt.Sprintf("%d %s %s | %s", w.Code, strings.TrimSpace(w.Body.String()), w.Header().Get("RateLimit"), w.Header().Get("Retry-After")))
		clock.Advance(c.after)
	}
	return out
}

// TestRedis: the example on a Redis store answers as on the memory store,
// request for request, when the Redis store implements budgets.
func TestRedis(t *testing.T) {
	at := time.Date(2026, 11, 30, 22, 0, 0, 0, time.UTC) // 23:00 in Paris, an hour before December
	clock := floodgatetest.NewManualClock(at)
	mem, err := memstore.New(memstore.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	want := answers(t, mem, clock)
	if !strings.HasPrefix(want[2], "429 ") || !strings.HasPrefix(want[3], "200 ") || !strings.HasPrefix(want[5], "200 ") {
		t.Fatalf("memory store: %q", want)
	}

	srv := redistest.StartServer(t)
	// A minute's read timeout, not go-redis's 3 s: a loaded machine must
	// not fail a call the test expects an answer to.
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: srv.User, Password: srv.Password, MaxRetries: -1,
		ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	defer c.Close()
	clock = floodgatetest.NewManualClock(at)
	rs, err := redisstore.New(c, redisstore.WithClock(clock), redisstore.WithMinTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	if !storekit.HasBudgets(rs) {
		t.Skip("the Redis store does not implement budgets on this branch: nothing compared")
	}
	got := answers(t, rs, clock)
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("request %d: Redis %q, memory %q", i, got[i], want[i])
		}
	}
}
