package service_test

import (
	"errors"
	"testing"

	"github.com/floodgatehq/floodgate"
	"github.com/floodgatehq/floodgate/floodgatetest"
	"github.com/floodgatehq/floodgate/service"
)

// TestDecideGroup: requests of policies the configuration does not name
// (an Envoy engine's) are decided as one group, all or none; members of
// different costs are a request error; the memory store groups any keys.
func TestDecideGroup(t *testing.T) {
	svc, err := service.New(mustParse(t, "policies:\n  a: \"fixed_window 1/1m\"\n"), service.Options{Store: newMem(t, floodgatetest.NewManualClock(epoch)), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Groups(); err != nil {
		t.Fatalf("Groups on memory: %v; want nil", err)
	}
	one, err := floodgate.ParsePolicy("envoy.one", "fixed_window 1/1m")
	if err != nil {
		t.Fatal(err)
	}
	five, err := floodgate.ParsePolicy("envoy.five", "fixed_window 5/1m")
	if err != nil {
		t.Fatal(err)
	}
	group := []floodgate.Request{{Policy: &five, Key: "y", N: 1}, {Policy: &one, Key: "x", N: 1}}
	v, err := svc.DecideGroup(ctx, group)
	if err != nil || !v.Decision.Allowed {
		t.Fatalf("first: %+v, %v; want allowed", v, err)
	}
	v, err = svc.DecideGroup(ctx, group)
	if err != nil || v.Decision.Allowed || v.Member != 1 || v.Policy.Name != "envoy.one" {
		t.Fatalf("second: %+v, %v; want denied by member 1, envoy.one", v, err)
	}
	ds, err := svc.Decide(ctx, []floodgate.Request{{Policy: &five, Key: "y", N: 1, Peek: true}})
	if err != nil || ds[0].Remaining != 3 {
		t.Fatalf("five after the denied group: %+v, %v; want remaining 3 (a peek of 1 on a count of 1)", ds, err)
	}
	_, err = svc.DecideGroup(ctx, []floodgate.Request{{Policy: &five, Key: "y", N: 1}, {Policy: &one, Key: "z", N: 2}})
	var re *service.RequestError
	if !errors.As(err, &re) || re.Field != "requests[1]" {
		t.Fatalf("different costs: %v; want a request error naming requests[1]", err)
	}
}
