// Command llm-budget serves a toy completion API that limits each tenant's
// tokens per minute and per calendar month, with floodgate's reserve and
// settle: a request reserves its max_tokens on both budgets in one atomic
// step, the "model" runs, and the tokens it did not use are given back.
// Every answer carries the RateLimit header fields of the binding budget.
//
//	go run ./examples/llm-budget                        # memory store
//	go run ./examples/llm-budget -redis localhost:6379  # shared state in Redis
//
//	curl -i -H 'X-Tenant: acme' -d '{"prompt":"write a haiku","max_tokens":800}' localhost:8080/v1/complete
//
// See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/memstore"
	"github.com/floodgatehq/floodgate/redisstore"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("llm-budget", flag.ContinueOnError)
	addr := fs.String("addr", "localhost:8080", "listen address")
	redisAddr := fs.String("redis", "", "Redis address (host:port); empty for the memory store")
	perMinute := fs.Int64("per-minute", 2000, "tokens per tenant per minute (a token bucket)")
	perMonth := fs.Int64("per-month", 100_000, "tokens per tenant per calendar month")
	tz := fs.String("tz", "UTC", "the IANA time zone whose months the monthly budget follows")
	if err := fs.Parse(args); err != nil {
		return err
	}

	var store floodgate.Store
	backend := "memory store"
	if *redisAddr == "" {
		m, err := memstore.New()
		if err != nil {
			return err
		}
		defer m.Close()
		store = m
	} else {
		// No retries: a reservation that may have run is never sent twice.
		client := redis.NewClient(&redis.Options{Addr: *redisAddr, MaxRetries: -1, ContextTimeoutEnabled: true})
		defer client.Close()
		rs, err := redisstore.New(client)
		if err != nil {
			return err
		}
		defer rs.Close()
		store, backend = rs, "Redis at "+*redisAddr
	}
	b, err := newBudget(store, *perMinute, *perMonth, *tz)
	if err != nil {
		return err
	}

	srv := &http.Server{Addr: *addr, Handler: b.handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	fmt.Fprintf(out, `llm-budget on http://%[1]s (%[2]s): %[3]d tokens a minute, %[4]d a month (%[5]s) per tenant. Try:
  curl -i -H 'X-Tenant: acme' -d '{"prompt":"write a haiku about rate limits","max_tokens":800}' http://%[1]s/v1/complete
`, *addr, backend, *perMinute, *perMonth, *tz)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
