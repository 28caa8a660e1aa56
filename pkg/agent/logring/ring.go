package logring

import (
	"bytes"
	"sync"
	"time"
)

// DefaultSize is how many bytes of log a Ring keeps by default.
const DefaultSize = 2 << 20

// maxLine bounds one line; longer ones are cut.
const maxLine = 16 << 10

// Line is one line of log and when it was written.
type Line struct {
	At   time.Time
	Text []byte
}

// Ring is an io.Writer that keeps the last Size bytes of what is written
// to it, line by line. It is safe for concurrent use.
type Ring struct {
	size int

	mu      sync.Mutex
	lines   []Line
	bytes   int
	partial []byte
	subs    map[*Follower]struct{}
	now     func() time.Time
}

// New makes a Ring that keeps size bytes (DefaultSize if ≤ 0).
func New(size int) *Ring {
	if size <= 0 {
		size = DefaultSize
	}
	return &Ring{size: size, subs: map[*Follower]struct{}{}, now: time.Now}
}

// Write adds p's complete lines; a trailing partial line waits for its end.
func (r *Ring) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			r.partial = append(r.partial, p...)
			if len(r.partial) > maxLine {
				r.add(r.partial)
				r.partial = nil
			}
			break
		}
		line := p[:i]
		if len(r.partial) > 0 {
			line = append(r.partial, line...)
			r.partial = nil
		}
		r.add(line)
		p = p[i+1:]
	}
	return n, nil
}

func (r *Ring) add(text []byte) {
	if len(text) > maxLine {
		text = text[:maxLine]
	}
	l := Line{At: r.now(), Text: bytes.Clone(text)}
	r.lines = append(r.lines, l)
	r.bytes += len(l.Text) + 1
	drop := 0
	for r.bytes > r.size && drop < len(r.lines)-1 {
		r.bytes -= len(r.lines[drop].Text) + 1
		drop++
	}
	if drop > 0 {
		r.lines = append(r.lines[:0:0], r.lines[drop:]...)
	}
	for f := range r.subs {
		select {
		case f.c <- l:
		default:
			f.lost.Add(1)
		}
	}
}

// Lines returns the kept lines written after since (all if zero), the
// last tail of them (all if ≤ 0).
func (r *Ring) Lines(since time.Time, tail int) []Line {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pick(since, tail)
}

func (r *Ring) pick(since time.Time, tail int) []Line {
	i := 0
	if !since.IsZero() {
		for i < len(r.lines) && r.lines[i].At.Before(since) {
			i++
		}
	}
	out := r.lines[i:]
	if tail > 0 && len(out) > tail {
		out = out[len(out)-tail:]
	}
	return append([]Line(nil), out...)
}

// Follow returns the kept lines as Lines does and a Follower that gets
// every line written after them. Close the Follower when done.
func (r *Ring) Follow(since time.Time, tail int) ([]Line, *Follower) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := &Follower{c: make(chan Line, 1024), ring: r}
	r.subs[f] = struct{}{}
	return r.pick(since, tail), f
}
