package httplimit

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/floodgatehq/floodgate"
)

// Problem types of the responses the middleware writes.
const (
	// QuotaExceededType is the problem type of a denied request
	// (draft-ietf-httpapi-ratelimit-headers-10, section 5.1).
	QuotaExceededType = "https://iana.org/assignments/http-problem-types#quota-exceeded"

	// BlankType is RFC 9457's default problem type: the status code says
	// it all. The middleware uses it for key errors and fail-closed 503s.
	BlankType = "about:blank"
)

// Problem is an RFC 9457 problem details object, written by WriteProblem
// as application/problem+json.
type Problem struct {
	// Type is a URI naming the problem type; "" is written as BlankType.
	Type string `json:"type"`
	// Title is a short summary of the problem type.
	Title string `json:"title,omitempty"`
	// Status is the HTTP status code.
	Status int `json:"status,omitempty"`
	// Detail explains this occurrence, for people.
	Detail string `json:"detail,omitempty"`
	// ViolatedPolicies is the quota-exceeded extension member: the names
	// of the RateLimit-Policy items whose quota the request exceeded.
	ViolatedPolicies []string `json:"violated-policies,omitempty"`
}

// WriteProblem writes p as the response: Content-Type
// application/problem+json, status p.Status (500 when zero), and p as
// JSON. Headers set on w before the call are sent too.
func WriteProblem(w http.ResponseWriter, p Problem) {
	if p.Type == "" {
		p.Type = BlankType
	}
	if p.Status == 0 {
		p.Status = http.StatusInternalServerError
	}
	body, err := json.Marshal(p)
	if err != nil { // cannot happen: strings and ints only
		body = []byte(`{"type":"about:blank"}`)
	}
	h := w.Header()
	h["Content-Type"] = []string{"application/problem+json"}
	h["Content-Length"] = []string{strconv.Itoa(len(body) + 1)}
	h["X-Content-Type-Options"] = []string{"nosniff"}
	w.WriteHeader(p.Status)
	w.Write(append(body, '\n'))
}

// resultsKey is the context key of a request's results.
type resultsKey struct{}

// Results returns the results of the request whose context is ctx, as the
// middleware decided them, one per rule in route order; nil when there are
// none. The middleware adds them to the request it hands to
// Config.Denied. The slice must not be modified.
func Results(ctx context.Context) []Result {
	r, _ := ctx.Value(resultsKey{}).([]Result)
	return r
}

// WithResults returns a copy of ctx carrying results, for Results. A
// handler written for Config.Denied can be tested with it.
func WithResults(ctx context.Context, results []Result) context.Context {
	return context.WithValue(ctx, resultsKey{}, results)
}

// DeniedHandler is the default Config.Denied: a 429 Too Many Requests
// with an RFC 9457 body of the quota-exceeded problem type, whose
// violated-policies member names the item of every denied result (see
// Results). The rate limit header fields are already set when it runs.
var DeniedHandler http.Handler = http.HandlerFunc(denied)

func denied(w http.ResponseWriter, r *http.Request) {
	results := Results(r.Context())
	p := Problem{
		Type:   QuotaExceededType,
		Title:  "Too Many Requests",
		Status: http.StatusTooManyRequests,
		Detail: "The request exceeds the rate limit.",
	}
	for i := range results {
		if res := &results[i]; res.Known() && !res.Decision.Allowed {
			if name := res.itemName(); name != "" {
				p.ViolatedPolicies = append(p.ViolatedPolicies, name)
			}
		}
	}
	if bi := Binding(results); bi >= 0 && !results[bi].Decision.Allowed {
		switch d := results[bi].Decision; {
		case d.RetryAfter == floodgate.Never:
			p.Detail = "The request exceeds what the rate limit can ever admit: retrying will not help."
		case d.RetryAfter > 0:
			p.Detail = "The request exceeds the rate limit: retry in " + strconv.FormatInt(ceilSeconds(d.RetryAfter), 10) + " s."
		}
	}
	WriteProblem(w, p)
}
