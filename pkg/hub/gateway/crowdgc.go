package gateway

import (
	"context"
	"runtime/debug"
	"time"
)

// crowdCheckInterval is how often relaxGCInCrowds looks for a crowd: one
// look costs a lock, and a reconnect wave lasts tens of seconds.
const crowdCheckInterval = 100 * time.Millisecond

// relaxGCInCrowds raises the collector's target to percent while
// connections queue for a TLS handshake place, and puts the previous one
// back when the queue is gone. In a 10,000-agent cold start at the hub's
// --gc-percent=25 the collector took 38 % of the hub's CPU (its marking
// and the allocation assists it imposes), while the live heap it marks
// again and again is the idle sessions that are not the work at hand.
func relaxGCInCrowds(ctx context.Context, places *newestFirst, percent int) {
	t := time.NewTicker(crowdCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		crowd := places.crowded()
		if crowd == nil {
			continue
		}
		prev := debug.SetGCPercent(percent)
		if prev < 0 || prev >= percent {
			// GOGC=off, or already as relaxed: leave it.
			debug.SetGCPercent(prev)
		} else {
			crowdGCRaises.Inc()
		}
		select {
		case <-crowd:
		case <-ctx.Done():
		}
		if prev >= 0 && prev < percent {
			debug.SetGCPercent(prev)
		}
	}
}
