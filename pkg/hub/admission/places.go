package admission

import (
	"context"
	"time"
)

// Places is a fixed number of places that work must hold while it runs:
// session handshakes, enrollments and status writes each have their own.
// Takers beyond the limit wait their turn (in arrival order) or give up.
// The TLS handshakes' places are the same idea served newest first and
// per source (see Listener).
type Places struct {
	ch chan struct{}
}

// NewPlaces returns n places.
func NewPlaces(n int) *Places { return &Places{ch: make(chan struct{}, max(n, 1))} }

// Take takes a place, waiting up to wait (not at all if wait is not
// positive) or until ctx ends; it tells whether it got one.
func (p *Places) Take(ctx context.Context, wait time.Duration) bool {
	select {
	case p.ch <- struct{}{}:
		return true
	default:
	}
	if wait <= 0 {
		return false
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case p.ch <- struct{}{}:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// Await takes a place, waiting as long as ctx lets it.
func (p *Places) Await(ctx context.Context) error {
	select {
	case p.ch <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Release gives a place back.
func (p *Places) Release() { <-p.ch }

// InUse is the number of places taken now.
func (p *Places) InUse() int { return len(p.ch) }
