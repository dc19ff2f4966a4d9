package cli

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/floodgatehq/floodgate/config"
)

const defaultURL = "http://127.0.0.1:8080"

// client flags shared by allow, peek, reset and keys.
type clientFlags struct {
	url, token        string
	caFile, cert, key string
	timeout           time.Duration
	tokenEnvs         []string // where the token comes from when --token is not given, in order
}

// clientFlags returns a command's flags. tokenEnvs are the variables the
// token is read from, in order, when --token is not given: the admin
// token for admin commands, a client's token for the decision ones.
func (e *environ) clientFlags(name, synopsis, about string, tokenEnvs ...string) (*clientFlags, *flag.FlagSet) {
	c := &clientFlags{tokenEnvs: tokenEnvs}
	fs := e.flags(name, synopsis, about)
	fs.StringVar(&c.url, "url", "", "the service's HTTP `address` (default "+defaultURL+"; https://… for TLS)")
	fs.StringVar(&c.token, "token", "", "bearer `token` to send (default from "+strings.Join(tokenEnvs, ", then ")+"; 16+ characters)")
	fs.StringVar(&c.caFile, "ca-file", "", "CA certificates (PEM `file`) to verify an https:// service with, instead of the system's")
	fs.StringVar(&c.cert, "cert-file", "", "client certificate (PEM `file`) for a service that asks for one (mutual TLS)")
	fs.StringVar(&c.key, "key-file", "", "the client certificate's private key (PEM `file`)")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Second, "how long to wait for the service")
	return c, fs
}

// bearer returns the token to send and where it came from, checked as the
// service checks tokens (config.CheckToken), or "" for none.
func (e *environ) bearer(c *clientFlags) (string, error) {
	if c.token != "" {
		if err := config.CheckToken(c.token); err != nil {
			return "", fmt.Errorf("--token: %w", err)
		}
		return c.token, nil
	}
	for _, v := range c.tokenEnvs {
		if tok := strings.TrimSpace(e.getenv(v)); tok != "" {
			if err := config.CheckToken(tok); err != nil {
				return "", fmt.Errorf("%s: %w", v, err)
			}
			return tok, nil
		}
	}
	return "", nil
}

// httpClient returns the client of c's TLS flags.
func (c *clientFlags) httpClient() (*http.Client, error) {
	cfg, err := tlsFiles("", c.caFile, c.cert, c.key)
	if cfg == nil || err != nil {
		return http.DefaultClient, err
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, Proxy: http.ProxyFromEnvironment}}, nil
}

// tlsFiles returns the TLS client configuration of the flags
// --{prefix}ca-file, --{prefix}cert-file and --{prefix}key-file, given as
// ca, cert and key: TLS 1.2 or later, servers verified against ca's CAs
// (or the system's roots), and the client certificate of cert and key. It
// returns nil when none is given, and an error naming the flag of a file
// that cannot be used.
func tlsFiles(prefix, ca, cert, key string) (*tls.Config, error) {
	if ca == "" && cert == "" && key == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		data, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("--%sca-file: %w", prefix, err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(data) {
			return nil, fmt.Errorf("--%sca-file %s: no PEM certificate in it", prefix, ca)
		}
	}
	if (cert == "") != (key == "") {
		return nil, fmt.Errorf("--%scert-file and --%skey-file go together", prefix, prefix)
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("--%scert-file, --%skey-file: %w", prefix, prefix, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// do sends one request to the service and decodes its JSON answer.
func (e *environ) do(c *clientFlags, method, path string, body any, out any) (int, error) {
	base := strings.TrimRight(e.env(c.url, EnvURL), "/")
	if base == "" {
		base = defaultURL
	}
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	if c.timeout <= 0 {
		return 0, fmt.Errorf("--timeout %s: want a positive duration, such as 5s", c.timeout)
	}
	token, err := e.bearer(c)
	if err != nil {
		return 0, err
	}
	client, err := c.httpClient()
	if err != nil {
		return 0, err
	}
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(data)
	}
	ctx, cancel := context.WithTimeout(e.ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("cannot reach the service at %s: %w (is floodgate serve running? --url or %s)", base, err, EnvURL)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	var apiErr struct {
		Error *struct {
			Code, Message, Field string
		} `json:"error"`
	}
	if json.Unmarshal(data, &apiErr) == nil && apiErr.Error != nil {
		msg := apiErr.Error.Message
		if apiErr.Error.Field != "" {
			msg = apiErr.Error.Field + ": " + msg
		}
		return resp.StatusCode, fmt.Errorf("%s (HTTP %d, %s)", msg, resp.StatusCode, apiErr.Error.Code)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("unexpected answer (HTTP %d): %.200s", resp.StatusCode, data)
		}
	}
	return resp.StatusCode, nil
}

func (e *environ) decide(cmd string, args []string) int {
	about := "Asks a running service to decide a request of COST for KEY under POLICY, recording it.\n" +
		"Prints the decision; the exit status is 0 when allowed, 3 when denied.\n" +
		"As the seed systems did, --cost 0 peeks (records nothing). A negative --cost is an\n" +
		"error, never a reset nor a refund: floodgate reset forgets a key, floodgate settle\n" +
		"gives back a reservation's unused units."
	if cmd == "peek" {
		about = "Asks a running service what a request would get, recording nothing.\n" +
			"Prints the decision; the exit status is 0 when it would pass, 3 when not."
	}
	c, fs := e.clientFlags(cmd, "[flags] POLICY KEY", about, EnvToken)
	cost := fs.Int64("cost", 1, "the request's `cost`")
	if code := e.parse(fs, args); code >= 0 {
		return code
	}
	if fs.NArg() != 2 {
		return e.errorf("%s takes POLICY and KEY (floodgate %s --help)", cmd, cmd)
	}
	var out struct {
		Allowed   bool `json:"allowed"`
		Decisions []struct {
			Policy       string `json:"policy"`
			Allowed      bool   `json:"allowed"`
			Limit        int64  `json:"limit"`
			Remaining    int64  `json:"remaining"`
			RetryAfterUS int64  `json:"retry_after_us"`
			ResetAfterUS int64  `json:"reset_after_us"`
			Degraded     bool   `json:"degraded"`
		} `json:"decisions"`
	}
	path, n := "/v1/"+map[string]string{"allow": "check", "peek": "peek"}[cmd], *cost
	if n < 0 {
		return e.errorf("--cost %d: a negative cost is never a reset nor a refund (SPEC.md); floodgate reset POLICY KEY forgets a key, floodgate settle TOKEN USED gives back a reservation's unused units", n)
	}
	if cmd == "allow" && n == 0 {
		path, n = "/v1/peek", 1 // the seeds' event count of 0 peeks
	}
	_, err := e.do(c, http.MethodPost, path, map[string]any{"policy": fs.Arg(0), "key": fs.Arg(1), "cost": n}, &out)
	if err != nil {
		return e.errorf("%v", err)
	}
	for _, d := range out.Decisions {
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
		if d.Degraded {
			fmt.Fprint(e.stdout, "  (degraded: the store failed)")
		}
		fmt.Fprintln(e.stdout)
	}
	if !out.Allowed {
		return 3
	}
	return 0
}

func (e *environ) reset(args []string) int {
	c, fs := e.clientFlags("reset", "[flags] POLICY KEY", "Asks a running service to forget KEY's state under POLICY (an admin action).", EnvAdminToken)
	if code := e.parse(fs, args); code >= 0 {
		return code
	}
	if fs.NArg() != 2 {
		return e.errorf("reset takes POLICY and KEY (floodgate reset --help)")
	}
	if _, err := e.do(c, http.MethodPost, "/v1/reset", map[string]string{"policy": fs.Arg(0), "key": fs.Arg(1)}, nil); err != nil {
		return e.errorf("%v", err)
	}
	fmt.Fprintf(e.stdout, "reset %s for the key given\n", fs.Arg(0))
	return 0
}

func (e *environ) keys(args []string) int {
	c, fs := e.clientFlags("keys", "[flags] POLICY", "Lists the keys of a policy that tracks usage (track), an admin action: its top keys,\n"+
		"or, with --order, --window, --cursor or --all (or --sort first_seen or usage), any\n"+
		"number of them in pages, following the service's cursors.", EnvAdminToken)
	sort := fs.String("sort", "requests", "sort `order`: requests, denied, last_seen, first_seen or usage (the requests inside --window)")
	order := fs.String("order", "", "desc (largest or latest first, the default) or asc")
	window := fs.String("window", "", "add each key's requests and denied inside the last `duration` (a policy with a series: track 1m for 24h)")
	limit := fs.Int("limit", 20, "how many `keys`")
	cursor := fs.String("cursor", "", "continue a listing from the `cursor` a previous run printed")
	all := fs.Bool("all", false, "list every key, ignoring --limit")
	if code := e.parse(fs, args); code >= 0 {
		return code
	}
	if fs.NArg() != 1 {
		return e.errorf("keys takes POLICY (floodgate keys --help)")
	}
	type keyOut struct {
		Key            string    `json:"key"`
		FirstSeen      time.Time `json:"first_seen"`
		LastSeen       time.Time `json:"last_seen"`
		Requests       int64     `json:"requests"`
		Denied         int64     `json:"denied"`
		WindowRequests *int64    `json:"window_requests"`
		WindowDenied   *int64    `json:"window_denied"`
	}
	var out struct {
		Keys []keyOut `json:"keys"`
		Next string   `json:"next_cursor"`
	}
	paged := *order != "" || *window != "" || *cursor != "" || *all || *sort == "first_seen" || *sort == "usage"
	q := url.Values{"policy": {fs.Arg(0)}, "sort": {*sort}, "limit": {fmt.Sprint(*limit)}}
	if !paged {
		if _, err := e.do(c, http.MethodGet, "/v1/keys?"+q.Encode(), nil, &out); err != nil {
			return e.errorf("%v", err)
		}
	} else {
		if *order != "" {
			q.Set("order", *order)
		}
		if *window != "" {
			q.Set("window", *window)
		}
		next := *cursor
		var keys []keyOut
		for {
			want := *limit - len(keys)
			if *all {
				want = 1000
			}
			if want <= 0 {
				break
			}
			q.Set("limit", fmt.Sprint(min(want, 10_000)))
			q.Del("cursor")
			if next != "" {
				q.Set("cursor", next)
			}
			out.Keys, out.Next = nil, ""
			if _, err := e.do(c, http.MethodGet, "/v1/keys?"+q.Encode(), nil, &out); err != nil {
				return e.errorf("%v", err)
			}
			keys = append(keys, out.Keys...)
			next = out.Next
			if next == "" {
				break
			}
		}
		out.Keys, out.Next = keys, next
	}
	withWindow := len(out.Keys) > 0 && out.Keys[0].WindowRequests != nil
	if withWindow {
		fmt.Fprintf(e.stdout, "%-30s %10s %10s %10s %10s  %-20s %s\n", "KEY", "REQUESTS", "DENIED", "IN WINDOW", "DENIED", "LAST SEEN", "FIRST SEEN")
	} else {
		fmt.Fprintf(e.stdout, "%-30s %10s %10s  %-20s %s\n", "KEY", "REQUESTS", "DENIED", "LAST SEEN", "FIRST SEEN")
	}
	for _, k := range out.Keys {
		if withWindow {
			fmt.Fprintf(e.stdout, "%-30q %10d %10d %10d %10d  %-20s %s\n", k.Key, k.Requests, k.Denied, *k.WindowRequests, *k.WindowDenied,
				k.LastSeen.UTC().Format(time.DateTime), k.FirstSeen.UTC().Format(time.DateTime))
			continue
		}
		fmt.Fprintf(e.stdout, "%-30q %10d %10d  %-20s %s\n", k.Key, k.Requests, k.Denied,
			k.LastSeen.UTC().Format(time.DateTime), k.FirstSeen.UTC().Format(time.DateTime))
	}
	if paged && out.Next != "" {
		fmt.Fprintf(e.stderr, "more keys: add --cursor %s\n", out.Next)
	}
	return 0
}
