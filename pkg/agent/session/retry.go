package session

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"
)

// busyError: the hub turned the handshake or enrollment away for now
// (503 or 429 with Retry-After), to spread a crowd of agents over time.
type busyError struct {
	after time.Duration
}

func (e *busyError) Error() string {
	return fmt.Sprintf("hub busy, asked to retry in %s", e.after)
}

// unservedError: the hub accepted the connection but closed it before
// the TLS handshake, or did not finish the handshake within the dial
// timeout. A hub does that when more connections wait for a handshake than
// it serves in time (after an outage, a whole fleet dialling at once); it
// cannot answer 503 before TLS.
type unservedError struct {
	err error
}

func (e *unservedError) Error() string {
	return fmt.Sprintf("connecting to hub: accepted but not served (hub busy?): %v", e.err)
}

func (e *unservedError) Unwrap() error { return e.err }

// unservedCeiling caps the back-off after connections the hub accepted
// and did not serve: such a hub is up and working through a crowd, and an
// agent backing off to MaxBackoff would leave it idle at the end of one
// (docs/PERFORMANCE.md, "Cold start and reconnect storm"). The hub's own
// wait before closing paces the retries.
const unservedCeiling = 5 * time.Second

func retryAfter(h http.Header) time.Duration {
	if s, err := strconv.Atoi(h.Get("Retry-After")); err == nil && s > 0 && s <= 300 {
		return time.Duration(s) * time.Second
	}
	return 2 * time.Second
}

// retryDelay decides the wait before the next attempt. A busy hub's
// Retry-After is honoured, spread by jitter, without growing the back-off
// (being turned away is not failing). A hub that held a session minutes
// ago is most likely restarting: its agents cap their back-off at 10 s so
// a fleet is back soon after it is, instead of up to MaxBackoff later. A
// connection the hub accepted and did not serve caps it at
// unservedCeiling.
func (s *Source) retryDelay(err error, attempt *int, lastSession time.Time) time.Duration {
	var busy *busyError
	var enrollErr *EnrollError
	if errors.As(err, &enrollErr) && (enrollErr.Status == http.StatusServiceUnavailable || enrollErr.Status == http.StatusTooManyRequests) {
		// Turned away for now (enrollment rate, a crowd on one token):
		// not a failure of this host's.
		busy = &busyError{after: 5 * time.Second}
		if enrollErr.RetryAfter > 0 {
			busy.after = enrollErr.RetryAfter
		}
	}
	if busy != nil || errors.As(err, &busy) {
		return busy.after + time.Duration(rand.Int64N(int64(busy.after)))
	}
	ceiling := s.opts.MaxBackoff
	if _, ok := errors.AsType[*unsupportedError](err); ok {
		// Only an upgrade of one side helps: no quick retries for it.
		d := backoff(*attempt, ceiling)
		*attempt++
		return d
	}
	if !lastSession.IsZero() && time.Since(lastSession) < 5*time.Minute {
		ceiling = min(ceiling, 10*time.Second)
	}
	if _, ok := errors.AsType[*unservedError](err); ok {
		ceiling = min(ceiling, unservedCeiling)
	}
	d := backoff(*attempt, ceiling)
	*attempt++
	return d
}

func errString(err error) string {
	if err == nil {
		return "session closed"
	}
	return err.Error()
}

// backoff returns the delay before reconnect attempt n (from 0): full
// jitter over an exponential ceiling, so a fleet whose hub restarted does
// not come back in one wave.
func backoff(n int, limit time.Duration) time.Duration {
	ceiling := min(time.Second<<min(n, 10), limit)
	return time.Duration(rand.Int64N(int64(ceiling)) + int64(100*time.Millisecond))
}
