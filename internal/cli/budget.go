package cli

import (
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// budgetDecision is the decision of /v1/reserve and /v1/settle.
type budgetDecision struct {
	Allowed  bool `json:"allowed"`
	Member   *int `json:"member"`
	Decision struct {
		Policy       string `json:"policy"`
		Allowed      bool   `json:"allowed"`
		Limit        int64  `json:"limit"`
		Remaining    int64  `json:"remaining"`
		RetryAfterUS int64  `json:"retry_after_us"`
		ResetAfterUS int64  `json:"reset_after_us"`
		Granted      *int64 `json:"granted"`
		Degraded     bool   `json:"degraded"`
	} `json:"decision"`
	Token string `json:"token"`
}

// print writes the decision as allow does.
func (e *environ) printBudget(out *budgetDecision) {
	d := &out.Decision
	verdict := "allowed"
	if !d.Allowed {
		verdict = "denied"
	}
	retry := "never"
	if d.RetryAfterUS >= 0 {
		retry = (time.Duration(d.RetryAfterUS) * time.Microsecond).String()
	}
	fmt.Fprintf(e.stdout, "%s: %s  limit=%d remaining=%d retry_after=%s reset_after=%s", d.Policy, verdict,
		d.Limit, d.Remaining, retry, time.Duration(d.ResetAfterUS)*time.Microsecond)
	if d.Granted != nil {
		fmt.Fprintf(e.stdout, " granted=%d", *d.Granted)
	}
	if d.Degraded {
		fmt.Fprint(e.stdout, "  (degraded: the store failed)")
	}
	fmt.Fprintln(e.stdout)
}

// reserve is floodgate reserve POLICY KEY N: POST /v1/reserve.
func (e *environ) reserve(args []string) int {
	c, fs := e.clientFlags("reserve", "[flags] POLICY KEY N",
		"Asks a running service to reserve N units for KEY under POLICY (POST /v1/reserve).\n"+
			"Prints the decision and, when allowed, the token on a line of its own: give it to\n"+
			"floodgate settle with the units the work used. The exit status is 0 when allowed,\n"+
			"3 when denied (there is then no token: a denied reservation holds nothing).", EnvToken)
	if code := e.parse(fs, args); code >= 0 {
		return code
	}
	if fs.NArg() != 3 {
		return e.errorf("reserve takes POLICY, KEY and N (floodgate reserve --help)")
	}
	n, err := strconv.ParseInt(fs.Arg(2), 10, 64)
	if err != nil || n < 1 {
		return e.errorf("N %q: want an integer from 1 to 2^53-1 (a negative N is never a refund nor a reset)", fs.Arg(2))
	}
	var out budgetDecision
	if _, err := e.do(c, http.MethodPost, "/v1/reserve", map[string]any{"policy": fs.Arg(0), "key": fs.Arg(1), "n": n}, &out); err != nil {
		return e.errorf("%v", err)
	}
	e.printBudget(&out)
	if !out.Allowed {
		return 3
	}
	if out.Token != "" {
		fmt.Fprintf(e.stdout, "token: %s\n", out.Token)
	}
	return 0
}

// settle is floodgate settle TOKEN USED: POST /v1/settle.
func (e *environ) settle(args []string) int {
	c, fs := e.clientFlags("settle", "[flags] TOKEN USED",
		"Asks a running service to give back the units of a reservation beyond USED (0 to its N):\n"+
			"TOKEN is what floodgate reserve printed. Prints the decision a request of 1 would get\n"+
			"after it. A token settles once.", EnvToken)
	if code := e.parse(fs, args); code >= 0 {
		return code
	}
	if fs.NArg() != 2 {
		return e.errorf("settle takes TOKEN and USED (floodgate settle --help)")
	}
	used, err := strconv.ParseInt(fs.Arg(1), 10, 64)
	if err != nil || used < 0 {
		return e.errorf("USED %q: want an integer from 0 to the reservation's N", fs.Arg(1))
	}
	var out budgetDecision
	if _, err := e.do(c, http.MethodPost, "/v1/settle", map[string]any{"token": fs.Arg(0), "used": used}, &out); err != nil {
		return e.errorf("%v", err)
	}
	e.printBudget(&out)
	return 0
}
