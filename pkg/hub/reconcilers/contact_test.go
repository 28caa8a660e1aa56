package reconcilers_test

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/cluster-api/util/conditions"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/hub/reconcilers/edgehost"
)

// contactTimeout is the EdgeHost reconciler's in this package's tests.
const contactTimeout = 30 * time.Second

// A host that reads as connected but whose hub replica stopped refreshing
// lastSeenTime (it crashed, or stopped and the agent never came back) is
// marked AgentConnected=Unknown once the contact timeout has passed, at
// once if it already has and without any other change to the host if it
// passes later; a host seen recently stays connected.
func TestLostContactIsNoticed(t *testing.T) {
	w := newWorld(t)
	connected := func(name string, lastSeen time.Time) {
		t.Helper()
		w.host(name, nil)
		// The reconciler adds its finalizer meanwhile: write on the
		// latest version.
		w.must(retry.RetryOnConflict(retry.DefaultRetry, func() error {
			h := &infrav1.EdgeHost{}
			if err := w.get(name, h); err != nil {
				return err
			}
			h.Status.HubReplica = "fleet-hub-0"
			seen := metav1.NewTime(lastSeen.Truncate(time.Second))
			h.Status.LastSeenTime = &seen
			conditions.Set(h, metav1.Condition{Type: infrav1.AgentConnectedCondition, Status: metav1.ConditionTrue,
				Reason: "Connected", Message: "Connected to hub replica fleet-hub-0"})
			return env.Client.Status().Update(w.ctx, h)
		}))
	}
	state := func(name string) (metav1.ConditionStatus, string, string, error) {
		h := &infrav1.EdgeHost{}
		if err := w.get(name, h); err != nil {
			return "", "", "", err
		}
		c := conditions.Get(h, infrav1.AgentConnectedCondition)
		if c == nil {
			return "", "", h.Status.HubReplica, nil
		}
		return c.Status, c.Reason, h.Status.HubReplica, nil
	}
	lost := func(name string) func() error {
		return func() error {
			s, reason, replica, err := state(name)
			if err != nil {
				return err
			}
			if s != metav1.ConditionUnknown || reason != edgehost.ContactLostReason || replica != "" {
				return fmt.Errorf("AgentConnected %s (%s), hubReplica %q", s, reason, replica)
			}
			return nil
		}
	}

	connected("long-gone", time.Now().Add(-time.Hour))
	connected("going", time.Now().Add(-contactTimeout+5*time.Second))
	connected("fresh", time.Now())

	w.eventually("long-gone marked ContactLost", lost("long-gone"))
	w.eventually("going marked ContactLost once its time passes", lost("going"))
	s, reason, replica, err := state("fresh")
	w.must(err)
	if s != metav1.ConditionTrue || replica != "fleet-hub-0" {
		t.Errorf("a host seen %s ago reads AgentConnected %s (%s), hubReplica %q; want True on fleet-hub-0",
			contactTimeout-5*time.Second, s, reason, replica)
	}
}
