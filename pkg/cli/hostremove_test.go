package cli_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// hostFixture writes a host whose agent state the test fixes, as a fake
// agent would report it.
func hostFixture(t *testing.T, ns, name string, claim *infrav1.HostClaimReference, p *infrav1.HostProvisioningStatus, connected bool) *infrav1.EdgeHost {
	t.Helper()
	h := &infrav1.EdgeHost{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: infrav1.EdgeHostSpec{ClaimRef: claim}}
	if claim == nil && p != nil {
		// A workload on a free host is one the hub released (else the hub
		// would take it for one it does not know, and never reset it).
		h.Annotations = map[string]string{infrav1.ReleasedClaimAnnotation: string(p.ClaimUID)}
	}
	if err := env.Client.Create(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	status := metav1.ConditionFalse
	if connected {
		status = metav1.ConditionTrue
	}
	if err := setStatus(h, func() {
		h.Status.Provisioning = p
		h.Status.AgentObservedGeneration = h.Generation
		h.Status.Conditions = append(h.Status.Conditions, metav1.Condition{Type: infrav1.AgentConnectedCondition,
			Status: status, Reason: "x", LastTransitionTime: metav1.Now()})
	}); err != nil {
		t.Fatal(err)
	}
	return h
}

func hostPhase(ns, name string, want infrav1.EdgeHostPhase) error {
	h := &infrav1.EdgeHost{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, h); err != nil {
		return err
	}
	if h.Status.Phase != want {
		return fmt.Errorf("edgehost/%s is %s, want %s", name, h.Status.Phase, want)
	}
	return nil
}

func hostGone(ns, name string) error {
	err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &infrav1.EdgeHost{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return fmt.Errorf("edgehost/%s still there: %v", name, err)
}

// eventFor finds an Event of reason on the named object.
func eventFor(ns, kind, name, reason string) (*eventsv1.Event, error) {
	evs := &eventsv1.EventList{}
	if err := env.Client.List(context.Background(), evs, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	for i, e := range evs.Items {
		if e.Regarding.Kind == kind && e.Regarding.Name == name && e.Reason == reason {
			return &evs.Items[i], nil
		}
	}
	return nil, fmt.Errorf("no %s Event on %s %s", reason, kind, name)
}

// A host that still serves a Machine is refused without --force, naming
// the Machine; --force gives the Machine up, lets the host go and says so
// in the output and in Events on both.
func TestHostRemoveServingHost(t *testing.T) {
	ctx := context.Background()
	ns := env.NewNamespace(t, "remove")
	c := env.Client
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	lbl := map[string]string{clusterv1.ClusterNameLabel: "store"}
	// Paused, so no controller changes what the test set.
	must(c.Create(ctx, &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "store", Namespace: ns, Labels: lbl},
		Spec: clusterv1.ClusterSpec{Paused: ptr.To(true), InfrastructureRef: clusterv1.ContractVersionedObjectReference{
			APIGroup: infrav1.GroupVersion.Group, Kind: "EdgeCluster", Name: "store"}}}))
	m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "store-w0", Namespace: ns, Labels: lbl},
		Spec: clusterv1.MachineSpec{ClusterName: "store", Bootstrap: clusterv1.Bootstrap{DataSecretName: ptr.To("x")},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "EdgeMachine", Name: "store-w0-em"}}}
	must(c.Create(ctx, m))
	em := &infrav1.EdgeMachine{ObjectMeta: metav1.ObjectMeta{Name: "store-w0-em", Namespace: ns, Labels: lbl,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: m.Name, UID: m.UID}}}}
	must(c.Create(ctx, em))
	hostFixture(t, ns, "dead-1", &infrav1.HostClaimReference{Name: em.Name, UID: em.UID},
		&infrav1.HostProvisioningStatus{ClaimUID: em.UID, State: infrav1.ProvisioningSucceeded}, false)
	eventually(t, "dead-1 Provisioned", func() error { return hostPhase(ns, "dead-1", infrav1.HostProvisioned) })

	_, _, err := fleet(t, "-n", ns, "host", "remove", "dead-1")
	if err == nil || !strings.Contains(err.Error(), "serves Machine "+ns+"/store-w0") || !strings.Contains(err.Error(), "--force") ||
		!strings.Contains(err.Error(), "delete the Machine first") {
		t.Fatalf("remove of a serving host: %v", err)
	}
	must(hostPhase(ns, "dead-1", infrav1.HostProvisioned))
	if _, _, err := fleet(t, "-n", ns, "host", "retry", "dead-1"); err == nil || !strings.Contains(err.Error(), "is Provisioned, not NeedsAttention") {
		t.Fatalf("retry of a Provisioned host: %v", err)
	}

	out, _, err := fleet(t, "-n", ns, "host", "remove", "dead-1", "--force")
	if err != nil || !strings.Contains(out, "edgehost/dead-1 removed by force") ||
		!strings.Contains(out, "given up: Machine "+ns+"/store-w0 lost its host") || !strings.Contains(out, "given up: the host was not reset") {
		t.Fatalf("remove --force: %v\n%s", err, out)
	}
	must(hostGone(ns, "dead-1"))
	for _, o := range []struct{ kind, name string }{{"EdgeHost", "dead-1"}, {"Machine", "store-w0"}, {"EdgeMachine", "store-w0-em"}} {
		eventually(t, "RemovedByForce Event on "+o.kind, func() error {
			e, err := eventFor(ns, o.kind, o.name, "RemovedByForce")
			if err != nil {
				return err
			}
			// The test's client authenticates with the envtest admin's certificate.
			if e.Type != corev1.EventTypeWarning || !strings.Contains(e.Note, "Machine store-w0 lost its host, which was not reset") ||
				!strings.Contains(e.Note, "removed by force by ") || strings.Contains(e.Note, "an unnamed user") {
				return fmt.Errorf("event %s: %s", e.Type, e.Note)
			}
			return nil
		})
	}
}

// A host whose reset failed is refused without --force and pointed at
// retry; retry orders the reset again (a new generation for the agent),
// and once the agent reports it clean remove takes it at once. An
// Available host goes at once; retry refuses it.
func TestHostRetryAndRemoveAfterReset(t *testing.T) {
	ctx := context.Background()
	ns := env.NewNamespace(t, "retry")
	hostFixture(t, ns, "stuck-1", nil, &infrav1.HostProvisioningStatus{ClaimUID: "old-claim", State: infrav1.ProvisioningResetFailed,
		Step: "reset 1/1", Message: "kubeadm reset -f: exit status 1\nthe disk is read-only"}, true)
	eventually(t, "stuck-1 NeedsAttention", func() error { return hostPhase(ns, "stuck-1", infrav1.HostNeedsAttention) })

	_, _, err := fleet(t, "-n", ns, "host", "remove", "stuck-1")
	if err == nil || !strings.Contains(err.Error(), "reset failed (ResetFailed at \"reset 1/1\": kubeadm reset -f: exit status 1 …)") ||
		!strings.Contains(err.Error(), "kubectl fleet host retry stuck-1") || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("remove of a host whose reset failed: %v", err)
	}
	h := &infrav1.EdgeHost{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "stuck-1"}, h); err != nil {
		t.Fatal(err)
	}
	gen := h.Generation
	out, _, err := fleet(t, "-n", ns, "host", "retry", "stuck-1")
	if err != nil || !strings.Contains(out, "edgehost/stuck-1 reset ordered again (retry 1)") {
		t.Fatalf("retry: %v %q", err, out)
	}
	eventually(t, "the hub orders the reset again", func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(h), h); err != nil {
			return err
		}
		if h.Spec.ResetRetries != 1 || h.Generation != gen+1 {
			return fmt.Errorf("resetRetries %d generation %d (was %d)", h.Spec.ResetRetries, h.Generation, gen)
		}
		_, err := eventFor(ns, "EdgeHost", "stuck-1", "ResetRetried")
		return err
	})
	// The agent resets the host and reports the new generation.
	if err := setStatus(h, func() {
		h.Status.Provisioning = nil
		h.Status.AgentObservedGeneration = h.Generation
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "stuck-1 Available", func() error { return hostPhase(ns, "stuck-1", infrav1.HostAvailable) })
	if _, _, err := fleet(t, "-n", ns, "host", "retry", "stuck-1"); err == nil || !strings.Contains(err.Error(), "is Available, not NeedsAttention: there is no failed reset to retry") {
		t.Fatalf("retry of an Available host: %v", err)
	}
	out, _, err = fleet(t, "-n", ns, "host", "remove", "stuck-1")
	if err != nil || out != "edgehost/stuck-1 removed\n" {
		t.Fatalf("remove of an Available host: %v %q", err, out)
	}
	if err := hostGone(ns, "stuck-1"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := fleet(t, "-n", ns, "host", "remove", "stuck-1"); err == nil || !strings.Contains(err.Error(), `host "stuck-1" not found`) {
		t.Fatalf("remove of a removed host: %v", err)
	}
	// Completion offers both commands hosts.
	hostFixture(t, ns, "spare-1", nil, nil, true)
	for _, sub := range []string{"remove", "retry"} {
		if out, _, err := fleet(t, "-n", ns, "__complete", "host", sub, "spa"); err != nil || !strings.Contains(out, "spare-1") {
			t.Errorf("completion of host %s: %v %q", sub, err, out)
		}
	}
}

// A host whose agent is resetting it is cordoned and removed once clean;
// one whose agent is gone before the reset is refused.
func TestHostRemoveWaitsForTheReset(t *testing.T) {
	ctx := context.Background()
	ns := env.NewNamespace(t, "resetting")
	resetting := &infrav1.HostProvisioningStatus{ClaimUID: "old-claim", State: infrav1.ProvisioningResetting, Step: "reset 1/1"}
	hostFixture(t, ns, "lost-1", nil, resetting.DeepCopy(), false)
	h := hostFixture(t, ns, "busy-1", nil, resetting, true)
	eventually(t, "hosts Deprovisioning", func() error {
		if err := hostPhase(ns, "lost-1", infrav1.HostDeprovisioning); err != nil {
			return err
		}
		return hostPhase(ns, "busy-1", infrav1.HostDeprovisioning)
	})
	if _, _, err := fleet(t, "-n", ns, "host", "remove", "lost-1"); err == nil ||
		!strings.Contains(err.Error(), "edgehost/lost-1 has not been reset and its agent is not connected") {
		t.Fatalf("remove of an unreset host without its agent: %v", err)
	}

	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, _, err := fleet(t, "-n", ns, "host", "remove", "busy-1")
		done <- result{out, err}
	}()
	eventually(t, "busy-1 cordoned while its agent resets it", func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(h), h); err != nil {
			return err
		}
		if h.Labels[infrav1.CordonedLabel] != "true" {
			return fmt.Errorf("labels %v", h.Labels)
		}
		return nil
	})
	if err := hostPhase(ns, "busy-1", infrav1.HostDeprovisioning); err != nil {
		t.Fatalf("removed before its reset: %v", err)
	}
	// The agent reports the host clean.
	if err := setStatus(h, func() { h.Status.Provisioning = nil }); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.out != "edgehost/busy-1 cordoned; waiting for its agent to reset it\nedgehost/busy-1 removed\n" {
		t.Fatalf("remove of a resetting host: %v %q", r.err, r.out)
	}
	if err := hostGone(ns, "busy-1"); err != nil {
		t.Fatal(err)
	}
}
