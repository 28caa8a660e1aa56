package reconcilers_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

var endpoint = infrav1.APIEndpoint{Host: "demo.edge.example", Port: 6443}

// Cluster + EdgeCluster → Cluster API reports the infrastructure
// provisioned, copies the endpoint and shows the hosts' zones.
func TestClusterInfrastructureProvisioned(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.host("h-a", map[string]string{infrav1.ZoneLabel: "store-a"})
	w.host("h-b", map[string]string{infrav1.ZoneLabel: "store-b"})
	w.host("h-nozone", nil)
	w.withCluster("infra", endpoint)

	w.eventually("Cluster infrastructure provisioned with endpoint and failure domains", func() error {
		c := &clusterv1.Cluster{}
		if err := w.get("infra", c); err != nil {
			return err
		}
		if c.Status.Initialization.InfrastructureProvisioned == nil || !*c.Status.Initialization.InfrastructureProvisioned {
			return errors.New("infrastructureProvisioned not true")
		}
		if c.Spec.ControlPlaneEndpoint.Host != endpoint.Host || c.Spec.ControlPlaneEndpoint.Port != endpoint.Port {
			return fmt.Errorf("endpoint is %+v", c.Spec.ControlPlaneEndpoint)
		}
		var names []string
		for _, fd := range c.Status.FailureDomains {
			names = append(names, fd.Name)
		}
		if fmt.Sprint(names) != "[store-a store-b]" {
			return fmt.Errorf("failure domains are %v", names)
		}
		return nil
	})

	// A new zone shows up on the Cluster without anyone touching it.
	w.host("h-c", map[string]string{infrav1.ZoneLabel: "store-c"})
	w.eventually("new zone reaches the Cluster", func() error {
		c := &clusterv1.Cluster{}
		if err := w.get("infra", c); err != nil {
			return err
		}
		if len(c.Status.FailureDomains) != 3 {
			return fmt.Errorf("failure domains are %v", c.Status.FailureDomains)
		}
		return nil
	})
}

// A MachineDeployment of 3 with 3 hosts → 3 Machines on distinct hosts, each
// with providerID, addresses and failure domain; once the Node exists, CAPI
// itself moves each Machine to Running with a nodeRef.
func TestMachineDeploymentRunsOnDistinctHosts(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	for i, zone := range []string{"z1", "z2", "z3"} {
		w.host(fmt.Sprintf("host-%d", i), map[string]string{infrav1.ZoneLabel: zone, "site": "store"})
	}
	w.host("other-site", map[string]string{infrav1.ZoneLabel: "z9", "site": "factory"})
	w.withCluster("md", endpoint)
	w.bootstrapSecret("md-bootstrap", cloudConfig())
	w.startAgent()
	w.machineDeployment("md", 3, "md-bootstrap", infrav1.EdgeMachineSpec{
		HostSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"site": "store"}},
	})

	w.eventually("3 Machines Running with nodeRef on distinct hosts", func() error {
		machines := &clusterv1.MachineList{}
		if err := env.Client.List(w.ctx, machines, client.InNamespace(w.ns)); err != nil {
			return err
		}
		if len(machines.Items) != 3 {
			return fmt.Errorf("%d machines", len(machines.Items))
		}
		hosts := map[string]bool{}
		for _, m := range machines.Items {
			if m.Status.Phase != string(clusterv1.MachinePhaseRunning) || !m.Status.NodeRef.IsDefined() {
				return fmt.Errorf("machine %s phase %q nodeRef %v", m.Name, m.Status.Phase, m.Status.NodeRef)
			}
			em := &infrav1.EdgeMachine{}
			if err := w.get(m.Spec.InfrastructureRef.Name, em); err != nil {
				return err
			}
			if em.Status.HostRef == "" || em.Status.HostRef == "other-site" {
				return fmt.Errorf("machine %s on host %q", m.Name, em.Status.HostRef)
			}
			hosts[em.Status.HostRef] = true
			if m.Spec.ProviderID != providerID(w.ns, em.Status.HostRef) {
				return fmt.Errorf("machine %s providerID %q", m.Name, m.Spec.ProviderID)
			}
			if len(m.Status.Addresses) != 2 {
				return fmt.Errorf("machine %s addresses %v", m.Name, m.Status.Addresses)
			}
			if m.Status.FailureDomain == "" {
				return fmt.Errorf("machine %s has no failure domain", m.Name)
			}
			if m.Status.NodeRef.Name != "node-"+w.ns+"-"+em.Status.HostRef {
				return fmt.Errorf("machine %s nodeRef %s", m.Name, m.Status.NodeRef.Name)
			}
		}
		if len(hosts) != 3 {
			return fmt.Errorf("machines share hosts: %v", hosts)
		}
		return nil
	})

	// The EdgeHosts tell the same story from their side.
	hosts := &infrav1.EdgeHostList{}
	w.must(env.Client.List(w.ctx, hosts, client.InNamespace(w.ns)))
	for _, h := range hosts.Items {
		want := infrav1.HostProvisioned
		if h.Name == "other-site" {
			want = infrav1.HostAvailable
		}
		if h.Status.Phase != want {
			t.Errorf("host %s phase %s, want %s", h.Name, h.Status.Phase, want)
		}
	}
}

// A control-plane Machine whose host reports a certificate expiry → CAPI
// sets Machine.status.certificatesExpiryDate.
func TestControlPlaneCertificateExpiry(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.host("cp-host", nil)
	w.withCluster("certs", endpoint)
	w.bootstrapSecret("cp-bootstrap", cloudConfig())
	agent := w.startAgent()
	expiry := metav1.NewTime(time.Date(2027, 3, 1, 12, 0, 0, 0, time.UTC))
	agent.certExpiry.Store(&expiry)
	w.machine("cp-0", true, "cp-bootstrap", infrav1.EdgeMachineSpec{}, "")

	w.eventually("Machine.status.certificatesExpiryDate set by CAPI", func() error {
		m := &clusterv1.Machine{}
		if err := w.get("cp-0", m); err != nil {
			return err
		}
		if !m.Status.CertificatesExpiryDate.Equal(&expiry) {
			return fmt.Errorf("certificatesExpiryDate is %v", m.Status.CertificatesExpiryDate)
		}
		return nil
	})
}

// An interruptible host → CAPI labels its Node interruptible.
func TestInterruptibleHostLabelsNode(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.host("spot", map[string]string{infrav1.InterruptibleLabel: "true"})
	w.withCluster("spot", endpoint)
	w.bootstrapSecret("spot-bootstrap", cloudConfig())
	w.startAgent()
	w.machine("spot-0", false, "spot-bootstrap", infrav1.EdgeMachineSpec{}, "")

	w.eventually("Node labelled cluster.x-k8s.io/interruptible", func() error {
		node := &corev1.Node{}
		if err := env.Client.Get(w.ctx, client.ObjectKey{Name: "node-" + w.ns + "-spot"}, node); err != nil {
			return err
		}
		if _, ok := node.Labels[clusterv1.InterruptibleLabel]; !ok {
			return fmt.Errorf("node labels %v", node.Labels)
		}
		return nil
	})
	em := &infrav1.EdgeMachine{}
	w.must(w.get("spot-0", em))
	if !em.Status.Interruptible {
		t.Error("EdgeMachine status.interruptible is false")
	}
}

// 4 machines and 3 hosts → the 4th waits with a clear condition; adding a
// host unblocks it.
func TestFourthMachineWaitsForHost(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	for i := range 3 {
		w.host(fmt.Sprintf("h%d", i), map[string]string{"pool": "a"})
	}
	w.withCluster("wait", endpoint)
	w.bootstrapSecret("wait-bootstrap", cloudConfig())
	w.startAgent()
	sel := infrav1.EdgeMachineSpec{HostSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}}}
	for i := range 4 {
		w.machine(fmt.Sprintf("m%d", i), false, "wait-bootstrap", sel, "")
	}

	var waiting string
	w.eventually("3 machines provisioned and 1 waiting for a host", func() error {
		list := &infrav1.EdgeMachineList{}
		if err := env.Client.List(w.ctx, list, client.InNamespace(w.ns)); err != nil {
			return err
		}
		provisioned, waitingN := 0, 0
		for _, em := range list.Items {
			switch em.Status.Phase {
			case infrav1.MachineProvisioned:
				provisioned++
			case infrav1.MachineWaitingForHost:
				c := condition(em.Status.Conditions, infrav1.HostClaimedCondition)
				if c == nil || c.Reason != infrav1.WaitingForHostReason {
					return fmt.Errorf("waiting machine %s has condition %v", em.Name, c)
				}
				want := "Waiting for an Available EdgeHost matching pool=a: 3 of 3 hosts in the namespace match, 0 of them available"
				if c.Message != want {
					return fmt.Errorf("message %q, want %q", c.Message, want)
				}
				waiting, waitingN = em.Name, waitingN+1
			}
		}
		if provisioned != 3 || waitingN != 1 {
			return fmt.Errorf("%d provisioned, %d waiting", provisioned, waitingN)
		}
		return nil
	})

	w.host("h3", map[string]string{"pool": "a"})
	w.eventually("the 4th machine is provisioned on the new host", func() error {
		em := &infrav1.EdgeMachine{}
		if err := w.get(waiting, em); err != nil {
			return err
		}
		if em.Status.Phase != infrav1.MachineProvisioned || em.Status.HostRef != "h3" {
			return fmt.Errorf("phase %s host %q", em.Status.Phase, em.Status.HostRef)
		}
		return nil
	})
}
