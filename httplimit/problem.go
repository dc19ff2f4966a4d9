package httplimit

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/rlheader"
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

// decisionsKey is the context key of a request's decisions.
type decisionsKey struct{}

// Decisions returns the decisions of the request whose context is ctx, as
// the middleware made them, one per rule in route order; nil when there
// are none. The middleware adds them to the request it hands to
// Config.Denied. The slice must not be modified.
func Decisions(ctx context.Context) []RuleDecision {
	r, _ := ctx.Value(decisionsKey{}).([]RuleDecision)
	return r
}

// WithDecisions returns a copy of ctx carrying decisions, for Decisions. A
// handler written for Config.Denied can be tested with it.
func WithDecisions(ctx context.Context, decisions []RuleDecision) context.Context {
	return context.WithValue(ctx, decisionsKey{}, decisions)
}

// DeniedHandler is the default Config.Denied: a 429 Too Many Requests
// with an RFC 9457 body of the quota-exceeded problem type, whose
// violated-policies member names the RateLimit item of every denying rule
// (see Decisions). The rate limit header fields are already set when it
// runs.
var DeniedHandler http.Handler = http.HandlerFunc(denied)

func denied(w http.ResponseWriter, r *http.Request) {
	results := Decisions(r.Context())
	items := make([]rlheader.Item, len(results))
	for i := range results {
		items[i] = results[i].item()
	}
	p := Problem{
		Type:   QuotaExceededType,
		Title:  "Too Many Requests",
		Status: http.StatusTooManyRequests,
		Detail: "The request exceeds the rate limit.",
	}
	for i := range results {
		if res := &results[i]; res.Err == nil && !res.Decision.Allowed && !res.failedClosed() {
			name := res.Name
			if res.Policy != nil {
				name = rlheader.ItemName(res.Policy, int(res.Decision.Binding))
			}
			if name != "" {
				p.ViolatedPolicies = append(p.ViolatedPolicies, name)
			}
		}
	}
	if bi := rlheader.Binding(items); bi >= 0 && !results[bi].Decision.Allowed {
		switch d := results[bi].Decision; {
		case d.RetryAfter == floodgate.Never:
			p.Detail = "The request exceeds what the rate limit can ever admit: retrying will not help."
		case d.RetryAfter > 0:
			p.Detail = "The request exceeds the rate limit: retry in " + rlheader.RetryAfterValue(d.RetryAfter) + " s."
		}
	}
	WriteProblem(w, p)
}
