// Package envoyrls serves Envoy's rate limit service API
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, from
// go-control-plane) over an rls.Engine, and the same request in
// envoyproxy/ratelimit's JSON form (POST /json). Answers follow
// envoyproxy/ratelimit's (docs/envoy-ratelimit-semantics.md).
package envoyrls

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgatehq/floodgate/config"
	"github.com/floodgatehq/floodgate/rls"
	"github.com/floodgatehq/floodgate/service"
	"github.com/floodgatehq/floodgate/transport/reqlog"
)

// Server implements RateLimitServiceServer.
type Server struct {
	rlsv3.UnimplementedRateLimitServiceServer
	eng *rls.Engine
}

// Register registers the rate limit service of eng on s. The service is
// go-control-plane's, with one difference: a request whose strings are not
// valid UTF-8 is InvalidArgument naming the field, not the Internal error
// protobuf decoding would give (see serviceDesc).
func Register(s *grpc.Server, eng *rls.Engine) *Server {
	srv := &Server{eng: eng}
	s.RegisterService(&serviceDesc, srv)
	return srv
}

// ShouldRateLimit decides every descriptor of req. A bad request is
// InvalidArgument naming the field; a failing store is not an error (the
// failure policy decides); a request the service refused under its
// overload bound (service.ErrOverloaded, overload mode backpressure) is
// ResourceExhausted. Envoy treats every error status alike: its rate
// limit filter lets the request through unless failure_mode_deny is set
// (then it answers status_on_error, 500 by default), so an Envoy that
// must never let an overloaded limiter's traffic pass sets
// failure_mode_deny: true (docs/operations.md, Overload).
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	r, err := FromProto(req)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	resp, err := s.eng.ShouldRateLimit(ctx, r)
	if err != nil {
		return nil, grpcError(err)
	}
	note(ctx, r, resp)
	return ToProto(resp), nil
}

// grpcError is the status of an error of the engine. Only a request
// error's message is passed on: others may hold a store's address.
func grpcError(err error) error {
	var re *service.RequestError
	switch {
	case errors.As(err, &re):
		return status.Error(codes.InvalidArgument, re.Error())
	case errors.Is(err, service.ErrOverloaded):
		return status.Error(codes.ResourceExhausted, "the rate limit service is overloaded; retry later")
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "deadline exceeded")
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "canceled")
	}
	return status.Error(codes.Unavailable, "the store is unavailable; try again")
}

// The units of config are numbered as the proto's, so that converting one
// is a conversion of the number; this fails to compile if either numbering
// moved.
var (
	_ = [1]int{}[int(rlsv3.RateLimitResponse_RateLimit_SECOND)-int(config.Second)]
	_ = [1]int{}[int(rlsv3.RateLimitResponse_RateLimit_MINUTE)-int(config.Minute)]
	_ = [1]int{}[int(rlsv3.RateLimitResponse_RateLimit_HOUR)-int(config.Hour)]
	_ = [1]int{}[int(rlsv3.RateLimitResponse_RateLimit_DAY)-int(config.Day)]
	_ = [1]int{}[int(rlsv3.RateLimitResponse_RateLimit_MONTH)-int(config.Month)]
	_ = [1]int{}[int(rlsv3.RateLimitResponse_RateLimit_YEAR)-int(config.Year)]
	_ = [1]int{}[int(rlsv3.RateLimitResponse_RateLimit_WEEK)-int(config.Week)]
)

// FromProto converts an RLS request: a descriptor's is_negative_hits
// becomes rls.Descriptor.NegativeHits (a refund). It refuses entries that
// are not valid UTF-8 (decoded requests cannot hold them; a request built
// in Go can).
func FromProto(req *rlsv3.RateLimitRequest) (rls.Request, error) {
	out := rls.Request{Domain: req.GetDomain(), HitsAddend: req.GetHitsAddend()}
	if n := len(req.GetDescriptors()); n > 0 {
		out.Descriptors = make([]rls.Descriptor, 0, n)
	}
	for i, d := range req.GetDescriptors() {
		sd := rls.Descriptor{Entries: make([]rls.Entry, len(d.GetEntries())), NegativeHits: d.GetIsNegativeHits()}
		for j, e := range d.GetEntries() {
			if !utf8.ValidString(e.GetKey()) {
				return rls.Request{}, fmt.Errorf("descriptors[%d].entries[%d].key: not valid UTF-8", i, j)
			}
			if !utf8.ValidString(e.GetValue()) {
				return rls.Request{}, fmt.Errorf("descriptors[%d].entries[%d].value: not valid UTF-8", i, j)
			}
			sd.Entries[j] = rls.Entry{Key: e.GetKey(), Value: e.GetValue()}
		}
		if l := d.GetLimit(); l != nil {
			u := config.Unit(l.GetUnit())
			if !u.Valid() {
				return rls.Request{}, fmt.Errorf("descriptors[%d].limit.unit: %s is not a unit (want SECOND … YEAR)", i, l.GetUnit())
			}
			sd.Limit = &rls.Limit{RequestsPerUnit: l.GetRequestsPerUnit(), Unit: u}
		}
		if h := d.GetHitsAddend(); h != nil {
			v := h.GetValue()
			sd.HitsAddend = &v
		}
		out.Descriptors = append(out.Descriptors, sd)
	}
	return out, nil
}

// ToProto converts an RLS response. The message and its parts share one
// allocation for the common answer (one descriptor, two headers at most),
// and a few for others.
func ToProto(r rls.Response) *rlsv3.RateLimitResponse {
	var (
		out  *rlsv3.RateLimitResponse
		sts  []rlsv3.RateLimitResponse_DescriptorStatus
		lims []rlsv3.RateLimitResponse_RateLimit
		durs []durationpb.Duration
		hvs  []corev3.HeaderValue
		ptrs []*rlsv3.RateLimitResponse_DescriptorStatus
		hptr []*corev3.HeaderValue
	)
	ns, nh := len(r.Statuses), len(r.Headers)
	if ns <= 1 && nh <= 2 {
		p := new(protoParts)
		out = &p.resp
		sts, lims, durs, ptrs = p.status[:ns], p.limit[:ns], p.reset[:ns], p.statuses[:0:ns]
		hvs, hptr = p.headers[:nh], p.headerPtrs[:0:nh]
	} else {
		out = new(rlsv3.RateLimitResponse)
		sts, lims, durs = make([]rlsv3.RateLimitResponse_DescriptorStatus, ns), make([]rlsv3.RateLimitResponse_RateLimit, ns), make([]durationpb.Duration, ns)
		ptrs = make([]*rlsv3.RateLimitResponse_DescriptorStatus, 0, ns)
		hvs, hptr = make([]corev3.HeaderValue, nh), make([]*corev3.HeaderValue, 0, nh)
	}
	out.OverallCode = code(r.OverallCode)
	for i, st := range r.Statuses {
		ps := &sts[i]
		ps.Code, ps.LimitRemaining = code(st.Code), st.LimitRemaining
		if l := st.CurrentLimit; l != nil {
			pl := &lims[i]
			pl.Name, pl.RequestsPerUnit, pl.Unit = l.Name, l.RequestsPerUnit, rlsv3.RateLimitResponse_RateLimit_Unit(l.Unit)
			ps.CurrentLimit = pl
		}
		if st.HasReset {
			// As durationpb.New.
			d := &durs[i]
			secs := st.DurationUntilReset.Nanoseconds() / 1e9
			d.Seconds, d.Nanos = secs, int32(st.DurationUntilReset.Nanoseconds()-secs*1e9)
			ps.DurationUntilReset = d
		}
		ptrs = append(ptrs, ps)
	}
	if ns > 0 {
		out.Statuses = ptrs
	}
	for i, h := range r.Headers {
		hv := &hvs[i]
		hv.Key, hv.Value = h.Name, h.Value
		hptr = append(hptr, hv)
	}
	if nh > 0 {
		out.ResponseHeadersToAdd = hptr
	}
	return out
}

// protoParts is a response of one descriptor and up to two headers, in
// one allocation (ToProto).
type protoParts struct {
	resp       rlsv3.RateLimitResponse
	status     [1]rlsv3.RateLimitResponse_DescriptorStatus
	limit      [1]rlsv3.RateLimitResponse_RateLimit
	reset      [1]durationpb.Duration
	statuses   [1]*rlsv3.RateLimitResponse_DescriptorStatus
	headers    [2]corev3.HeaderValue
	headerPtrs [2]*corev3.HeaderValue
}

func code(c rls.Code) rlsv3.RateLimitResponse_Code {
	switch c {
	case rls.CodeOK:
		return rlsv3.RateLimitResponse_OK
	case rls.CodeOverLimit:
		return rlsv3.RateLimitResponse_OVER_LIMIT
	}
	return rlsv3.RateLimitResponse_UNKNOWN
}

// JSONHandler serves envoyproxy/ratelimit's /json endpoint: a
// RateLimitRequest in protobuf's JSON form, answered with the
// RateLimitResponse in the same form; 200, or 429 when the overall code is
// OVER_LIMIT. A request the service refused under its overload bound gets
// overload.status (503 by default) with Retry-After and the JSON error
// "overloaded". A malformed or refused request gets 400 with a JSON error
// naming the problem; a body over maxBody bytes 413; a Content-Type other
// than JSON (none, and the form type curl -d sends, are taken, as on
// /v1/check) 415. Every error body is a JSON object, whatever the input.
func JSONHandler(eng *rls.Engine, maxBody int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			jsonError(w, http.StatusMethodNotAllowed, "method_not_allowed", "/json takes POST")
			return
		}
		if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/x-www-form-urlencoded") {
			if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
				jsonError(w, http.StatusUnsupportedMediaType, "unsupported_media_type", fmt.Sprintf("Content-Type %q: send application/json", clip(ct)))
				return
			}
		}
		data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				jsonError(w, http.StatusRequestEntityTooLarge, "body_too_large", fmt.Sprintf("request body over %d bytes (limits.max_body_bytes)", mbe.Limit))
				return
			}
			// The error of a connection names its addresses: not for the
			// client.
			jsonError(w, http.StatusBadRequest, "unreadable_body", "the request body could not be read to its end")
			return
		}
		req, err := DecodeJSON(data)
		if err != nil {
			jsonError(w, http.StatusBadRequest, "malformed_request", err.Error())
			return
		}
		resp, err := eng.ShouldRateLimit(r.Context(), req)
		if err != nil {
			var re *service.RequestError
			if errors.As(err, &re) {
				jsonError(w, http.StatusBadRequest, re.Code, re.Error())
				return
			}
			if errors.Is(err, service.ErrOverloaded) {
				// Backpressure, with the operator's status
				// (overload.status): 503, or 429.
				w.Header().Set("Retry-After", "1")
				jsonError(w, eng.Service().Config().Overload.Status, "overloaded", "the rate limit service is overloaded; retry later")
				return
			}
			jsonError(w, http.StatusServiceUnavailable, "store_unavailable", "the store is unavailable; try again")
			return
		}
		body, err := protojson.Marshal(ToProto(resp))
		if err != nil {
			jsonError(w, http.StatusInternalServerError, "internal", "encoding the response failed")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch resp.OverallCode {
		case rls.CodeOverLimit:
			w.WriteHeader(http.StatusTooManyRequests)
		case rls.CodeOK:
			w.WriteHeader(http.StatusOK)
		default:
			w.WriteHeader(http.StatusInternalServerError)
		}
		w.Write(body)
	})
}

// DecodeJSON reads a RateLimitRequest in protobuf's JSON form (field names
// in either case style, enums as names or numbers; unknown fields are
// refused). It is what the fuzz test drives.
func DecodeJSON(data []byte) (rls.Request, error) {
	if len(strings.TrimSpace(string(data))) == 0 {
		return rls.Request{}, errors.New("empty body: send a RateLimitRequest in JSON")
	}
	var pr rlsv3.RateLimitRequest
	if err := protojson.Unmarshal(data, &pr); err != nil {
		return rls.Request{}, fmt.Errorf("not a RateLimitRequest: %v", err)
	}
	return FromProto(&pr)
}

// jsonError answers an error as {"error": {"code", "message"}}, encoded
// by encoding/json: valid JSON whatever bytes the message quotes (invalid
// UTF-8 becomes U+FFFD, control characters are escaped).
func jsonError(w http.ResponseWriter, status int, code, msg string) {
	type body struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(map[string]body{"error": {Code: code, Message: msg}})
}

// clip shortens client input quoted in an error.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// Interface guard.
var _ rlsv3.RateLimitServiceServer = (*Server)(nil)

// note fills the access log line of an answered request: the domain's
// descriptors as digests, and the overall verdict.
func note(ctx context.Context, req rls.Request, resp rls.Response) {
	n := reqlog.NoteOf(ctx)
	if n == nil {
		return
	}
	n.Domain = req.Domain
	for _, d := range req.Descriptors {
		var b strings.Builder
		for _, e := range d.Entries {
			b.WriteString(e.Key)
			b.WriteByte('=')
			b.WriteString(e.Value)
			b.WriteByte('/')
		}
		n.Keys = append(n.Keys, service.KeyDigest(b.String()))
	}
	ok := resp.OverallCode == rls.CodeOK
	n.Allowed = &ok
}
