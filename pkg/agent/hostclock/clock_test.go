package hostclock

import (
	"testing"
	"time"
)

// Outside the fault suite's build the host's clock is the system's.
func TestTheClockIsTheSystems(t *testing.T) {
	if d := time.Since(Now()); d < -time.Second || d > time.Second {
		t.Fatalf("host clock %s off the system's", d)
	}
}
