package cli_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/floodgatehq/floodgate/internal/redistest"
)

// TestStoreClock: with store.clock service, floodgate serve times its Redis
// decisions by its own clock, sent with each call: the server runs no TIME
// for them; with the default (redis) every decision reads TIME. A value
// that is neither is refused naming the field and what is allowed.
func TestStoreClock(t *testing.T) {
	srv := redistest.StartServer(t)
	calls := func(cmd string) int64 { return srv.Calls(t, cmd) }
	for _, tc := range []struct {
		clock    string
		wantTime bool
	}{{"", true}, {"redis", true}, {"service", false}} {
		t.Run("clock="+tc.clock, func(t *testing.T) {
			// A store timeout of a minute: the default's 50 ms can cut a
			// call before it is sent on a loaded machine (a goroutine
			// stalled for seconds), and each of the 10 decisions must
			// reach Redis as an FCALL.
			body := "policies:\n  api: \"fixed_window 1000/1h align first\"\nstore:\n  timeout: 1m\n"
			if tc.clock != "" {
				body += "  clock: " + tc.clock + "\n"
			}
			conf := writeFile(t, "floodgate.yaml", body)
			s := startServe(t, nil, "--config", conf, "--redis", "redis://"+srv.Addr)
			beforeTime, beforeCalls := calls("time"), calls("fcall")
			for i := range 10 {
				res, err := http.Post("http://"+s.http+"/v1/check", "application/json", strings.NewReader(`{"policy":"api","key":"clock-`+tc.clock+`"}`))
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
				if res.StatusCode != http.StatusOK {
					t.Fatalf("check %d: %d", i, res.StatusCode)
				}
			}
			fcalls, times := calls("fcall")-beforeCalls, calls("time")-beforeTime
			if fcalls < 10 {
				t.Fatalf("%d FCALLs for 10 decisions", fcalls)
			}
			// The health check (every 2 s, and once at start) reads TIME
			// and then calls one function, so the FCALLs beyond the 10
			// decisions are its own; one of its checks may straddle either
			// count. With the service's clock the TIMEs are the health
			// checks' alone; with Redis's every decision reads one.
			checks := fcalls - 10
			if tc.wantTime && times < 10 {
				t.Errorf("clock %q: %d TIME calls for 10 decisions (%d FCALLs); want one per decision", tc.clock, times, fcalls)
			}
			if !tc.wantTime && times > checks+1 {
				t.Errorf("clock %q: %d TIME calls for 10 decisions and %d health checks; want none from the decisions", tc.clock, times, checks)
			}
		})
	}
	conf := writeFile(t, "floodgate.yaml", "store:\n  clock: ntp\n")
	code, msg := refused(t, nil, "--config", conf, "--redis", "redis://"+srv.Addr)
	if code == 0 || !strings.Contains(msg, "store.clock") || !strings.Contains(msg, `"ntp"`) || !strings.Contains(msg, "service") {
		t.Errorf("store.clock ntp: exit %d, %q; want a refusal naming store.clock, the value and what is allowed", code, msg)
	}
}
