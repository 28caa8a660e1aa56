package reconcilers_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// Cluster.spec.paused and the paused annotation stop fleet's reconcilers;
// they resume afterwards.
func TestPauseStopsAndResumes(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.withCluster("pause", endpoint)
	w.bootstrapSecret("pause-bootstrap", cloudConfig())
	w.startAgent()
	w.eventually("Cluster infrastructure provisioned", func() error {
		c := &clusterv1.Cluster{}
		if err := w.get("pause", c); err != nil {
			return err
		}
		if !ptr.Deref(c.Status.Initialization.InfrastructureProvisioned, false) {
			return errors.New("not provisioned")
		}
		return nil
	})

	// A machine waits for a host; then the whole Cluster is paused and a
	// host appears: nothing may happen.
	w.machine("p-0", false, "pause-bootstrap", infrav1.EdgeMachineSpec{}, "")
	w.eventually("EdgeMachine waits for a host", func() error {
		em := &infrav1.EdgeMachine{}
		if err := w.get("p-0", em); err != nil {
			return err
		}
		if em.Status.Phase != infrav1.MachineWaitingForHost {
			return fmt.Errorf("phase %q", em.Status.Phase)
		}
		return nil
	})
	c := &clusterv1.Cluster{}
	w.must(w.get("pause", c))
	patch := client.MergeFrom(c.DeepCopy())
	c.Spec.Paused = ptr.To(true)
	w.must(env.Client.Patch(w.ctx, c, patch))
	w.eventually("EdgeCluster reports Paused", func() error {
		ec := &infrav1.EdgeCluster{}
		if err := w.get("pause", ec); err != nil {
			return err
		}
		if cond := condition(ec.Status.Conditions, infrav1.PausedCondition); cond == nil || cond.Status != "True" {
			return fmt.Errorf("Paused is %v", cond)
		}
		return nil
	})
	w.eventually("EdgeMachine reports Paused", func() error {
		em := &infrav1.EdgeMachine{}
		if err := w.get("p-0", em); err != nil {
			return err
		}
		if cond := condition(em.Status.Conditions, infrav1.PausedCondition); cond == nil || cond.Status != "True" {
			return fmt.Errorf("Paused is %v", cond)
		}
		return nil
	})
	w.host("p-host", nil)
	noClaim := func() error {
		h := &infrav1.EdgeHost{}
		if err := w.get("p-host", h); err != nil {
			return err
		}
		if h.Spec.ClaimRef != nil {
			return fmt.Errorf("host claimed by %s while paused", h.Spec.ClaimRef.Name)
		}
		return nil
	}
	w.consistently("no host is claimed while the Cluster is paused", 3*time.Second, noClaim)

	// Unpause the Cluster but pause the EdgeMachine itself by annotation.
	em := &infrav1.EdgeMachine{}
	w.must(w.get("p-0", em))
	emPatch := client.MergeFrom(em.DeepCopy())
	em.Annotations = map[string]string{clusterv1.PausedAnnotation: ""}
	w.must(env.Client.Patch(w.ctx, em, emPatch))
	w.must(w.get("pause", c))
	patch = client.MergeFrom(c.DeepCopy())
	c.Spec.Paused = nil
	w.must(env.Client.Patch(w.ctx, c, patch))
	w.eventually("EdgeCluster no longer Paused", func() error {
		ec := &infrav1.EdgeCluster{}
		if err := w.get("pause", ec); err != nil {
			return err
		}
		if cond := condition(ec.Status.Conditions, infrav1.PausedCondition); cond == nil || cond.Status != "False" {
			return fmt.Errorf("Paused is %v", cond)
		}
		return nil
	})
	w.consistently("no host is claimed while the EdgeMachine is annotated paused", 3*time.Second, noClaim)

	// Remove the annotation: the machine goes on to a provisioned host.
	w.must(w.get("p-0", em))
	emPatch = client.MergeFrom(em.DeepCopy())
	delete(em.Annotations, clusterv1.PausedAnnotation)
	w.must(env.Client.Patch(w.ctx, em, emPatch))
	w.eventually("EdgeMachine provisioned after unpause", func() error {
		em := &infrav1.EdgeMachine{}
		if err := w.get("p-0", em); err != nil {
			return err
		}
		if em.Status.Phase != infrav1.MachineProvisioned || em.Status.HostRef != "p-host" {
			return fmt.Errorf("phase %s host %q", em.Status.Phase, em.Status.HostRef)
		}
		return nil
	})
}

// Scale-down → the released host goes through Deprovisioning and is
// Available again only after its agent reports the reset.
func TestScaleDownDeprovisionsHost(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.host("s0", nil)
	w.host("s1", nil)
	w.withCluster("scale", endpoint)
	w.bootstrapSecret("scale-bootstrap", cloudConfig())
	agent := w.startAgent()
	w.machineDeployment("scale", 2, "scale-bootstrap", infrav1.EdgeMachineSpec{})
	w.eventually("both hosts provisioned", func() error {
		for _, n := range []string{"s0", "s1"} {
			h := &infrav1.EdgeHost{}
			if err := w.get(n, h); err != nil {
				return err
			}
			if h.Status.Phase != infrav1.HostProvisioned {
				return fmt.Errorf("host %s is %s", n, h.Status.Phase)
			}
		}
		return nil
	})

	// The agent is slow to reset: the released host must wait in Deprovisioning.
	agent.reset.Store(false)
	md := &clusterv1.MachineDeployment{}
	w.must(w.get("scale", md))
	patch := client.MergeFrom(md.DeepCopy())
	md.Spec.Replicas = ptr.To[int32](1)
	w.must(env.Client.Patch(w.ctx, md, patch))

	var released string
	w.eventually("one host released into Deprovisioning", func() error {
		for _, n := range []string{"s0", "s1"} {
			h := &infrav1.EdgeHost{}
			if err := w.get(n, h); err != nil {
				return err
			}
			if h.Status.Phase == infrav1.HostDeprovisioning && h.Spec.ClaimRef == nil {
				released = n
				return nil
			}
		}
		return errors.New("no host is Deprovisioning")
	})
	w.eventually("the Machine is gone", func() error {
		machines := &clusterv1.MachineList{}
		if err := env.Client.List(w.ctx, machines, client.InNamespace(w.ns)); err != nil {
			return err
		}
		if len(machines.Items) != 1 {
			return fmt.Errorf("%d machines", len(machines.Items))
		}
		return nil
	})
	w.consistently("the released host stays Deprovisioning until reset", 3*time.Second, func() error {
		h := &infrav1.EdgeHost{}
		if err := w.get(released, h); err != nil {
			return err
		}
		if h.Status.Phase != infrav1.HostDeprovisioning {
			return fmt.Errorf("host %s is %s before any reset", released, h.Status.Phase)
		}
		return nil
	})

	agent.reset.Store(true)
	w.eventually("the host is Available after reset", func() error {
		h := &infrav1.EdgeHost{}
		if err := w.get(released, h); err != nil {
			return err
		}
		if h.Status.Phase != infrav1.HostAvailable {
			return fmt.Errorf("host %s is %s", released, h.Status.Phase)
		}
		return nil
	})
	if n := agent.resetCount(released); n != 1 {
		t.Errorf("host %s was reset %d times, want 1", released, n)
	}

	// And it serves again: scale back up onto it.
	w.must(w.get("scale", md))
	patch = client.MergeFrom(md.DeepCopy())
	md.Spec.Replicas = ptr.To[int32](2)
	w.must(env.Client.Patch(w.ctx, md, patch))
	w.eventually("the reset host is provisioned again", func() error {
		h := &infrav1.EdgeHost{}
		if err := w.get(released, h); err != nil {
			return err
		}
		if h.Status.Phase != infrav1.HostProvisioned {
			return fmt.Errorf("host %s is %s", released, h.Status.Phase)
		}
		return nil
	})
}

// Deleting a claimed EdgeHost waits for its release (the PV-protection
// pattern) and then completes.
func TestDeletingClaimedHostWaitsForRelease(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.host("keep", nil)
	w.host("free", nil)
	w.withCluster("protect", endpoint)
	w.bootstrapSecret("protect-bootstrap", cloudConfig())
	w.startAgent()
	w.machine("pm", false, "protect-bootstrap", infrav1.EdgeMachineSpec{
		HostSelector: nil,
	}, "")
	var held string
	w.eventually("machine provisioned", func() error {
		em := &infrav1.EdgeMachine{}
		if err := w.get("pm", em); err != nil {
			return err
		}
		if em.Status.Phase != infrav1.MachineProvisioned {
			return fmt.Errorf("phase %s", em.Status.Phase)
		}
		held = em.Status.HostRef
		return nil
	})
	other := "free"
	if held == "free" {
		other = "keep"
	}

	// An unclaimed host is deleted at once (once the hub has seen it).
	w.eventually("protection finalizer on the free host", func() error {
		h := &infrav1.EdgeHost{}
		if err := w.get(other, h); err != nil {
			return err
		}
		if len(h.Finalizers) == 0 {
			return errors.New("no finalizer yet")
		}
		return nil
	})
	w.must(env.Client.Delete(w.ctx, &infrav1.EdgeHost{ObjectMeta: objMeta(w.ns, other)}))
	w.eventually("free host deleted", func() error {
		h := &infrav1.EdgeHost{}
		err := w.get(other, h)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (err %v): finalizers %v, deleting since %v, phase %s, claim %v, conditions %+v",
			err, h.Finalizers, h.DeletionTimestamp, h.Status.Phase, h.Spec.ClaimRef, h.Status.Conditions)
	})

	// The held host is not.
	w.must(env.Client.Delete(w.ctx, &infrav1.EdgeHost{ObjectMeta: objMeta(w.ns, held)}))
	w.eventually("held host reports DeletionBlocked", func() error {
		h := &infrav1.EdgeHost{}
		if err := w.get(held, h); err != nil {
			return err
		}
		c := condition(h.Status.Conditions, infrav1.ReadyCondition)
		if c == nil || c.Reason != "DeletionBlocked" {
			return fmt.Errorf("Ready is %v", c)
		}
		return nil
	})
	w.consistently("held host survives while claimed", 2*time.Second, func() error {
		return w.get(held, &infrav1.EdgeHost{})
	})

	// Deleting the Machine releases the host; after the reset it goes.
	w.must(env.Client.Delete(w.ctx, &clusterv1.Machine{ObjectMeta: objMeta(w.ns, "pm")}))
	w.eventually("held host deleted after release and reset", func() error {
		err := w.get(held, &infrav1.EdgeHost{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there: %v", err)
	})
}
