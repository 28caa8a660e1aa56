package session

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/hashicorp/yamux"
	"k8s.io/apimachinery/pkg/types"

	"github.com/edgefleet/fleet/internal/version"
	"github.com/edgefleet/fleet/pkg/agent/hostclock"
	"github.com/edgefleet/fleet/pkg/agent/state"
	"github.com/edgefleet/fleet/pkg/contract/wire"
)

// Options is what the session source needs to know and whom it hands to.
type Options struct {
	// Hub is the hub gateway's base URL.
	Hub string
	// Token is the enrollment token ("" once enrolled, or never).
	Token string
	// TokenFile holds the token when Token is empty; it is read at every
	// enrollment attempt, so a token dropped in after start is used.
	TokenFile string
	// CACertHash pins the hub CA for enrollment.
	CACertHash string
	// RootDir is the root of the host, whose facts go with the enrollment.
	RootDir string
	// MaxBackoff caps the delay between reconnection attempts.
	MaxBackoff time.Duration
	// KeepAlive is the session ping interval.
	KeepAlive time.Duration
	// Dial makes the TCP connections to the hub.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)

	// Generation returns the desired-state generation to report in Hello
	// for the EdgeHost with this UID (generations count per EdgeHost).
	Generation func(hostUID types.UID) (int64, error)
	// Streams serves the streams the hub opens on a session until it ends.
	Streams func(ctx context.Context, mux *yamux.Session)
	// Capabilities are announced in Hello besides tunnels.
	Capabilities []string
	// TransferRefused hears the hub refuse a request for the bytes of
	// sha256 (a ReleaseRequest), with why.
	TransferRefused func(sha, message string)
	// Announce hears a one-line status on every connection change.
	Announce func(string)
	// Version is the release the agent reports (default the binary's).
	Version string
	// ClockSkew hears, at every session's start, how far this host's
	// clock is ahead of the hub's (negative: behind).
	ClockSkew func(time.Duration)
}

// Op says what an Update is.
type Op int

// The kinds of Update.
const (
	// OpDesired carries a desired state the hub sent.
	OpDesired Op = iota + 1
	// OpConnected says a session is open; Report sends status on it.
	OpConnected
	// OpDisconnected says the session ended.
	OpDisconnected
)

// Update is what the session source tells the sync loop.
type Update struct {
	Op Op
	// Desired is the hub's desired state (OpDesired).
	Desired *wire.DesiredState
	// Report sends a status on the new session (OpConnected).
	Report func(*wire.Status) error
	// Send sends another request on it (OpConnected).
	Send func(msg any) error
}

// Source keeps the agent's session to the hub.
type Source struct {
	opts    Options
	store   state.Store
	log     logr.Logger
	updates chan<- Update

	// mux is the current session, for pings.
	mux atomic.Pointer[yamux.Session]

	enrollments atomic.Int64
	sessions    atomic.Int64
	connected   atomic.Bool
	rotations   atomic.Int64
	// hubOffset is the hub's clock minus this host's, as the last Welcome
	// told (zero until one did): what certificate rotations are timed by.
	hubOffset atomic.Int64
	// extra capabilities, added after New.
	extra []string
}

// AddCapability announces c in the Hellos from now on. Call before Run.
func (s *Source) AddCapability(c string) { s.extra = append(s.extra, c) }

// New makes a session source for the host whose state is in store.
func New(opts Options, store state.Store, log logr.Logger) *Source {
	if opts.Version == "" {
		opts.Version = version.Version
	}
	if opts.Dial == nil {
		opts.Dial = (&net.Dialer{Timeout: 15 * time.Second}).DialContext
	}
	return &Source{opts: opts, store: store, log: log}
}

// Enrollments counts the enrollments this process made.
func (s *Source) Enrollments() int64 { return s.enrollments.Load() }

// Sessions counts the sessions this process opened.
func (s *Source) Sessions() int64 { return s.sessions.Load() }

// Connected reports whether a session is open now.
func (s *Source) Connected() bool { return s.connected.Load() }

// Rotations counts certificate rotations.
func (s *Source) Rotations() int64 { return s.rotations.Load() }

// HubNow is the hub's clock as best this host knows it: this host's until
// a session started.
func (s *Source) HubNow() time.Time { return s.hubNow() }

// hubNow is the hub's clock as best this host knows it.
func (s *Source) hubNow() time.Time {
	return hostclock.Now().Add(time.Duration(s.hubOffset.Load()))
}

// learnHubClock takes the hub's time from its Welcome: the offset that
// rotations are timed by, and the skew the agent reports.
func (s *Source) learnHubClock(hub time.Time) {
	offset := hub.Sub(hostclock.Now())
	s.hubOffset.Store(int64(offset))
	skew := -offset
	if skew.Abs() >= wire.MinClockSkew {
		s.log.Info("This host's clock is off the hub's: certificate rotations follow the hub's; set the host's time (NTP)",
			"ahead", skew.Round(time.Second).String())
	}
	if s.opts.ClockSkew != nil {
		s.opts.ClockSkew(skew)
	}
}

func (s *Source) announce(text string) {
	if s.opts.Announce != nil {
		s.opts.Announce(text)
	}
}

// send hands u to the sync loop; false once ctx ended.
func (s *Source) send(ctx context.Context, u Update) bool {
	select {
	case s.updates <- u:
		return true
	case <-ctx.Done():
		return false
	}
}

// Run keeps one session to the hub open until ctx ends: it enrolls if
// needed, connects, and after any failure waits a jittered, growing delay
// and tries again. It never gives up.
func (s *Source) Run(ctx context.Context, updates chan<- Update) {
	s.updates = updates
	attempt := 0
	var lastSession time.Time
	for ctx.Err() == nil {
		started := time.Now()
		sessions := s.sessions.Load()
		err := s.connectOnce(ctx)
		if s.sessions.Load() > sessions {
			lastSession = time.Now()
			s.connected.Store(false)
			s.send(ctx, Update{Op: OpDisconnected})
		}
		if ctx.Err() != nil {
			return
		}
		switch {
		case errors.Is(err, errRevoked):
			s.revoked()
		case errors.Is(err, errUnknownHost):
			s.announce("the hub has no EdgeHost for this host; waiting for it (a restored hub?)")
		}
		if _, ok := errors.AsType[*unsupportedError](err); ok {
			s.log.Error(err, "The hub and this agent share no protocol version: the host keeps running as it is until one of them is upgraded")
		}
		if time.Since(started) > time.Minute {
			attempt = 0 // the last session was healthy: start backing off afresh
		}
		delay := s.retryDelay(err, &attempt, lastSession)
		s.log.Info("Disconnected from hub, retrying", "reason", errString(err), "retryIn", delay.Round(time.Millisecond).String())
		s.announce(fmt.Sprintf("disconnected (%s), retrying in %s", shorten(errString(err), 120), delay.Round(time.Second)))
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
}

// revoked decides what to do after the hub revoked this host's identity.
// A host that runs a workload keeps its identity and keeps trying:
// enrolling afresh would make it a new, empty host that resets what runs
// here without anyone having ordered it (the hub may be restored, or the
// deletion a mistake).
func (s *Source) revoked() {
	held := s.holdsWorkload()
	reenroll := s.token() != "" && !held
	s.log.Info("Hub revoked this host's identity", "reenroll", reenroll, "holdsWorkload", held)
	if reenroll {
		if err := s.store.ForgetIdentity(); err != nil {
			s.log.Error(err, "Forgetting revoked identity")
		}
	}
}

// holdsWorkload tells whether the agent has a workload on record (a
// bootstrap that ran, or a reset not yet done), or an assignment received
// that the worker may be starting at this very moment (its workload is
// recorded only as the bootstrap starts).
func (s *Source) holdsWorkload() bool {
	applied, err := s.store.LoadApplied()
	if err != nil || applied.Workload != nil {
		return true
	}
	d := s.store.LoadDesired()
	return d != nil && d.Assignment != nil
}

// ErrNotConnected is Ping's answer while there is no session.
var ErrNotConnected = errors.New("not connected")

// Ping measures a round trip over the session (a yamux ping: no API work
// at the hub), giving up after timeout.
func (s *Source) Ping(timeout time.Duration) (time.Duration, error) {
	mux := s.mux.Load()
	if mux == nil {
		return 0, ErrNotConnected
	}
	type result struct {
		rtt time.Duration
		err error
	}
	ch := make(chan result, 1)
	go func() {
		rtt, err := mux.Ping()
		ch <- result{rtt, err}
	}()
	select {
	case r := <-ch:
		return r.rtt, r.err
	case <-time.After(timeout):
		return 0, errors.New("ping timed out")
	}
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
