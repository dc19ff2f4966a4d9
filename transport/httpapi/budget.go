package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/floodgatehq/floodgate/rlheader"
	"github.com/floodgatehq/floodgate/service"
	"github.com/floodgatehq/floodgate/transport/reqlog"
)

// The budget endpoints (docs/budgets.md, docs/operations.md):
//
//	POST /v1/check, /v1/peek  with "atomic": true, the batch is one group;
//	                          with "at_most": true, an item is a partial grant
//	POST /v1/reserve          {"policy", "key", "n"} or {"requests": [{"policy", "key"}, …], "n"}
//	POST /v1/settle           {"token", "used"}
//	POST /v1/refund           as reserve (admin)

func (a *api) budgetRoutes(mux *http.ServeMux) {
	mux.HandleFunc("/v1/reserve", a.method(http.MethodPost, a.client(a.reserve)))
	mux.HandleFunc("/v1/settle", a.method(http.MethodPost, a.client(a.settleToken)))
	mux.HandleFunc("/v1/refund", a.method(http.MethodPost, a.admin(a.refund)))
}

// atMost reports whether an item asks for a partial grant.
func atMost(items []service.Item) bool {
	for _, it := range items {
		if it.AtMost {
			return true
		}
	}
	return false
}

// budgetResponse is the answer of an atomic batch, a reservation, a
// settle and a refund: one decision, the group's.
type budgetResponse struct {
	Allowed bool `json:"allowed"`
	// Atomic is set for an atomic batch of /v1/check and /v1/peek.
	Atomic bool `json:"atomic,omitempty"`
	// Member is the index of the binding member (the request whose policy
	// binds) of a group of several; Decision.Policy is its policy, and
	// Decision.Binding the limit of that policy.
	Member   *int         `json:"member,omitempty"`
	Decision decisionJSON `json:"decision"`
	// Token is what /v1/settle takes: only for an allowed reservation the
	// store made (not a degraded one).
	Token   string            `json:"token,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
}

// groupResponse renders a group verdict; granted adds the decision's
// Granted.
func groupResponse(v service.GroupVerdict, granted bool) budgetResponse {
	out := budgetResponse{Allowed: v.Decision.Allowed, Decision: toJSONDecision(v.Policy, v.Decision)}
	if len(v.Policies) > 1 {
		m := v.Member
		out.Member = &m
	}
	if granted {
		g := v.Decision.Granted
		out.Decision.Granted = &g
	}
	out.Headers = groupHeaders(v)
	return out
}

// groupHeaders returns the RateLimit fields of a group decision:
// RateLimit-Policy lists every member's policy, RateLimit reports the
// binding member (the others carry no numbers of their own).
func groupHeaders(v service.GroupVerdict) map[string]string {
	items := make([]rlheader.Item, len(v.Policies))
	for i, p := range v.Policies {
		items[i] = rlheader.Item{Policy: p, Unknown: true}
	}
	if v.Member >= 0 && v.Member < len(items) {
		items[v.Member] = rlheader.Item{Policy: v.Policy, Decision: v.Decision}
	}
	h := http.Header{}
	rlheader.Set(h, rlheader.IETF|rlheader.RetryAfter, time.Now(), rlheader.PolicyField(items), items)
	out := make(map[string]string, len(h))
	for k, vs := range h {
		out[rlheader.Spelling(k)] = strings.Join(vs, ", ")
	}
	return out
}

// decideBudget answers a check or peek that is an atomic batch or holds
// partial grants.
func (a *api) decideBudget(w http.ResponseWriter, r *http.Request, items []service.Item, atomic, peek bool) {
	if !atomic {
		res, err := a.svc.CheckAtMost(r.Context(), items, peek)
		if err != nil {
			a.budgetError(w, r, err)
			return
		}
		note(r, res.Items, items, res.Allowed)
		out := checkResponse{Allowed: res.Allowed, Decisions: make([]decisionJSON, len(res.Items))}
		for i, it := range res.Items {
			out.Decisions[i] = toJSONDecision(it.Policy, it.Decision)
			if items[i].AtMost {
				g := it.Decision.Granted
				out.Decisions[i].Granted = &g
			}
		}
		out.Headers = rateLimitHeaders(res.Items)
		writeVerdict(w, res.Items, res.Allowed, peek, out.Headers, out)
		return
	}
	v, err := a.svc.CheckGroup(r.Context(), items, peek)
	if err != nil {
		a.budgetError(w, r, err)
		return
	}
	one := []service.ItemDecision{{Policy: v.Policy, Decision: v.Decision}}
	note(r, one, items, v.Decision.Allowed)
	out := groupResponse(v, atMost(items))
	out.Atomic = true
	writeVerdict(w, one, v.Decision.Allowed, peek, out.Headers, out)
}

// writeVerdict writes a decision's answer with /v1/check's statuses: 429
// when a limit denies (not for a peek), 503 when the failure policy
// denies, else 200; and its headers.
func writeVerdict(w http.ResponseWriter, decided []service.ItemDecision, allowed, peek bool, headers map[string]string, body any) {
	status := http.StatusOK
	if !allowed && !peek {
		status = http.StatusTooManyRequests
		if retry, ok := failedClosed(decided); ok {
			status = http.StatusServiceUnavailable
			headers["Retry-After"] = rlheader.RetryAfterValue(retry)
		}
	}
	for k, v := range headers {
		w.Header().Set(k, v)
	}
	writeJSON(w, status, body)
}

// note fills the access log's note of a request: policies, key digests
// and the verdict.
func note(r *http.Request, decided []service.ItemDecision, items []service.Item, allowed bool) {
	n := reqlog.NoteOf(r.Context())
	if n == nil {
		return
	}
	for _, it := range decided {
		n.Policies = append(n.Policies, it.Policy.Name)
		n.Degraded = n.Degraded || it.Decision.Degraded
	}
	for _, it := range items {
		n.Keys = append(n.Keys, service.KeyDigest(it.Key))
	}
	n.Allowed = &allowed
}

// budgetError answers an error of a budget operation: a conflict (409)
// for a group a Cluster cannot decide in one slot, a token settled
// before or whose policy changed; 501 for a store without budgets; the
// others as serviceError does.
func (a *api) budgetError(w http.ResponseWriter, r *http.Request, err error) {
	var re *service.RequestError
	if errors.As(err, &re) {
		if n := reqlog.NoteOf(r.Context()); n != nil {
			n.Problem = re.Code
		}
		switch re.Code {
		case "cross_slot", "already_settled", "policy_changed":
			writeError(w, http.StatusConflict, re.Code, re.Field, re.Msg)
			return
		}
	}
	if errors.Is(err, service.ErrNoBudgets) {
		writeError(w, http.StatusNotImplemented, "no_budgets", "",
			"the store does not implement atomic batches, partial grants, reservations or refunds (a memory store does)")
		return
	}
	a.serviceError(w, err)
}

// member is a member of a reservation's or refund's group.
type member struct {
	Policy string  `json:"policy"`
	Key    jsonKey `json:"key"`
}

// unitsRequest is the body of /v1/reserve and /v1/refund: one policy and
// key, or a group of them in requests, and n.
type unitsRequest struct {
	Policy   string            `json:"policy"`
	Key      jsonKey           `json:"key"`
	N        *int64            `json:"n"`
	Requests []json.RawMessage `json:"requests,omitempty"`
}

// decodeUnits reads a body of /v1/reserve or /v1/refund into items of
// cost n. what says what n is, for errors.
func decodeUnits(w http.ResponseWriter, r *http.Request, maxBody int64, what string) ([]service.Item, *apiError) {
	if e := checkContentType(r); e != nil {
		return nil, e
	}
	var req unitsRequest
	if e := decodeJSON(http.MaxBytesReader(w, r.Body, maxBody), &req); e != nil {
		return nil, e
	}
	single := req.Policy != "" || req.Key != ""
	if single && req.Requests != nil {
		return nil, &apiError{http.StatusBadRequest, "invalid_request", "requests", "give either one policy and key or requests (a group), not both"}
	}
	if req.N == nil {
		return nil, &apiError{http.StatusBadRequest, "missing_n", "n", fmt.Sprintf("give n, the units to %s: an integer from 1 to 2^53-1", what)}
	}
	if n := *req.N; n < 1 {
		return nil, &apiError{http.StatusBadRequest, "invalid_cost", "n",
			fmt.Sprintf("n %d: want an integer from 1 to 2^53-1 (0 is not a peek and a negative n is never a refund nor a reset)", n)}
	}
	var members []member
	if single || req.Requests == nil {
		members = []member{{Policy: req.Policy, Key: req.Key}}
	} else {
		members = make([]member, len(req.Requests))
		for i, raw := range req.Requests {
			if e := decodeJSON(bytes.NewReader(raw), &members[i]); e != nil {
				e.field = join(fmt.Sprintf("requests[%d]", i), e.field)
				return nil, e
			}
		}
	}
	items := make([]service.Item, len(members))
	for i, m := range members {
		if m.Policy == "" {
			field := "policy"
			if !single && req.Requests != nil {
				field = fmt.Sprintf("requests[%d].policy", i)
			}
			return nil, &apiError{http.StatusBadRequest, "missing_policy", field, "name the policy to apply"}
		}
		items[i] = service.Item{Policy: m.Policy, Key: string(m.Key), Cost: *req.N}
	}
	return items, nil
}

func (a *api) reserve(w http.ResponseWriter, r *http.Request) {
	items, e := decodeUnits(w, r, a.svc.Config().Bounds.MaxBodyBytes, "reserve")
	if e != nil {
		e.write(w)
		return
	}
	res, err := a.svc.Reserve(r.Context(), items)
	if err != nil {
		a.budgetError(w, r, err)
		return
	}
	one := []service.ItemDecision{{Policy: res.Policy, Decision: res.Decision}}
	note(r, one, items, res.Decision.Allowed)
	out := groupResponse(res.GroupVerdict, true)
	out.Token = res.Token
	writeVerdict(w, one, res.Decision.Allowed, false, out.Headers, out)
}

func (a *api) settleToken(w http.ResponseWriter, r *http.Request) {
	if e := checkContentType(r); e != nil {
		e.write(w)
		return
	}
	var req struct {
		Token string `json:"token"`
		Used  *int64 `json:"used"`
	}
	if e := decodeJSON(http.MaxBytesReader(w, r.Body, a.svc.Config().Bounds.MaxBodyBytes), &req); e != nil {
		e.write(w)
		return
	}
	switch {
	case req.Token == "":
		writeError(w, http.StatusBadRequest, "missing_token", "token", "give the token /v1/reserve returned")
		return
	case req.Used == nil:
		writeError(w, http.StatusBadRequest, "missing_used", "used", "give used, the units the work used: an integer from 0 to the reservation's n")
		return
	}
	v, err := a.svc.Settle(r.Context(), req.Token, *req.Used)
	if err != nil {
		a.budgetError(w, r, err)
		return
	}
	if n := reqlog.NoteOf(r.Context()); n != nil {
		for _, p := range v.Policies {
			n.Policies = append(n.Policies, p.Name)
		}
	}
	out := groupResponse(v, false)
	writeVerdict(w, nil, true, true, out.Headers, out)
}

func (a *api) refund(w http.ResponseWriter, r *http.Request) {
	// JSON only, as /v1/reset: no form a foreign page could post.
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		writeError(w, http.StatusUnsupportedMediaType, "unsupported_media_type", "",
			fmt.Sprintf("Content-Type %q: an admin endpoint takes application/json only", clip(r.Header.Get("Content-Type"))))
		return
	}
	items, e := decodeUnits(w, r, a.svc.Config().Bounds.MaxBodyBytes, "give back")
	if e != nil {
		e.write(w)
		return
	}
	v, err := a.svc.Refund(r.Context(), items)
	if err != nil {
		a.budgetError(w, r, err)
		return
	}
	out := groupResponse(v, false)
	writeVerdict(w, nil, true, true, out.Headers, out)
}
