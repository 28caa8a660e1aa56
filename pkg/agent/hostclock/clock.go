package hostclock

import "time"

// OffsetEnv names the variable the faultclock build reads its offset
// from; other builds ignore it.
const OffsetEnv = "FLEET_FAULTS_CLOCK_OFFSET"

// offset moves the clock; only the faultclock build sets it.
var offset time.Duration

// Now is the host's wall-clock time.
func Now() time.Time { return time.Now().Add(offset) }
