package rlheader_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/rlheader"
)

func ExampleSet() {
	burst, _ := floodgate.ParsePolicy("burst", "token_bucket 100/1m burst 20")
	daily, _ := floodgate.ParsePolicy("daily", "fixed_window 1000/24h")
	h := http.Header{}
	items := []rlheader.Item{
		{Policy: &burst, Decision: floodgate.Decision{Allowed: true, Limit: 100, Remaining: 12, ResetAfter: 4 * time.Second}},
		{Policy: &daily, Decision: floodgate.Decision{Allowed: true, Limit: 1000, Remaining: 9, ResetAfter: 36000 * time.Second}},
	}
	rlheader.Set(h, rlheader.Default|rlheader.XRateLimit, time.Now(), rlheader.PolicyField(items), items)
	for _, k := range []string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
		fmt.Printf("%s: %s\n", k, h.Get(k))
	}
	// Output:
	// RateLimit-Policy: "burst";q=100;w=60, "daily";q=1000;w=86400
	// RateLimit: "daily";r=9;t=36000
	// X-RateLimit-Limit: 1000
	// X-RateLimit-Remaining: 9
	// X-RateLimit-Reset: 36000
}

func ExamplePolicyItems() {
	login, _ := floodgate.ParsePolicy("login", "sliding_window 1/5s resolution 1s, 5/1h resolution 10m")
	items := rlheader.PolicyItems(&login)
	fmt.Println(items)
	fmt.Println(rlheader.FormatPolicy(items))
	// Output:
	// [{login/0 1 5} {login/1 5 3600}]
	// "login/0";q=1;w=5, "login/1";q=5;w=3600
}

func ExampleFormatRateLimit() {
	fmt.Println(rlheader.FormatRateLimit("api", floodgate.Decision{Allowed: true, Remaining: 42, ResetAfter: 16500 * time.Millisecond}))
	fmt.Println(rlheader.FormatRateLimit("api", floodgate.Decision{RetryAfter: 2 * time.Second, ResetAfter: time.Minute}))
	fmt.Println(rlheader.FormatRateLimit("api", floodgate.Decision{RetryAfter: floodgate.Never}))
	// Output:
	// "api";r=42;t=17
	// "api";r=0;t=2
	// "api";r=0
}
