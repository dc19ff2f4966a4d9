package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/rlheader"
)

// budget limits tenants' tokens: one Limiter over two policies, so that a
// reservation is taken from both budgets or neither.
type budget struct {
	lim      *floodgate.Limiter
	policies []floodgate.Policy
	now      func() time.Time // for the reset of X-RateLimit fields; the store has its own clock
}

func newBudget(store floodgate.Store, perMinute, perMonth int64, tz string) (*budget, error) {
	minute, err := floodgate.ParsePolicy("tokens-per-minute", fmt.Sprintf("token_bucket %d/1m burst %d", perMinute, perMinute))
	if err != nil {
		return nil, err
	}
	month, err := floodgate.ParsePolicy("tokens-per-month", fmt.Sprintf("fixed_window %d/1month align calendar tz %s", perMonth, tz))
	if err != nil {
		return nil, err
	}
	lim, err := floodgate.NewLimiter(store, minute, month)
	if err != nil {
		return nil, err
	}
	return &budget{lim: lim, policies: []floodgate.Policy{minute, month}, now: time.Now}, nil
}

type completionRequest struct {
	Prompt    string `json:"prompt"`
	MaxTokens int64  `json:"max_tokens"`
}

type completionResponse struct {
	Completion string `json:"completion,omitempty"`
	Reserved   int64  `json:"reserved"`
	Used       int64  `json:"used"`
	Error      string `json:"error,omitempty"`
}

func (b *budget) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/complete", b.complete)
	return mux
}

// complete reserves max_tokens for the tenant on both budgets, runs the
// model, and settles what it used: the tokens it did not use are the
// tenant's again at once.
func (b *budget) complete(w http.ResponseWriter, r *http.Request) {
	tenant := r.Header.Get("X-Tenant")
	var req completionRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil || tenant == "" ||
		req.MaxTokens < 1 || req.MaxTokens > 100_000 {
		reply(w, http.StatusBadRequest, completionResponse{Error: "send X-Tenant and {\"prompt\": ..., \"max_tokens\": 1 to 100000}"})
		return
	}
	res, err := b.lim.Reserve(r.Context(), tenant, req.MaxTokens)
	if err != nil {
		reply(w, http.StatusServiceUnavailable, completionResponse{Error: "the limiter is unavailable"})
		return
	}
	if !res.Decision.Allowed {
		b.headers(w, res.Decision)
		reply(w, http.StatusTooManyRequests, completionResponse{Reserved: 0, Error: "token budget exhausted"})
		return
	}
	completion, used := model(req.Prompt, req.MaxTokens)
	if len(completion) > 60 {
		completion = completion[:60] + "…"
	}
	after, err := b.lim.Settle(r.Context(), res, used)
	if err != nil {
		// The unused tokens stay spent: the tenant is limited a little
		// early, never let past its budget.
		after = res.Decision
	}
	b.headers(w, after)
	reply(w, http.StatusOK, completionResponse{Completion: completion, Reserved: req.MaxTokens, Used: used})
}

// headers sets the RateLimit fields of a decision of the two-policy
// limiter: RateLimit-Policy lists both budgets, RateLimit reports the
// binding one (Decision.Binding indexes the policies' limits in order, one
// each here).
func (b *budget) headers(w http.ResponseWriter, d floodgate.Decision) {
	items := make([]rlheader.Item, len(b.policies))
	for i := range b.policies {
		items[i] = rlheader.Item{Policy: &b.policies[i], Unknown: true}
	}
	if m := int(d.Binding); m >= 0 && m < len(items) {
		d.Binding = 0
		items[m] = rlheader.Item{Policy: &b.policies[m], Decision: d}
	}
	rlheader.Set(w.Header(), rlheader.Default|rlheader.XRateLimit, b.now(), rlheader.PolicyField(items), items)
}

// model stands for the LLM: it writes a few words per word of the prompt,
// at most maxTokens "tokens" (one a word).
func model(prompt string, maxTokens int64) (string, int64) {
	words := strings.Fields(prompt)
	var out []string
	for i := 0; int64(len(out)) < maxTokens && i < 3*len(words); i++ {
		out = append(out, words[i%len(words)])
	}
	return strings.Join(out, " "), int64(len(out))
}

func reply(w http.ResponseWriter, status int, v completionResponse) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
