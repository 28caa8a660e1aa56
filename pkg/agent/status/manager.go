package status

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
)

// MinInterval is the least time between two status reports.
const MinInterval = 500 * time.Millisecond

// Manager holds the latest full status and sends it whenever it changes
// (at most every MinInterval, except that the end of a bootstrap or reset
// goes out at once), and again on every new session.
type Manager struct {
	mu      sync.Mutex
	current *wire.Status
	sent    *wire.Status
	send    func(*wire.Status) error
	// epoch counts attachments, so a send that finishes on a session that
	// has since been replaced is not mistaken for one on the new session.
	epoch uint64
	kick  chan struct{}
	// settled cuts the wait between reports short: a bootstrap or reset
	// just ended, and the hub (Cluster API behind it) waits on that news.
	settled chan struct{}
	// pause is MinInterval; tests stretch it.
	pause time.Duration
	// sendingSince is when the send in progress started (nil when none),
	// for the watchdog; it keeps its monotonic reading.
	sendingSince atomic.Pointer[time.Time]
}

// New makes a manager with nothing to send and no session.
func New() *Manager {
	return &Manager{kick: make(chan struct{}, 1), settled: make(chan struct{}, 1), pause: MinInterval}
}

// Set makes st the latest status; it goes out if it differs from the last.
func (m *Manager) Set(st *wire.Status) {
	m.mu.Lock()
	changed := m.current == nil || !equality.Semantic.DeepEqual(m.current, st)
	settles := changed && settles(m.current, st)
	m.current = st
	m.mu.Unlock()
	if settles {
		select {
		case m.settled <- struct{}{}:
		default:
		}
	}
	if changed {
		m.poke()
	}
}

// settles tells whether st ends the bootstrap or reset that prev showed
// under way.
func settles(prev, st *wire.Status) bool {
	state := func(s *wire.Status) infrav1.ProvisioningState {
		if s == nil || s.Provisioning == nil {
			return ""
		}
		return s.Provisioning.State
	}
	was, is := state(prev), state(st)
	return (was == infrav1.ProvisioningRunning || was == infrav1.ProvisioningResetting) && is != was
}

// Current returns the latest status (nil before the first Set).
func (m *Manager) Current() *wire.Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.current
}

// Resend sends the latest status again even if the hub has it.
func (m *Manager) Resend() {
	m.mu.Lock()
	m.sent = nil
	m.mu.Unlock()
	m.poke()
}

func (m *Manager) poke() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// Attach routes status to a new session (nil detaches) and sends the full
// status on it.
func (m *Manager) Attach(send func(*wire.Status) error) {
	m.mu.Lock()
	m.send, m.sent = send, nil
	m.epoch++
	m.mu.Unlock()
	m.poke()
}

// SendingSince is when the report being sent started; zero when the
// manager is idle. A send is bounded by the session's write timeout, so
// one that lasts far longer means the manager is stuck.
func (m *Manager) SendingSince() time.Time {
	if t := m.sendingSince.Load(); t != nil {
		return *t
	}
	return time.Time{}
}

// Run sends pending status until ctx ends.
func (m *Manager) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.kick:
		}
		changed, ok := m.sendPending()
		if !ok {
			continue
		}
		// Changes that come quicker than this (the steps of a short
		// bootstrap) go out together in the next report: each report is
		// an API write at the hub. What arrived meanwhile (a change, a
		// resend, a new session) has poked the loop and goes out next.
		select {
		case <-ctx.Done():
			return
		case <-time.After(m.pause):
		case <-m.settled:
		}
		if changed {
			m.poke()
		}
	}
}

// sendPending sends the latest status if the session lacks it. ok tells
// whether a report went out; changed, whether a newer status was set
// while it did.
func (m *Manager) sendPending() (changed, ok bool) {
	m.mu.Lock()
	send, cur, sent, epoch := m.send, m.current, m.sent, m.epoch
	m.mu.Unlock()
	if send == nil || cur == nil || (sent != nil && equality.Semantic.DeepEqual(sent, cur)) {
		return false, false
	}
	started := time.Now()
	m.sendingSince.Store(&started)
	err := send(cur)
	m.sendingSince.Store(nil)
	if err != nil {
		return false, false // the session source reattaches on reconnect
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.epoch == epoch {
		m.sent = cur
	}
	return m.current != cur, true
}
