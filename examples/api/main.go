// Command api serves a small JSON API behind floodgate's HTTP middleware:
// every route is limited per client address, and /users/{id} also per
// user, two policies on one route.
//
//	go run ./examples/api                        # memory store
//	go run ./examples/api -redis localhost:6379  # shared state in Redis
package main

import (
	"context"
	"encoding/json"
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
	"github.com/floodgatehq/floodgate/failure"
	"github.com/floodgatehq/floodgate/httplimit"
	"github.com/floodgatehq/floodgate/memstore"
	"github.com/floodgatehq/floodgate/redisstore"
	"github.com/floodgatehq/floodgate/rlheader"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("api", flag.ContinueOnError)
	addr := fs.String("addr", "localhost:8080", "listen address")
	redisAddr := fs.String("redis", "", "Redis address (host:port); empty for the memory store")
	if err := fs.Parse(args); err != nil {
		return err
	}

	local, err := memstore.New()
	if err != nil {
		return err
	}
	defer local.Close()
	var store floodgate.Store = local
	if *redisAddr != "" {
		// No retries (a decision that may have run is never sent twice),
		// and context deadlines honoured so that a slow Redis costs at
		// most the failure policy's timeout (50ms).
		client := redis.NewClient(&redis.Options{Addr: *redisAddr, MaxRetries: -1, ContextTimeoutEnabled: true})
		defer client.Close()
		rs, err := redisstore.New(client)
		if err != nil {
			return err
		}
		// While Redis is down or slow, each instance limits on its own.
		if store, err = failure.Wrap(rs, failure.Policy{Mode: failure.Fallback, Fallback: local}); err != nil {
			return err
		}
	}

	// 5 requests per second per address, in bursts of up to 10; at most 3
	// lookups of one user per 10 seconds.
	perIP, err := limiter(store, "per-ip", "gcra 5/1s burst 10")
	if err != nil {
		return err
	}
	perUser, err := limiter(store, "per-user", "sliding_window 3/10s resolution 1s")
	if err != nil {
		return err
	}
	byIP, err := httplimit.New(httplimit.Config{
		Rules:   []httplimit.Rule{perIP(httplimit.RemoteIP())},
		Headers: rlheader.Default | rlheader.XRateLimit,
	})
	if err != nil {
		return err
	}
	byIPAndUser, err := httplimit.New(httplimit.Config{
		Rules:   []httplimit.Rule{perIP(httplimit.RemoteIP()), perUser(httplimit.PathValue("id"))},
		Headers: rlheader.Default | rlheader.XRateLimit,
	})
	if err != nil {
		return err
	}

	mux := http.NewServeMux()
	mux.Handle("GET /hello", byIP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reply(w, map[string]string{"hello": "world"})
	})))
	// The middleware wraps the pattern's handler, so that PathValue("id")
	// sees the matched wildcard.
	mux.Handle("GET /users/{id}", byIPAndUser(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reply(w, map[string]string{"id": r.PathValue("id"), "name": "user " + r.PathValue("id")})
	})))

	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	backend := "memory store"
	if *redisAddr != "" {
		backend = "Redis at " + *redisAddr
	}
	fmt.Fprintf(out, `floodgate example API on http://%[1]s (%[2]s). Try:
  curl -i http://%[1]s/hello
  for i in $(seq 12); do curl -s -o /dev/null -w '%%{http_code} ' http://%[1]s/hello; done; echo
  for i in $(seq 4); do curl -s -i http://%[1]s/users/42 | grep -iE '^(HTTP|ratelimit|retry-after)'; done
`, *addr, backend)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// limiter returns a function making a rule of the policy described by
// text, on store.
func limiter(store floodgate.Store, name, text string) (func(httplimit.KeyFunc) httplimit.Rule, error) {
	p, err := floodgate.ParsePolicy(name, text)
	if err != nil {
		return nil, err
	}
	lim, err := floodgate.NewLimiter(store, p)
	if err != nil {
		return nil, err
	}
	return func(key httplimit.KeyFunc) httplimit.Rule {
		return httplimit.Rule{Limiter: lim, Key: key}
	}, nil
}

func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}
