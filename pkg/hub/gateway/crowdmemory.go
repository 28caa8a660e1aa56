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

// returnMemoryAfterCrowds waits for connections to queue for a TLS
// handshake place (a wave of them: a fleet reconnecting, enrolling), and
// once nobody has waited for crowdCalm calls free, which returns the
// memory the wave's handshakes used to the operating system.
//
// Why: the garbage of thousands of handshakes grows the heap well above
// what the idle sessions need, and the runtime hands the difference back
// slowly: its goal stays where the wave left it until the next
// collection, which an idle hub reaches only by the runtime's 2-minute
// forced one, and its scavenger returns pages a little at a time. After a
// 10,000-agent cold start the hub's RSS stayed 3.6 KiB per agent above
// the same sessions' cost after enrollment, unused memory that counts
// against a pod's limit. One full collection per wave is cheap beside the
// wave.
//
// (Raising the collector's target during a wave, to spend less CPU on
// marking, was tried and measured: the sessions made during the wave then
// lay scattered over twice the heap, and a non-moving collector cannot
// pack them again; the hub held 34.7 KiB per idle agent instead of 31.7.)
func returnMemoryAfterCrowds(ctx context.Context, places *newestFirst, free func()) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-places.queued:
		}
		if !waitOutCrowd(ctx, places) {
			return
		}
		free()
		crowdMemoryReturns.Inc()
	}
}

// waitOutCrowd returns true once nobody has waited for a handshake place
// for crowdCalm, false if ctx ends first.
func waitOutCrowd(ctx context.Context, places *newestFirst) bool {
	t := time.NewTicker(crowdCheckInterval)
	defer t.Stop()
	calmSince := time.Time{}
	for {
		select {
		case <-ctx.Done():
			return false
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
				return true
			}
		}
	}
}

// freeOSMemory is what returnMemoryAfterCrowds calls in the hub.
var freeOSMemory = debug.FreeOSMemory
