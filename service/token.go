package service

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/config"
	"github.com/floodgatehq/floodgate/storekit"
)

// Reservations over HTTP (docs/budgets.md, "HTTP tokens"). Reserve returns
// the store's Reservation as an opaque token: its members (policy names,
// the digests of the policies' identities, keys), n and holds, an id and
// a horizon, MAC'd with HMAC-SHA-256 under the configuration's
// budgets.token_key (or a key drawn by the process). Settle verifies the
// MAC before anything else, so a client cannot settle a reservation it
// was not given: a settle gives units back, and an open one would be a
// free budget.
//
// A second settle of one token is refused (already_settled) by the
// process that settled it first, which remembers settled tokens until
// their horizon (at most settledMax of them). Another replica, a restarted
// process, or one that had to forget the token accepts it again: the
// store keeps no record of reservations. The damage is bounded by one
// reservation's n per repeat, given back only where it still counts and
// never beyond full.

// tokenPrefix starts every token: the format's version.
const tokenPrefix = "fgr1."

// tokenBody is what a token carries, JSON-encoded.
type tokenBody struct {
	ID       string   `json:"id"`  // 16 random bytes, hex: the replay guard's handle
	Horizon  int64    `json:"exp"` // Unix µs after which nothing it spent still counts
	Names    []string `json:"p"`   // each member's policy name
	Digests  []string `json:"d"`   // each member's policy identity, digested
	Keys     []string `json:"k"`   // each member's key
	N        int64    `json:"n"`
	Holds    []int64  `json:"h"`
	Degraded bool     `json:"-"`
}

// Reservation is the outcome of Reserve: the decision and, when it is
// allowed and was made by the store itself (not the failure policy), the
// token Settle takes.
type Reservation struct {
	GroupVerdict
	// Token is empty for a denied or degraded reservation, which holds
	// nothing.
	Token string
}

// Reserve decides items as CheckGroup does (one item, or an atomic group
// of several with one cost, n) and, when allowed, returns a token that
// Settle takes to give back what the caller ends up not using. The error
// is a *RequestError for a bad request, or one wrapping ErrNoBudgets when
// the store has no reservations.
func (s *Service) Reserve(ctx context.Context, items []Item) (Reservation, error) {
	st := s.state.Load()
	if err := s.budgetsOK(); err != nil {
		return Reservation{}, err
	}
	for i := range items {
		items[i].AtMost = false
	}
	reqs, err := s.requests(st, items, false, len(items) > 1)
	if err != nil {
		return Reservation{}, err
	}
	if err := checkGroup(reqs); err != nil {
		return Reservation{}, err
	}
	req := group(reqs)
	r := new(floodgate.Reservation)
	req.Reserve = r
	d, err := s.takeBudget(ctx, req)
	if err != nil {
		return Reservation{}, err
	}
	out := Reservation{GroupVerdict: groupVerdict(&req, d)}
	for _, p := range out.Policies {
		s.obs.Decision(p.Name, d.Allowed, false, d.Degraded)
	}
	if !d.Allowed || d.Degraded || len(r.Holds) != storekit.HoldWords*(len(reqs)) {
		return out, nil
	}
	body := tokenBody{ID: randomID(), N: r.N, Holds: r.Holds,
		Horizon: s.clock.Now().Add(horizon(out.Policies)).UnixMicro()}
	for _, q := range reqs {
		body.Names = append(body.Names, q.Policy.Name)
		body.Digests = append(body.Digests, policyDigest(q.Policy))
		body.Keys = append(body.Keys, q.Key)
	}
	out.Token = sign(*s.budget.key.Load(), body)
	return out, nil
}

// checkGroup refuses a group of more than storekit.MaxMembers members,
// of different costs, or repeating a member.
func checkGroup(reqs []floodgate.Request) error {
	if len(reqs) > storekit.MaxMembers {
		return &RequestError{Code: "too_many_items", Field: "requests",
			Msg: fmt.Sprintf("%d requests in one group; at most %d", len(reqs), storekit.MaxMembers)}
	}
	for i := 1; i < len(reqs); i++ {
		for j := range i {
			if reqs[j].Policy.Name == reqs[i].Policy.Name && reqs[j].Key == reqs[i].Key {
				return &RequestError{Code: "invalid_request", Field: fmt.Sprintf("requests[%d]", i),
					Msg: fmt.Sprintf("repeats requests[%d]'s policy %q and key: a group's members are distinct", j, reqs[i].Policy.Name)}
			}
		}
	}
	return nil
}

// Settle gives back the units of the reservation token that the caller did
// not use: n − used, 0 ≤ used ≤ n, where they still count (SPEC.md,
// "Reserve, settle, refund"), and returns the decision a peek of 1 gets
// after it, on the reservation's members. Errors are *RequestErrors: a
// token that is not one this service signed (invalid_token, field token),
// a used outside 0 to n (invalid_used), a token this process settled
// before (already_settled), a policy removed or changed since the
// reservation (policy_changed); or the store's failure (nothing known to
// be given back: the settle may be retried).
func (s *Service) Settle(ctx context.Context, token string, used int64) (GroupVerdict, error) {
	st := s.state.Load()
	if err := s.budgetsOK(); err != nil {
		return GroupVerdict{}, err
	}
	body, ok := verify(*s.budget.key.Load(), token)
	if !ok {
		return GroupVerdict{}, &RequestError{Code: "invalid_token", Field: "token",
			Msg: "not a reservation token of this service (altered, truncated, or signed with another budgets.token_key: a process without one draws its own at start)"}
	}
	if used < 0 || used > body.N {
		return GroupVerdict{}, &RequestError{Code: "invalid_used", Field: "used",
			Msg: fmt.Sprintf("used %d: want an integer from 0 to the reservation's n, %d", used, body.N)}
	}
	reqs := make([]floodgate.Request, len(body.Names))
	for i, name := range body.Names {
		p, ok := st.policies[name]
		if !ok || policyDigest(p) != body.Digests[i] {
			return GroupVerdict{}, &RequestError{Code: "policy_changed", Field: "token",
				Msg: fmt.Sprintf("policy %q was removed or changed since the reservation; nothing given back", clip(name))}
		}
		reqs[i] = floodgate.Request{Policy: p, Key: body.Keys[i], N: 1}
	}
	if !s.budget.settled.mark(body.ID, body.Horizon, s.clock.Now().UnixMicro()) {
		return GroupVerdict{}, &RequestError{Code: "already_settled", Field: "token",
			Msg: "this reservation was settled before; a reservation gives back once"}
	}
	req := group(reqs)
	if x := body.N - used; x == 0 {
		req.Peek = true
	} else {
		req.N = x
		req.Settle = &floodgate.Reservation{
			Decision: floodgate.Decision{Allowed: true, Granted: body.N},
			Key:      body.Keys[0], N: body.N, Names: body.Names, GroupKeys: body.Keys[1:], Holds: body.Holds,
		}
	}
	d, err := s.takeBudget(ctx, req)
	if err == nil && d.Degraded && !req.Peek {
		err = fmt.Errorf("%w: the store failed; nothing is known to be given back", floodgate.ErrUnavailable)
	}
	if err != nil {
		s.budget.settled.forget(body.ID) // may be retried
		return GroupVerdict{}, err
	}
	for _, q := range reqs {
		s.cache.drop(q.Policy, q.Key)
	}
	return groupVerdict(&req, d), nil
}

// horizon returns how long a reservation's units may count: twice the
// longest window of its policies (a sliding window keeps the previous
// one; a calendar month is up to 31 days and an hour), and an hour more.
func horizon(ps []*floodgate.Policy) time.Duration {
	var longest time.Duration
	for _, p := range ps {
		for i := range max(1, len(p.Limits)) {
			_, w := p.Quota(i)
			if p.Align == "calendar" {
				w = 745 * time.Hour
			}
			longest = max(longest, w)
		}
	}
	return 2*longest + time.Hour
}

// policyDigest digests a policy's identity (its text form holds its name
// and every parameter), so that a token is not settled on a policy that
// changed since: its holds would mean something else.
func policyDigest(p *floodgate.Policy) string {
	sum := sha256.Sum256([]byte(p.String()))
	return hex.EncodeToString(sum[:8])
}

func randomID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// sign encodes body as a token under key.
func sign(key []byte, body tokenBody) string {
	data, _ := json.Marshal(body)
	payload := tokenPrefix + base64.RawURLEncoding.EncodeToString(data)
	m := hmac.New(sha256.New, key)
	m.Write([]byte(payload))
	return payload + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// verify returns a token's body when its MAC is key's and the body is
// well formed.
func verify(key []byte, token string) (tokenBody, bool) {
	var body tokenBody
	dot := strings.LastIndexByte(token, '.')
	if !strings.HasPrefix(token, tokenPrefix) || dot <= len(tokenPrefix) {
		return body, false
	}
	payload, mac := token[:dot], token[dot+1:]
	got, err := base64.RawURLEncoding.Strict().DecodeString(mac)
	if err != nil {
		return body, false
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(payload))
	if !hmac.Equal(got, m.Sum(nil)) {
		return body, false
	}
	data, err := base64.RawURLEncoding.Strict().DecodeString(payload[len(tokenPrefix):])
	if err != nil || json.Unmarshal(data, &body) != nil {
		return body, false
	}
	members := len(body.Names)
	if members < 1 || members > storekit.MaxMembers || len(body.Digests) != members || len(body.Keys) != members ||
		len(body.Holds) != storekit.HoldWords*members || body.N < 1 || body.N > floodgate.MaxCost || body.ID == "" {
		return body, false
	}
	return body, true
}

// budgetState is what the service keeps for reservation tokens: the key
// that signs them (swapped by a reload) and the tokens settled here.
type budgetState struct {
	key     atomic.Pointer[[]byte]
	settled settledSet
}

// setKey sets the key of cfg.
func (b *budgetState) setKey(cfg *config.Config) error {
	key, err := tokenKey(cfg)
	if err != nil {
		return err
	}
	b.key.Store(&key)
	return nil
}

// settledMax is how many settled tokens a process remembers.
const settledMax = 100_000

// settledSet remembers the tokens settled on this process until their
// horizon, to refuse a second settle. At settledMax it forgets the
// expired ones, then arbitrary ones.
type settledSet struct {
	mu sync.Mutex
	m  map[string]int64 // id → horizon, Unix µs
}

// mark records id and reports whether it was new.
func (s *settledSet) mark(id string, horizon, now int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = make(map[string]int64)
	}
	if exp, ok := s.m[id]; ok && exp > now {
		return false
	}
	if len(s.m) >= settledMax {
		for k, exp := range s.m {
			if exp <= now {
				delete(s.m, k)
			}
		}
		for k := range s.m {
			if len(s.m) < settledMax {
				break
			}
			delete(s.m, k)
		}
	}
	s.m[id] = horizon
	return true
}

// forget drops id, so that a settle that failed may be retried.
func (s *settledSet) forget(id string) {
	s.mu.Lock()
	delete(s.m, id)
	s.mu.Unlock()
}
