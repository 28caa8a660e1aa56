package hoststatus

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/hub/identity"
	"github.com/edgefleet/fleet/pkg/hub/linkhealth"
)

// Session is an agent's session as the writer needs it.
type Session interface {
	// Peer is the host the session speaks for, with its current key.
	Peer() identity.Peer
	// Done is closed when the session has ended.
	Done() <-chan struct{}
	// Replaced tells that a newer session of the same host took over.
	Replaced() bool
	// Reports is the session's memory of what was written for it.
	Reports() *Reports
	// RefreshLastSeenBy has the session refresh lastSeenTime at at, if
	// that is sooner than it would: its connection wrote nothing, and the
	// recorded time is as old as it was.
	RefreshLastSeenBy(at time.Time)
}

// Registry finds the session this replica holds for a host.
type Registry interface {
	// Current is the host's session here, or nil.
	Current(namespace, name string) Session
}

// Reports is what a session remembers of its agent's reports: enough to
// tell that a new one changes nothing worth a write.
type Reports struct {
	// last is touched only by the session's handler (one at a time): the
	// last report taken, as digests rather than the report itself.
	last statusDigest

	// Link health is written coarsely: the last one written, and a newer
	// one waiting for the next lastSeen refresh.
	linkMu      sync.Mutex
	writtenLink *infrav1.LinkHealth
	pendingLink *infrav1.LinkHealth
}

// holdLink keeps a link report for the next lastSeen refresh, unless its
// verdict differs from the written one: then it must be written now.
func (r *Reports) holdLink(l *infrav1.LinkHealth, th linkhealth.Thresholds) (held bool) {
	r.linkMu.Lock()
	defer r.linkMu.Unlock()
	if r.writtenLink == nil {
		return false
	}
	a := linkhealth.Condition(r.writtenLink, th, false)
	b := linkhealth.Condition(l, th, a.Status == metav1.ConditionTrue)
	if a.Status != b.Status || a.Reason != b.Reason {
		return false
	}
	r.pendingLink = l
	return true
}

// wroteLink records what was written.
func (r *Reports) wroteLink(l *infrav1.LinkHealth) {
	r.linkMu.Lock()
	defer r.linkMu.Unlock()
	r.writtenLink = l
	// A newer report held meanwhile still waits for its write.
	if r.pendingLink == l {
		r.pendingLink = nil
	}
}

// takePendingLink returns the held report, if any, for a write.
func (r *Reports) takePendingLink() *infrav1.LinkHealth {
	r.linkMu.Lock()
	defer r.linkMu.Unlock()
	return r.pendingLink
}

// statusDigest stands for a status report in the comparisons
// RecordStatus makes with the next one. Two reports with equal digests
// are equal; unequal digests of equal reports (the same value in another
// spelling) only cost a comparison with the cached host, never a wrong
// write.
type statusDigest struct {
	taken       bool
	all         [sha256.Size]byte
	withoutLink [sha256.Size]byte
}

func digestStatus(st *wire.Status) (statusDigest, error) {
	all, err := json.Marshal(st)
	if err != nil {
		return statusDigest{}, fmt.Errorf("encoding a status report: %w", err)
	}
	noLink := *st
	noLink.Link = nil
	rest, err := json.Marshal(&noLink)
	if err != nil {
		return statusDigest{}, fmt.Errorf("encoding a status report: %w", err)
	}
	return statusDigest{taken: true, all: sha256.Sum256(all), withoutLink: sha256.Sum256(rest)}, nil
}

// gone stands for a session that ended while this replica was down.
type gone struct {
	peer    identity.Peer
	reports Reports
}

var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (g *gone) Peer() identity.Peer         { return g.peer }
func (g *gone) Done() <-chan struct{}       { return closed }
func (g *gone) Replaced() bool              { return false }
func (g *gone) Reports() *Reports           { return &g.reports }
func (g *gone) RefreshLastSeenBy(time.Time) {}
