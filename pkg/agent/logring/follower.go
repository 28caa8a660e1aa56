package logring

import "sync/atomic"

// Follower receives the lines written to a Ring after it was made. A
// follower that falls more than 1,024 lines behind loses lines and counts
// them, rather than slow the agent's logging.
type Follower struct {
	c    chan Line
	ring *Ring
	lost atomic.Int64
}

// C delivers the lines.
func (f *Follower) C() <-chan Line { return f.c }

// Lost counts the lines dropped so far because the follower was behind.
func (f *Follower) Lost() int64 { return f.lost.Load() }

// Close stops the delivery.
func (f *Follower) Close() {
	f.ring.mu.Lock()
	delete(f.ring.subs, f)
	f.ring.mu.Unlock()
}
