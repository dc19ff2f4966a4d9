// Command quickstart shows floodgate's library in a few lines: a login
// limit with two sliding windows, and an API limit paced with Wait.
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/memstore"
)

func main() {
	ctx := context.Background()
	store, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	// At most one login attempt per 5 seconds and 5 per hour, per user.
	login, err := floodgate.ParsePolicy("login", "sliding_window 1/5s resolution 1s, 5/1h resolution 10m")
	if err != nil {
		log.Fatal(err)
	}
	logins, err := floodgate.NewLimiter(store, login)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("policy login:", login)
	for i := 1; i <= 3; i++ {
		d, err := logins.Allow(ctx, "alice")
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("  alice attempt %d: %s\n", i, verdict(d))
	}

	// 5 requests per second, bursts of 2: Wait paces the caller.
	api, err := floodgate.NewLimiter(store, floodgate.Policy{
		Name: "api", Algorithm: floodgate.GCRA, Max: 5, Window: time.Second, Burst: 2,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("policy api:", api.Policy())
	start := time.Now()
	for i := 1; i <= 6; i++ {
		if _, err := api.Wait(ctx, "bob"); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("  bob request %d passed after %v\n", i, time.Since(start).Round(10*time.Millisecond))
	}
}

func verdict(d floodgate.Decision) string {
	if d.Allowed {
		return fmt.Sprintf("allowed (%d more right now)", d.Remaining)
	}
	return fmt.Sprintf("denied, retry in %v (limit %d)", d.RetryAfter.Round(time.Millisecond), d.Limit)
}
