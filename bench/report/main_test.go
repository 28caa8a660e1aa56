package main

import (
	"testing"

	"github.com/edgefleet/fleet/bench/results"
)

func TestValueAndTargets(t *testing.T) {
	for _, c := range []struct {
		f    results.Figure
		want string
	}{
		{results.Figure{Value: 12345, Unit: "ms"}, "12,345 ms"},
		{results.Figure{Value: 115.14, Unit: "KiB"}, "115 KiB"},
		{results.Figure{Value: 42.26}, "42.3"},
		{results.Figure{Value: 0.0171, Unit: "%"}, "0.02 %"},
	} {
		if got := value(c.f); got != c.want {
			t.Errorf("value(%v) = %q, want %q", c.f.Value, got, c.want)
		}
	}
	// A target held at one size gives no verdict on a run of another.
	for _, c := range []struct {
		target string
		size   int
		want   bool
	}{
		{"≤ 30 s at 10,000", 1000, true},
		{"≤ 30 s at 10,000", 10000, false},
		{"≤ 32 KiB at 10,000 agents", 5000, true},
		{"≤ 60 s", 1000, false},
		{"≤ 30 s at 10,000", 0, false},
	} {
		if got := heldAtAnotherSize(&results.Report{Size: c.size}, results.Figure{Target: c.target}); got != c.want {
			t.Errorf("target %q, run of %d: held at another size %v, want %v", c.target, c.size, got, c.want)
		}
	}
	below := results.Figure{Value: 40, Limit: results.Limit(32), Below: true}
	if met, ok := below.Met(); !ok || met {
		t.Errorf("40 ≤ 32: met %v ok %v", met, ok)
	}
	above := results.Figure{Value: 40, Limit: results.Limit(32)}
	if met, ok := above.Met(); !ok || !met {
		t.Errorf("40 ≥ 32: met %v ok %v", met, ok)
	}
	if _, ok := (results.Figure{Value: 1}).Met(); ok {
		t.Error("a figure without a target has one")
	}
}
