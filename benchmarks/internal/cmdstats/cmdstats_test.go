package cmdstats

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/floodgatehq/floodgate/benchmarks/redisserver"
)

// The answer of redis-server 7.0 to INFO commandstats after CONFIG
// RESETSTAT, two INCRBY, an EVAL calling GET, CONFIG GET, HSET and INFO,
// with its CRLF line ends.
const infoText = "# Commandstats\r\n" +
	"cmdstat_incrby:calls=2,usec=15,usec_per_call=7.50,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_hset:calls=1,usec=11,usec_per_call=11.00,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_get:calls=1,usec=9,usec_per_call=9.00,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_config|get:calls=1,usec=14,usec_per_call=14.00,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_config|resetstat:calls=1,usec=42,usec_per_call=42.00,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_info:calls=1,usec=31,usec_per_call=31.00,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_eval:calls=1,usec=64,usec_per_call=64.00,rejected_calls=0,failed_calls=0\r\n"

func TestParse(t *testing.T) {
	got := Parse(infoText)
	want := []Stat{{"eval", 1, 64}, {"get", 1, 9}, {"hset", 1, 11}, {"incrby", 2, 15}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Parse = %v, want %v", got, want)
	}
	// Before Redis 7, CONFIG is counted as one command.
	if got := Parse("cmdstat_config:calls=3,usec=9,usec_per_call=3.00\r\n"); len(got) != 0 {
		t.Errorf("Parse kept CONFIG: %v", got)
	}
	if got := Parse(""); len(got) != 0 {
		t.Errorf("Parse of no text = %v", got)
	}
}

func TestPerDecision(t *testing.T) {
	stats := []Stat{{"evalsha", 1000, 12345}, {"get", 2000, 900}, {"ping", 9, 9}}
	// 1000 decisions: ping (0.009 per decision) is left out.
	const want = "evalsha 1.00/decision 12.3µs/call, get 2.00/decision 0.5µs/call"
	if got := PerDecision(stats, 1000); got != want {
		t.Errorf("PerDecision = %q, want %q", got, want)
	}
	if got := PerDecision(nil, 1000); got != "" {
		t.Errorf("PerDecision of nothing = %q", got)
	}
}

// TestRead checks Read against a real server: the harness's own commands
// are left out.
func TestRead(t *testing.T) {
	if !redisserver.Available() {
		t.Skip("redis-server not in PATH")
	}
	srv, err := redisserver.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		c.IncrBy(ctx, "k", 1)
	}
	c.ConfigGet(ctx, "hz")
	stats, err := Read(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range stats {
		names = append(names, fmt.Sprintf("%s=%g", s.Name, s.Calls))
	}
	if got := strings.Join(names, ","); got != "incrby=3" {
		t.Errorf("Read = %s, want incrby=3", got)
	}
}
