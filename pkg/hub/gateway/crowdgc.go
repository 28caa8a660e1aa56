package gateway

import (
	"context"
	"runtime/debug"
	"time"
)

// crowdCheckInterval is how often a crowd in progress is looked at: one
// look costs a lock, and a reconnect wave lasts tens of seconds.
const crowdCheckInterval = 250 * time.Millisecond

// crowdCalm is how long nobody must have waited for a handshake place
// before a crowd counts as over: a wave's line empties for moments while
// it lasts, and each end costs a full collection. A variable for tests.
var crowdCalm = 5 * time.Second

// gcKnobs are the runtime's collector settings relaxGCInCrowds turns;
// tests replace them so that they do not change the test binary's own.
type gcKnobs struct {
	setGCPercent func(int) int
	freeOSMemory func()
}

var runtimeGC = gcKnobs{setGCPercent: debug.SetGCPercent, freeOSMemory: debug.FreeOSMemory}

// relaxGCInCrowds raises the collector's target to percent while
// connections queue for a TLS handshake place (a mass reconnect), and when
// the queue has been gone for crowdCalm puts the previous target back and
// returns the memory the wave left to the operating system.
//
// Why: the hub runs a low target (fleet-hub --gc-percent) because its live
// heap is mostly idle sessions. In a 10,000-agent cold start that made the
// collector 34–38 % of the hub's CPU, scanning those sessions' heap and
// stacks over and over while the handshakes waited for a core; at percent
// it runs several times less often. Afterwards the heap the wave grew
// would otherwise stay mapped until the runtime's next forced collection
// (up to 2 minutes) and its scavenger caught up, which in a pod with a
// memory limit is the time an OOM kill can strike.
func relaxGCInCrowds(ctx context.Context, places *newestFirst, percent int, knobs gcKnobs) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-places.queued:
		}
		prev := knobs.setGCPercent(percent)
		if prev < 0 || prev >= percent {
			// GOGC=off, or already as relaxed: leave it alone.
			knobs.setGCPercent(prev)
			continue
		}
		crowdGCRaises.Inc()
		waitOutCrowd(ctx, places)
		knobs.setGCPercent(prev)
		if ctx.Err() != nil {
			return
		}
		knobs.freeOSMemory()
	}
}

// waitOutCrowd returns once nobody has waited for a handshake place for
// crowdCalm, or ctx ends.
func waitOutCrowd(ctx context.Context, places *newestFirst) {
	t := time.NewTicker(crowdCheckInterval)
	defer t.Stop()
	calmSince := time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			switch {
			case places.waiters() > 0:
				calmSince = time.Time{}
			case calmSince.IsZero():
				calmSince = now
			case now.Sub(calmSince) >= crowdCalm:
				// A token left by a moment of queueing during the wave
				// would start a crowd with nobody in it.
				select {
				case <-places.queued:
				default:
				}
				return
			}
		}
	}
}
