package envoyrls_test

import (
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgatehq/floodgate/config"
	"github.com/floodgatehq/floodgate/rls"
	"github.com/floodgatehq/floodgate/transport/envoyrls"
)

// plainToProto is ToProto written plainly, one allocation per part: what
// ToProto must answer.
func plainToProto(r rls.Response) *rlsv3.RateLimitResponse {
	codes := map[rls.Code]rlsv3.RateLimitResponse_Code{rls.CodeOK: rlsv3.RateLimitResponse_OK, rls.CodeOverLimit: rlsv3.RateLimitResponse_OVER_LIMIT}
	out := &rlsv3.RateLimitResponse{OverallCode: codes[r.OverallCode]}
	for _, st := range r.Statuses {
		ps := &rlsv3.RateLimitResponse_DescriptorStatus{Code: codes[st.Code], LimitRemaining: st.LimitRemaining}
		if l := st.CurrentLimit; l != nil {
			ps.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{Name: l.Name, RequestsPerUnit: l.RequestsPerUnit, Unit: rlsv3.RateLimitResponse_RateLimit_Unit(l.Unit)}
		}
		if st.HasReset {
			ps.DurationUntilReset = durationpb.New(st.DurationUntilReset)
		}
		out.Statuses = append(out.Statuses, ps)
	}
	for _, h := range r.Headers {
		out.ResponseHeadersToAdd = append(out.ResponseHeadersToAdd, &corev3.HeaderValue{Key: h.Name, Value: h.Value})
	}
	return out
}

func TestToProtoParts(t *testing.T) {
	statuses := []rls.Status{
		{Code: rls.CodeOK},
		{Code: rls.CodeOK, LimitRemaining: 4294967295},
		{Code: rls.CodeOverLimit, CurrentLimit: &rls.Limit{Name: "n", RequestsPerUnit: 5, Unit: config.Hour}, DurationUntilReset: 1800 * time.Second, HasReset: true},
		{Code: rls.CodeOK, CurrentLimit: &rls.Limit{RequestsPerUnit: 10, Unit: config.Second}, LimitRemaining: 9, DurationUntilReset: 1500 * time.Millisecond, HasReset: true},
		{Code: rls.CodeOK, CurrentLimit: &rls.Limit{RequestsPerUnit: 1, Unit: config.Year}, HasReset: true},
	}
	headers := []rls.Header{{Name: "RateLimit", Value: `"a";r=1;t=2`}, {Name: "RateLimit-Policy", Value: `"a";q=3;w=60`}, {Name: "X-RateLimit-Limit", Value: "3"}}
	for ns := 0; ns <= len(statuses); ns++ {
		for nh := 0; nh <= len(headers); nh++ {
			for _, overall := range []rls.Code{rls.CodeOK, rls.CodeOverLimit, rls.CodeUnknown} {
				r := rls.Response{OverallCode: overall, Statuses: statuses[len(statuses)-ns:], Headers: headers[:nh]}
				got, want := envoyrls.ToProto(r), plainToProto(r)
				if !proto.Equal(got, want) {
					t.Errorf("%d statuses, %d headers, overall %v: ToProto = %v, want %v", ns, nh, overall, got, want)
				}
				gb, err := proto.MarshalOptions{Deterministic: true}.Marshal(got)
				if err != nil {
					t.Fatal(err)
				}
				wb, _ := proto.MarshalOptions{Deterministic: true}.Marshal(want)
				if string(gb) != string(wb) {
					t.Errorf("%d statuses, %d headers: wire forms differ", ns, nh)
				}
				if (got.Statuses == nil) != (want.Statuses == nil) || (got.ResponseHeadersToAdd == nil) != (want.ResponseHeadersToAdd == nil) {
					t.Errorf("%d statuses, %d headers: nil slices differ", ns, nh)
				}
			}
		}
	}
}
