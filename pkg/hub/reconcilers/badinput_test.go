package reconcilers_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// waitEvent waits for an event with the reason about the named object.
func (w *world) waitEvent(kind, name, reason, contains string) {
	w.t.Helper()
	w.eventually(fmt.Sprintf("event %s on %s %s", reason, kind, name), func() error {
		list := &eventsv1.EventList{}
		if err := env.Client.List(w.ctx, list, client.InNamespace(w.ns)); err != nil {
			return err
		}
		var seen []string
		for _, e := range list.Items {
			if e.Regarding.Kind == kind && e.Regarding.Name == name && e.Reason == reason && strings.Contains(e.Note, contains) {
				return nil
			}
			seen = append(seen, e.Regarding.Kind+"/"+e.Regarding.Name+":"+e.Reason)
		}
		return fmt.Errorf("not among %d events %v", len(list.Items), seen)
	})
}

// Bad input gets a clear condition and an event each; nothing crashes and no
// other object is disturbed.
func TestBadInputIsReportedNotFatal(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.host("bystander", map[string]string{"pool": "a"})
	w.withCluster("bad", endpoint)
	w.bootstrapSecret("good", cloudConfig())
	w.bootstrapSecret("novalue", map[string][]byte{"format": []byte("cloud-config")})
	w.bootstrapSecret("ignition", map[string][]byte{"value": []byte(`{"ignition":{"version":"3.4.0"}}`), "format": []byte("ignition")})
	w.startAgent()

	cases := []struct {
		machine, secret string
		spec            infrav1.EdgeMachineSpec
		condType        string
		reason          string
		message         string
	}{
		{"bad-selector", "good", infrav1.EdgeMachineSpec{HostSelector: &metav1.LabelSelector{
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "pool", Operator: metav1.LabelSelectorOpIn}},
		}}, infrav1.HostClaimedCondition, infrav1.InvalidHostSelectorReason, "spec.hostSelector is invalid"},
		{"bad-label-value", "good", infrav1.EdgeMachineSpec{HostSelector: &metav1.LabelSelector{
			MatchLabels: map[string]string{"pool": "not a valid value!"},
		}}, infrav1.HostClaimedCondition, infrav1.InvalidHostSelectorReason, "spec.hostSelector is invalid"},
		{"no-value", "novalue", infrav1.EdgeMachineSpec{}, infrav1.BootstrapDataReadyCondition,
			infrav1.BootstrapDataInvalidReason, `has no data under key "value"`},
		{"ignition", "ignition", infrav1.EdgeMachineSpec{}, infrav1.BootstrapDataReadyCondition,
			infrav1.BootstrapDataInvalidReason, "is in ignition format; fleet agents run cloud-config"},
	}
	for _, tc := range cases {
		w.machine(tc.machine, false, tc.secret, tc.spec, "")
	}
	for _, tc := range cases {
		w.eventually(tc.machine+" reports "+tc.reason, func() error {
			em := &infrav1.EdgeMachine{}
			if err := w.get(tc.machine, em); err != nil {
				return err
			}
			c := condition(em.Status.Conditions, tc.condType)
			if c == nil || c.Status != metav1.ConditionFalse || c.Reason != tc.reason || !strings.Contains(c.Message, tc.message) {
				return fmt.Errorf("%s is %+v", tc.condType, c)
			}
			ready := condition(em.Status.Conditions, infrav1.ReadyCondition)
			if ready == nil || ready.Status != metav1.ConditionFalse {
				return fmt.Errorf("Ready is %+v", ready)
			}
			return nil
		})
		w.waitEvent("EdgeMachine", tc.machine, tc.reason, tc.message)
	}
	w.consistently("the bystander host is never claimed by a bad machine", 2*time.Second, func() error {
		h := &infrav1.EdgeHost{}
		if err := w.get("bystander", h); err != nil {
			return err
		}
		if h.Spec.ClaimRef != nil || h.Status.Phase != infrav1.HostAvailable {
			return fmt.Errorf("bystander is %s, claimed by %v", h.Status.Phase, h.Spec.ClaimRef)
		}
		return nil
	})

	// Fixing the input is enough: the ignition machine's secret is replaced
	// by a cloud-config one and the machine goes on to the bystander host.
	m := &clusterv1.Machine{}
	w.must(w.get("ignition", m))
	p := client.MergeFrom(m.DeepCopy())
	m.Spec.Bootstrap.DataSecretName = ptr.To("good")
	w.must(env.Client.Patch(w.ctx, m, p))
	w.eventually("the fixed machine is provisioned", func() error {
		em := &infrav1.EdgeMachine{}
		if err := w.get("ignition", em); err != nil {
			return err
		}
		if em.Status.Phase != infrav1.MachineProvisioned {
			return fmt.Errorf("phase %s", em.Status.Phase)
		}
		return nil
	})
}

// A cluster without a control-plane endpoint anywhere is reported, not
// provisioned; setting the endpoint unblocks it.
func TestMissingEndpointIsReported(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.withCluster("noendpoint", infrav1.APIEndpoint{})
	w.eventually("EdgeCluster reports the missing endpoint", func() error {
		ec := &infrav1.EdgeCluster{}
		if err := w.get("noendpoint", ec); err != nil {
			return err
		}
		c := condition(ec.Status.Conditions, infrav1.ControlPlaneEndpointReadyCondition)
		if c == nil || c.Reason != infrav1.ControlPlaneEndpointMissingReason {
			return fmt.Errorf("condition %+v", c)
		}
		if ec.Status.Initialization.Provisioned != nil {
			return errors.New("provisioned without an endpoint")
		}
		return nil
	})
	w.waitEvent("EdgeCluster", "noendpoint", infrav1.ControlPlaneEndpointMissingReason, "set one")

	ec := &infrav1.EdgeCluster{}
	w.must(w.get("noendpoint", ec))
	p := client.MergeFrom(ec.DeepCopy())
	ec.Spec.ControlPlaneEndpoint = endpoint
	w.must(env.Client.Patch(w.ctx, ec, p))
	w.eventually("Cluster provisioned once the endpoint is set", func() error {
		c := &clusterv1.Cluster{}
		if err := w.get("noendpoint", c); err != nil {
			return err
		}
		if !ptr.Deref(c.Status.Initialization.InfrastructureProvisioned, false) || c.Spec.ControlPlaneEndpoint.Host != endpoint.Host {
			return fmt.Errorf("provisioned %v endpoint %+v", c.Status.Initialization.InfrastructureProvisioned, c.Spec.ControlPlaneEndpoint)
		}
		return nil
	})
}
