package main

import (
	"strings"
	"testing"

	"github.com/edgefleet/fleet/test/faults/results"
)

// Percentiles are nearest-rank, and the table counts what the runs say:
// a failing run is listed with why and its replay command, and a long
// form (more hosts) has its own row.
func TestRenderCountsTheRuns(t *testing.T) {
	if got := percentile([]float64{5, 1, 4, 2, 3}, 50); got != 3 {
		t.Errorf("p50 = %v", got)
	}
	if got := percentile([]float64{5, 1, 4, 2, 3}, 99); got != 5 {
		t.Errorf("p99 = %v", got)
	}
	md := string(render([]results.Run{
		{Test: "TestPowerCuts", Seed: 1, Hosts: 4, Faults: 2, Orders: 6, Passed: true, Seconds: 40, Phases: []results.Phase{{Name: "a", ConvergeSeconds: 1}, {Name: "b", ConvergeSeconds: 3}}},
		{Test: "TestPowerCuts", Seed: 2, Hosts: 4, Faults: 3, Orders: 6, Passed: false, Seconds: 50, Violations: []string{"Machine w0 was bootstrapped twice"},
			Replay: "go test ./test/faults -run 'TestPowerCuts$' -args -faults.seed=2"},
		{Test: "TestPowerCuts", Seed: 1, Hosts: 30, Faults: 9, Orders: 30, Passed: true, Seconds: 200, Phases: []results.Phase{{Name: "a", ConvergeSeconds: 7}}},
	}, []results.Soak{{Agents: 100, Replicas: 2, Minutes: 3, ChurnPerMinute: 1, ReplicaRestartMinutes: 1, HeapGrowth: 0.02, GoroutinesGrowth: -0.01,
		Samples: []results.SoakSample{{Minute: 0, Goroutines: 300, Sessions: 100}, {Minute: 3, Goroutines: 297, Sessions: 100}}}}))
	for _, want := range []string{
		"| `TestPowerCuts` | host power cut", "| 4 | 2 (1, 2) | 1 | 5 | 12 | **1** | 1.0 s | 3.0 s | 40.0 s |",
		"| 30 | 1 (1) | 0 | 9 | 30 | **0** | 7.0 s | 7.0 s | 200.0 s |", "- `TestPowerCuts` seed 2, 4 hosts", "| 100 | 2 | 3 | 1 | 1 min | in use | +2.0 % | -1.0 % |", "| 3 | 0.0 MiB | 0.0 MiB | 297 | 100 |", "Machine w0 was bootstrapped twice — `go test ./test/faults -run 'TestPowerCuts$' -args -faults.seed=2`",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("%q missing from:\n%s", want, md)
		}
	}
}
