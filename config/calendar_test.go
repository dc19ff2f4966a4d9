package config

import (
	"strings"
	"testing"
)

// TestEnvoyCalendarMonth: envoy.calendar_month is off by default, read as
// a boolean, and anything else is an error naming it.
func TestEnvoyCalendarMonth(t *testing.T) {
	cfg, err := Parse(Source{Name: "f.yaml", Data: []byte("policies: {a: \"gcra 1/1s\"}\n")})
	if err != nil || cfg.Envoy.CalendarMonth {
		t.Fatalf("default: %v, %v; want off", cfg.Envoy.CalendarMonth, err)
	}
	cfg, err = Parse(Source{Name: "f.yaml", Data: []byte("envoy: {calendar_month: true}\n")})
	if err != nil || !cfg.Envoy.CalendarMonth {
		t.Fatalf("calendar_month: true: %v, %v", cfg, err)
	}
	_, err = Parse(Source{Name: "f.yaml", Data: []byte("envoy: {calendar_month: monthly}\n")})
	if err == nil || !strings.Contains(err.Error(), "envoy.calendar_month") {
		t.Fatalf("calendar_month: monthly: %v; want an error naming envoy.calendar_month", err)
	}
}
