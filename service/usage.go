package service

import (
	"context"
	"errors"
	"fmt"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/usage"
)

// trackedPolicy returns the named policy when it tracks usage, and the
// store's usage.Lister; the error is a *RequestError or ErrNoUsage.
func (s *Service) trackedPolicy(policy string) (*floodgate.Policy, usage.Lister, error) {
	st := s.state.Load()
	p, ok := st.policies[policy]
	if !ok {
		return nil, nil, &RequestError{Code: "unknown_policy", Field: "policy", Msg: fmt.Sprintf("no policy named %q", clip(policy))}
	}
	if !p.Track {
		return nil, nil, &RequestError{Code: "not_tracked", Field: "policy", Msg: fmt.Sprintf("policy %q does not track usage (track: true)", p.Name)}
	}
	lister, ok := s.raw.(usage.Lister)
	if !ok {
		return nil, nil, ErrNoUsage
	}
	return p, lister, nil
}

// queryError turns a query the store refused into a *RequestError naming
// the parameter (code invalid_<parameter>), and passes any other error on.
func queryError(err error) error {
	var qe *usage.QueryError
	if errors.As(err, &qe) {
		return &RequestError{Code: "invalid_" + qe.Field, Field: qe.Field, Msg: qe.Msg}
	}
	return err
}

// Series returns the usage series of key under the named policy, which
// must keep one (track <resolution> for <retention>): an admin action.
// The error is a *RequestError for an unknown policy, one without a
// series or a bad key; ErrNoUsage when the store keeps no usage; else the
// store's.
func (s *Service) Series(ctx context.Context, policy, key string) (usage.Series, *floodgate.Policy, error) {
	p, lister, err := s.trackedPolicy(policy)
	if err != nil {
		return usage.Series{}, nil, err
	}
	if p.SeriesResolution == 0 {
		return usage.Series{}, nil, &RequestError{Code: "no_series", Field: "policy",
			Msg: fmt.Sprintf("policy %q keeps no usage series (track <resolution> for <retention>, such as track 1m for 24h)", p.Name)}
	}
	if err := CheckKey(key, s.state.Load().cfg.Bounds.MaxKeyBytes); err != nil {
		return usage.Series{}, nil, &RequestError{Code: "invalid_key", Field: "key", Msg: err.Error()}
	}
	sr, err := lister.Series(ctx, usage.SeriesQuery{Policy: p.Name, Key: key, Resolution: p.SeriesResolution, Retention: p.SeriesRetention})
	if err != nil {
		return usage.Series{}, nil, queryError(err)
	}
	return sr, p, nil
}

// ListKeys returns one page of the named tracked policy's keys in q's
// order (q.Policy and the series are the policy's): an admin action. The
// error is a *RequestError for an unknown or untracked policy and for a
// query the store refuses, naming the parameter; ErrNoUsage when the
// store keeps no usage; else the store's.
func (s *Service) ListKeys(ctx context.Context, policy string, q usage.Query) (usage.Page, error) {
	p, lister, err := s.trackedPolicy(policy)
	if err != nil {
		return usage.Page{}, err
	}
	q.Policy, q.Resolution, q.Retention = p.Name, p.SeriesResolution, p.SeriesRetention
	page, err := lister.ListKeys(ctx, q)
	if err != nil {
		return usage.Page{}, queryError(err)
	}
	return page, nil
}
