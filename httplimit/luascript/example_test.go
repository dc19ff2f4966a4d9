package luascript_test

import (
	"log"
	"net/http"

	"github.com/redis/go-redis/v9"

	"github.com/floodgatehq/floodgate/failure"
	"github.com/floodgatehq/floodgate/httplimit"
	"github.com/floodgatehq/floodgate/httplimit/luascript"
)

// The built-in fixed window: 10 requests per 60 seconds per user, counted
// in the Redis key "api:<user>".
func ExampleNew() {
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379", MaxRetries: -1, ContextTimeoutEnabled: true})
	defer client.Close()
	limit, err := luascript.New(luascript.Config{
		Client: client,
		Name:   "api",
		Key:    httplimit.Header("X-User"),
		Prefix: "api:",
		Opts:   []any{10, 60},
	})
	if err != nil {
		log.Fatal(err)
	}
	http.Handle("/api/", limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("hello\n"))
	})))
}

// A script of your own: a fixed window that also sends Retry-After, as a
// {name, value} pair, when it denies; a failing script falls back to
// letting requests through.
func ExampleNew_customScript() {
	const script = `
local used = redis.call('INCR', KEYS[1])
if used == 1 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
local ttl = redis.call('TTL', KEYS[1])
local limit = tonumber(ARGV[1])
if used > limit then
  return {'deny', {ARGV[1], tostring(ttl), '0', {'retry-after', tostring(ttl)}}}
end
return {'allow', {ARGV[1], tostring(ttl), tostring(limit - used)}}
`
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379", MaxRetries: -1, ContextTimeoutEnabled: true})
	defer client.Close()
	limit, err := luascript.New(luascript.Config{
		Client:  client,
		Script:  script,
		Headers: luascript.FixedWindowHeaders(),
		Key:     httplimit.RemoteIP(),
		Prefix:  "per-ip:",
		Opts:    []any{100, 60},
		Failure: failure.Policy{Mode: failure.Open},
	})
	if err != nil {
		log.Fatal(err)
	}
	_ = limit
}
