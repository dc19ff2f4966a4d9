package cli_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgatehq/floodgate/internal/cli"
)

// TestCalendarMonthEnv: USE_CALENDAR_MONTH_RATE_LIMIT, envoyproxy/ratelimit's
// variable, makes Envoy's month unit the UTC calendar month, over the
// file's envoy.calendar_month; a value that is not a boolean is refused,
// naming the variable.
func TestCalendarMonthEnv(t *testing.T) {
	code, _, errOut := run(t, map[string]string{cli.EnvCalendarMonth: "maybe"}, "check")
	if code != 1 || !strings.Contains(errOut, cli.EnvCalendarMonth+` "maybe": want true or false`) {
		t.Fatalf("check with %s=maybe: exit %d, %q", cli.EnvCalendarMonth, code, errOut)
	}

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "floodgate.yaml"), []byte("envoy: {calendar_month: false}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte("domain: edge\ndescriptors:\n  - key: plan\n    rate_limit: {unit: month, requests_per_unit: 10}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// reset asks /json once and returns duration_until_reset in seconds,
	// with the clock read before and after the call.
	reset := func(addr string) (got int64, before, after time.Time) {
		t.Helper()
		before = time.Now()
		res, err := http.Post("http://"+addr+"/json", "application/json",
			strings.NewReader(`{"domain":"edge","descriptors":[{"entries":[{"key":"plan","value":"p"}]}]}`))
		after = time.Now()
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var body struct {
			Statuses []struct {
				DurationUntilReset string `json:"durationUntilReset"`
			} `json:"statuses"`
		}
		if err := json.NewDecoder(res.Body).Decode(&body); err != nil || len(body.Statuses) != 1 {
			t.Fatalf("/json: %v %+v", err, body)
		}
		d, err := time.ParseDuration(body.Statuses[0].DurationUntilReset)
		if err != nil {
			t.Fatal(err)
		}
		return int64(d / time.Second), before, after
	}
	ceil := func(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }
	monthEnd := func(t time.Time) time.Time {
		t = t.UTC()
		return time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, time.UTC)
	}
	epochEnd := func(t time.Time) time.Time {
		const month = 2592000
		return time.Unix((t.Unix()/month+1)*month, 0)
	}
	for _, c := range []struct {
		env string
		end func(time.Time) time.Time
	}{{"true", monthEnd}, {"false", epochEnd}} {
		addr := serving(t, map[string]string{cli.EnvConfig: dir, cli.EnvCalendarMonth: c.env})
		got, before, after := reset(addr)
		// The service read its clock between before and after.
		if lo, hi := ceil(c.end(after).Sub(after)), ceil(c.end(before).Sub(before)); c.end(before).Equal(c.end(after)) && (got < lo || got > hi) {
			t.Errorf("%s=%s: duration_until_reset %ds; want %d to %d s (to %v)", cli.EnvCalendarMonth, c.env, got, lo, hi, c.end(after))
		}
	}
}
