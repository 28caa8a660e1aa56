package main

import (
	"strings"
	"testing"

	"github.com/edgefleet/fleet/test/faults/results"
)

// Percentiles are nearest-rank, and the table counts what the runs say:
// a failing run is listed with why and its replay command.
func TestRenderCountsTheRuns(t *testing.T) {
	if got := percentile([]float64{5, 1, 4, 2, 3}, 50); got != 3 {
		t.Errorf("p50 = %v", got)
	}
	if got := percentile([]float64{5, 1, 4, 2, 3}, 99); got != 5 {
		t.Errorf("p99 = %v", got)
	}
	md := string(render([]results.Run{
		{Test: "TestPowerCuts", Seed: 1, Faults: 2, Orders: 6, Passed: true, Seconds: 40, Phases: []results.Phase{{Name: "a", ConvergeSeconds: 1}, {Name: "b", ConvergeSeconds: 3}}},
		{Test: "TestPowerCuts", Seed: 2, Faults: 3, Orders: 6, Passed: false, Seconds: 50, Violations: []string{"Machine w0 was bootstrapped twice"},
			Replay: "go test ./test/faults -run 'TestPowerCuts$' -args -faults.seed=2"},
	}))
	for _, want := range []string{
		"| `TestPowerCuts` | host power cut", "| 2 (1, 2) | 1 | 5 | 12 | **1** | 1.0 s | 3.0 s | 40.0 s |",
		"- `TestPowerCuts` seed 2", "Machine w0 was bootstrapped twice — `go test ./test/faults -run 'TestPowerCuts$' -args -faults.seed=2`",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("%q missing from:\n%s", want, md)
		}
	}
}
