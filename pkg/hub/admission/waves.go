package admission

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

// Waves tells whether a wave of connections is on: connections queue for
// a TLS handshake place (a fleet reconnecting after an outage, enrolling).
// The zero value is not usable; see NewWaves.
type Waves struct {
	mu sync.Mutex
	// over is closed while no wave is on; a wave replaces it with an
	// open one.
	over chan struct{}
}

// NewWaves returns Waves with no wave on.
func NewWaves() *Waves {
	over := make(chan struct{})
	close(over)
	return &Waves{over: over}
}

// Begin marks a wave on.
func (w *Waves) Begin() {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-w.over:
		w.over = make(chan struct{})
	default:
	}
}

// End marks the wave over.
func (w *Waves) End() {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-w.over:
	default:
		close(w.over)
	}
}

// current is closed once no wave is on (at once if none is).
func (w *Waves) current() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.over
}

// On tells whether a wave is on now.
func (w *Waves) On() bool {
	select {
	case <-w.current():
		return false
	default:
		return true
	}
}

// Outlast waits until no wave is on, at most limit, or until ctx ends; it
// tells whether it had to wait at all.
func (w *Waves) Outlast(ctx context.Context, limit time.Duration) bool {
	over := w.current()
	select {
	case <-over:
		return false
	default:
	}
	t := time.NewTimer(limit)
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
func followWaves(ctx context.Context, places *newestFirst, w *Waves, free func()) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-places.queued:
		}
		w.Begin()
		over := waitOutCrowd(ctx, places)
		w.End()
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

// FollowWaves marks waves on w while connections queue for this
// listener's handshake places, until ctx ends (see followWaves).
func (l *Listener) FollowWaves(ctx context.Context, w *Waves) {
	followWaves(ctx, l.places, w, freeOSMemory)
}
