package edgemachine

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// Waiting machines are woken by the host changes they can act on, not by
// an unclaimed host's connectivity or lastSeenTime (each would make every
// waiting machine list every host).
func TestHostChangeMattersToMachines(t *testing.T) {
	free := func(mutate func(*infrav1.EdgeHost)) *infrav1.EdgeHost {
		h := &infrav1.EdgeHost{ObjectMeta: metav1.ObjectMeta{Name: "store-1", Namespace: "stores", Labels: map[string]string{"site": "a"}}}
		if mutate != nil {
			mutate(h)
		}
		return h
	}
	now := metav1.NewTime(time.Now())
	connected := func(h *infrav1.EdgeHost) {
		h.Status.LastSeenTime = &now
		h.Status.Conditions = []metav1.Condition{{Type: infrav1.AgentConnectedCondition, Status: metav1.ConditionTrue}}
	}
	claimed := func(h *infrav1.EdgeHost) { h.Spec.ClaimRef = &infrav1.HostClaimReference{Name: "m-1", UID: "uid-m-1"} }
	for _, c := range []struct {
		name     string
		old, cur *infrav1.EdgeHost
		want     bool
	}{
		{"an unclaimed host connects", free(nil), free(connected), false},
		{"an unclaimed host's lastSeenTime", free(connected), free(func(h *infrav1.EdgeHost) {
			connected(h)
			h.Status.LastSeenTime = &metav1.Time{Time: now.Add(5 * time.Minute)}
		}), false},
		{"a host is claimed", free(nil), free(claimed), true},
		{"a claimed host reports", free(claimed), free(func(h *infrav1.EdgeHost) { claimed(h); connected(h) }), true},
		{"a host is cordoned", free(nil), free(func(h *infrav1.EdgeHost) { h.Labels[infrav1.CordonedLabel] = "true" }), true},
		{"a host is relabelled", free(nil), free(func(h *infrav1.EdgeHost) { h.Labels["site"] = "b" }), true},
		{"a released host's agent reports it clean", free(func(h *infrav1.EdgeHost) {
			h.Generation = 3 // the release's own write
			h.Annotations = map[string]string{infrav1.ReleasedAtGenerationAnnotation: "3"}
			h.Status.AgentObservedGeneration = 2
		}), free(func(h *infrav1.EdgeHost) {
			h.Generation = 3
			h.Annotations = map[string]string{infrav1.ReleasedAtGenerationAnnotation: "3"}
			h.Status.AgentObservedGeneration = 3
		}), true},
	} {
		if got := hostChangeMattersToMachines().Update(event.UpdateEvent{ObjectOld: c.old, ObjectNew: c.cur}); got != c.want {
			t.Errorf("%s: wakes machines %v, want %v", c.name, got, c.want)
		}
	}
	if !hostChangeMattersToMachines().Create(event.CreateEvent{Object: free(nil)}) || !hostChangeMattersToMachines().Delete(event.DeleteEvent{Object: free(nil)}) {
		t.Error("a host created or deleted does not wake the machines")
	}
}
