package agent

import (
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"
)

// The watchdog's times keep their monotonic reading ("m=" in their
// String): an edge box's clock stepped by NTP mid-bootstrap must not make a
// worker that is making progress look stuck for the length of the step.
func TestWatchdogTimesAreMonotonic(t *testing.T) {
	var b busySince
	b.progress()
	if s := b.since().String(); !strings.Contains(s, " m=") {
		t.Errorf("a worker's progress time has no monotonic reading: %s", s)
	}
	a := &Agent{}
	a.lastHealthy.Store(ptr.To(time.Now()))
	if s := a.LastHealthy().String(); !strings.Contains(s, " m=") {
		t.Errorf("the last healthy moment has no monotonic reading: %s", s)
	}
}
