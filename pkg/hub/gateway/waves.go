package gateway

import (
	"context"
	"runtime/debug"
	"sync"
	"time"
)

// crowdCheckInterval is how often a crowd in progress is looked at: one
// look costs a lock, and a reconnect wave lasts tens of seconds.
const crowdCheckInterval = 250 * time.Millisecond

// crowdCalm is how long nobody must have waited for a handshake place
// before a crowd counts as over: a wave's line empties for moments while
// it lasts, and each end costs a full collection. A variable for tests.
var crowdCalm = 5 * time.Second

// waves tells whether a wave of connections is on: connections queue for
// a TLS handshake place (a fleet reconnecting after an outage, enrolling).
// The zero value is not usable; see newWaves.
type waves struct {
	mu sync.Mutex
	// over is closed while no wave is on; a wave replaces it with an
	// open one.
	over chan struct{}
}

func newWaves() *waves {
	over := make(chan struct{})
	close(over)
	return &waves{over: over}
}

func (w *waves) begin() {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-w.over:
		w.over = make(chan struct{})
	default:
	}
}

func (w *waves) end() {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-w.over:
	default:
		close(w.over)
	}
}

// current is closed once no wave is on (at once if none is).
func (w *waves) current() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.over
}

// on tells whether a wave is on now.
func (w *waves) on() bool {
	select {
	case <-w.current():
		return false
	default:
		return true
	}
}

// outlast waits until no wave is on, at most max, or until ctx ends; it
// tells whether it had to wait at all.
func (w *waves) outlast(ctx context.Context, max time.Duration) bool {
	over := w.current()
	select {
	case <-over:
		return false
	default:
	}
	t := time.NewTimer(max)
	defer t.Stop()
	select {
	case <-over:
	case <-t.C:
	case <-ctx.Done():
	}
	return true
}

// followWaves marks a wave on w when connections queue for a TLS
// handshake place, and over once nobody has waited for crowdCalm; after
// each it calls free, which returns the memory the wave's handshakes used
// to the operating system.
//
// Why free: the garbage of thousands of handshakes grows the heap well
// above what the idle sessions need, and the runtime hands the difference
// back slowly: its goal stays where the wave left it until the next
// collection, which an idle hub reaches only by the runtime's 2-minute
// forced one, and its scavenger returns pages a little at a time: unused
// memory that counts against a pod's limit. One full collection per wave
// is cheap beside the wave (docs/PERFORMANCE.md, "Hub memory per idle
// agent", also for why the collector's target is not raised meanwhile).
func followWaves(ctx context.Context, places *newestFirst, w *waves, free func()) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-places.queued:
		}
		w.begin()
		over := waitOutCrowd(ctx, places)
		w.end()
		if !over {
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

// freeOSMemory is what followWaves calls in the hub.
var freeOSMemory = debug.FreeOSMemory
