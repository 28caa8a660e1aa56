package reconcilers_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
// no other host; a second EdgeMachine naming the same host is refused
// (DuplicateClaim) and the host stays the first one's.
func TestARestoredMachineAdoptsItsHostsClaim(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.host("r0", map[string]string{"first": "yes"})
	w.host("spare", map[string]string{"unused": "yes"})
	w.withCluster("restored", endpoint)
	w.bootstrapSecret("restored-bootstrap", cloudConfig())
	agent := w.startAgent()
	w.machine("m0", false, "restored-bootstrap", infrav1.EdgeMachineSpec{
		HostSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"first": "yes"}}}, "")
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

	// Restore m0 as a backup without its claim ID has it, with the hub
	// not acting meanwhile (the Cluster and the host paused, as a hub
	// scaled down for a restore): it is lost without its finalizer running.
	w.pause(true)
	w.pauseHost("r0", true)
	w.must(env.Client.Delete(w.ctx, before.DeepCopy()))
	w.eventually("m0 gone", func() error {
		em := &infrav1.EdgeMachine{}
		if err := w.get("m0", em); err != nil {
			return client.IgnoreNotFound(err)
		}
		_ = env.Client.Patch(w.ctx, em, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
		return errors.New("still there")
	})
	restored := &infrav1.EdgeMachine{}
	restored.Namespace, restored.Name = w.ns, "m0"
	restored.Labels, restored.OwnerReferences, restored.Spec = before.Labels, before.OwnerReferences, before.Spec
	delete(restored.Annotations, infrav1.ClaimIDAnnotation)
	// Without its selector the spare would fit too: only the providerID
	// keeps it on r0.
	restored.Spec.HostSelector = nil
	w.must(env.Client.Create(w.ctx, restored))
	lost := &infrav1.EdgeMachine{}
	lost.Namespace, lost.Name = w.ns, "lost"
	lost.Spec.ProviderID = "edge://" + w.ns + "/nowhere"
	w.machine("lost", false, "restored-bootstrap", lost.Spec, "")
	// A copy of m0 under another name (restored twice) names r0 too.
	w.machine("m0-copy", false, "restored-bootstrap", infrav1.EdgeMachineSpec{ProviderID: before.Spec.ProviderID}, "")
	w.pause(false)
	w.pauseHost("r0", false)

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
	w.eventually("the copy refused: r0 is m0's", func() error {
		em := &infrav1.EdgeMachine{}
		if err := w.get("m0-copy", em); err != nil {
			return err
		}
		c := condition(em.Status.Conditions, infrav1.HostClaimedCondition)
		if c == nil || c.Reason != infrav1.DuplicateClaimReason || !strings.Contains(c.Message, "EdgeMachine m0 ") {
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

// pauseHost sets or clears an EdgeHost's paused annotation.
func (w *world) pauseHost(name string, paused bool) {
	w.t.Helper()
	value := `null`
	if paused {
		value = `""`
	}
	h := &infrav1.EdgeHost{}
	w.must(w.get(name, h))
	w.must(env.Client.Patch(w.ctx, h, client.RawPatch(types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+clusterv1.PausedAnnotation+`":`+value+`}}}`))))
}

// docs/OPERATING.md's fix for an EdgeHost restored twice, as written:
// deleting the copy takes it away (nothing stripped by hand), the claim
// stays with the other, and nothing is released or reset. Deleting a host
// whose claim no other holds still waits for its machine.
func TestDeletingACopiedHostLetsItGo(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	claim := &infrav1.HostClaimReference{Name: "m0", UID: "4f1c0a52-6d1e-4c1b-9d7a-2a9f0e1c3b5d"}
	for _, n := range []string{"orig", "orig-copy", "alone"} {
		h := w.host(n, nil)
		w.eventually(n+" has its finalizer", func() error {
			if err := w.get(n, h); err != nil {
				return err
			}
			if len(h.Finalizers) == 0 {
				return errors.New("not yet")
			}
			return nil
		})
		patch := client.MergeFrom(h.DeepCopy())
		h.Spec.ClaimRef = claim.DeepCopy()
		if n == "alone" {
			h.Spec.ClaimRef.UID = "9a0b1c2d-3e4f-4a5b-8c6d-7e8f9a0b1c2d"
		}
		w.must(env.Client.Patch(w.ctx, h, patch))
	}
	for _, n := range []string{"orig-copy", "alone"} {
		w.must(env.Client.Delete(w.ctx, &infrav1.EdgeHost{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: w.ns}}))
	}
	w.eventually("the copy gone", func() error {
		err := w.get("orig-copy", &infrav1.EdgeHost{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
	h := &infrav1.EdgeHost{}
	w.must(w.get("orig", h))
	if h.Spec.ClaimRef == nil || h.Spec.ClaimRef.UID != claim.UID {
		t.Errorf("the original lost its claim: %+v", h.Spec.ClaimRef)
	}
	w.eventually("the lone claimed host blocked", func() error {
		if err := w.get("alone", h); err != nil {
			return err
		}
		if c := condition(h.Status.Conditions, infrav1.ReadyCondition); c == nil || c.Reason != "DeletionBlocked" {
			return fmt.Errorf("Ready %+v", c)
		}
		return nil
	})
}
