package reconcilers_test

import (
	"errors"
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// An EdgeMachine restored from a backup taken before claim IDs were
// recorded has a new uid and no claim-id annotation; its host still claims
// it under its old uid. It adopts that claim by its providerID, and the host
// is neither released nor reset, nor provisioned again. An EdgeMachine whose
// providerID names a host that does not exist waits, naming it, and claims
// no other host.
func TestARestoredMachineAdoptsItsHostsClaim(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.host("r0", nil)
	w.host("spare", map[string]string{"unused": "yes"})
	w.withCluster("restored", endpoint)
	w.bootstrapSecret("restored-bootstrap", cloudConfig())
	agent := w.startAgent()
	w.machine("m0", false, "restored-bootstrap", infrav1.EdgeMachineSpec{}, "")
	var before infrav1.EdgeMachine
	w.eventually("m0 provisioned", func() error {
		if err := w.get("m0", &before); err != nil {
			return err
		}
		if before.Spec.ProviderID == "" || before.Status.Initialization.Provisioned == nil {
			return errors.New("not yet")
		}
		return nil
	})
	oldUID := before.UID

	// Restore m0 as a backup without its claim ID has it, with the Cluster
	// paused while it is re-created.
	w.pause(true)
	gone := before.DeepCopy()
	gone.Finalizers = nil
	w.must(env.Client.Update(w.ctx, gone))
	w.must(env.Client.Delete(w.ctx, gone))
	w.eventually("m0 gone", func() error {
		if err := w.get("m0", &infrav1.EdgeMachine{}); err == nil {
			return errors.New("still there")
		}
		return nil
	})
	restored := &infrav1.EdgeMachine{}
	restored.Namespace, restored.Name = w.ns, "m0"
	restored.Labels, restored.OwnerReferences, restored.Spec = before.Labels, before.OwnerReferences, before.Spec
	delete(restored.Annotations, infrav1.ClaimIDAnnotation)
	w.must(env.Client.Create(w.ctx, restored))
	lost := &infrav1.EdgeMachine{}
	lost.Namespace, lost.Name = w.ns, "lost"
	lost.Spec.ProviderID = "edge://" + w.ns + "/nowhere"
	w.machine("lost", false, "restored-bootstrap", lost.Spec, "")
	w.pause(false)

	w.eventually("m0 adopts its host's claim", func() error {
		em := &infrav1.EdgeMachine{}
		if err := w.get("m0", em); err != nil {
			return err
		}
		if em.UID == oldUID || em.Annotations[infrav1.ClaimIDAnnotation] != string(oldUID) {
			return fmt.Errorf("uid %s annotations %v", em.UID, em.Annotations)
		}
		if c := condition(em.Status.Conditions, infrav1.HostProvisionedCondition); c == nil || c.Status != "True" {
			return fmt.Errorf("HostProvisioned %+v", c)
		}
		return nil
	})
	w.eventually("lost names its missing host", func() error {
		em := &infrav1.EdgeMachine{}
		if err := w.get("lost", em); err != nil {
			return err
		}
		if c := condition(em.Status.Conditions, infrav1.HostClaimedCondition); c == nil || c.Reason != infrav1.HostNotFoundReason {
			return fmt.Errorf("HostClaimed %+v", c)
		}
		return nil
	})
	h := &infrav1.EdgeHost{}
	w.must(w.get("r0", h))
	if c := h.Spec.ClaimRef; c == nil || c.Name != "m0" || c.UID != types.UID(oldUID) {
		t.Errorf("r0 claim %+v, want m0 under %s", c, oldUID)
	}
	w.must(w.get("spare", h))
	if h.Spec.ClaimRef != nil {
		t.Errorf("the spare host was claimed by %s", h.Spec.ClaimRef.Name)
	}
	if n := agent.resetCount("r0"); n != 0 {
		t.Errorf("r0 reset %d times", n)
	}
}

// pause sets the Cluster's spec.paused.
func (w *world) pause(paused bool) {
	w.t.Helper()
	c := &clusterv1.Cluster{}
	w.must(w.get(w.cluster.Name, c))
	patch := client.MergeFrom(c.DeepCopy())
	c.Spec.Paused = &paused
	w.must(env.Client.Patch(w.ctx, c, patch))
}
