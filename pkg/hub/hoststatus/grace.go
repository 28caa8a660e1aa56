package hoststatus

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/hub/identity"
	"github.com/edgefleet/fleet/pkg/pki"
)

// DisconnectLater records the session's host as disconnected once
// DisconnectGrace has passed without a new session, unless ctx (the
// replica's life) has ended by then: a hub that stops records nothing, its
// agents come back to a replica that records them connected.
func (w *Writer) DisconnectLater(ctx context.Context, ss Session) {
	if w.opts.DisconnectGrace < 0 {
		w.Disconnected(context.Background(), ss)
		return
	}
	id := ss.Peer().ID
	key := id.String()
	w.mu.Lock()
	defer w.mu.Unlock()
	if old := w.pending[key]; old != nil {
		old.Stop()
	}
	var t *time.Timer
	t = time.AfterFunc(w.opts.DisconnectGrace, func() {
		w.mu.Lock()
		mine := w.pending[key] == t
		if mine {
			delete(w.pending, key)
		}
		w.mu.Unlock()
		if !mine || w.registry.Current(id.Namespace, id.Name) != nil || ctx.Err() != nil {
			return // the agent is back, or the hub is stopping
		}
		w.Disconnected(context.Background(), ss)
	})
	w.pending[key] = t
}

// Returned tells the writer a host's agent is back: a disconnect waiting
// for its grace is called off. It tells whether one was.
func (w *Writer) Returned(id pki.Identity) bool {
	w.mu.Lock()
	t := w.pending[id.String()]
	delete(w.pending, id.String())
	w.mu.Unlock()
	if t != nil && t.Stop() {
		// Back within the grace: the host never read as disconnected.
		skippedStatusWrites.WithLabelValues("disconnected").Inc()
		return true
	}
	return false
}

// Forget drops what the writer keeps for a deleted host.
func (w *Writer) Forget(namespace, name string) {
	key := namespace + "/" + name
	w.mu.Lock()
	if t := w.pending[key]; t != nil {
		t.Stop()
		delete(w.pending, key)
	}
	w.mu.Unlock()
	w.wroteDisconnect.Delete(key)
}

// SweepUnreturned records as disconnected the hosts that still read as
// connected to this replica but whose agents did not come back since it
// started: a stopping replica records no session ends (its agents come back
// within seconds), so an agent that died meanwhile would read connected
// until the EdgeHost reconciler's ContactLost.
func (w *Writer) SweepUnreturned(ctx context.Context) {
	hosts := &infrav1.EdgeHostList{}
	if err := w.client.List(ctx, hosts); err != nil {
		w.log.Error(err, "Listing EdgeHosts to find agents that did not come back")
		return
	}
	for i := range hosts.Items {
		h := &hosts.Items[i]
		c := meta.FindStatusCondition(h.Status.Conditions, infrav1.AgentConnectedCondition)
		if c == nil || c.Status != metav1.ConditionTrue || h.Status.HubReplica != w.opts.ReplicaName ||
			w.registry.Current(h.Namespace, h.Name) != nil || ctx.Err() != nil {
			continue
		}
		w.Disconnected(ctx, &gone{peer: identity.Peer{ID: pki.Identity{Namespace: h.Namespace, Name: h.Name, UID: string(h.UID)}}})
	}
}
