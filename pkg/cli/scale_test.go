package cli_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	capikubeconfig "sigs.k8s.io/cluster-api/util/kubeconfig"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/pkg/contract/hostphase"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/hub/inventory"
)

// agentsOf plays the agents of the hosts in ns until the test ends, as
// fleet-agent reports to the hub: a claimed host is provisioned, which
// registers its Node (with the host's providerID) in the workload API
// server — this same API server, through the cluster's kubeconfig — and a
// released host is reset, its Node deleted.
func agentsOf(t *testing.T, ns string) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			hosts := &infrav1.EdgeHostList{}
			if err := env.Client.List(ctx, hosts, client.InNamespace(ns)); err == nil {
				for i := range hosts.Items {
					agentSync(ctx, &hosts.Items[i])
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
}

func agentSync(ctx context.Context, h *infrav1.EdgeHost) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: h.Namespace + "-" + h.Name}, Spec: corev1.NodeSpec{ProviderID: inventory.ProviderID(h)}}
	switch claim := h.Spec.ClaimRef; {
	case claim != nil && (h.Status.Provisioning == nil || h.Status.Provisioning.ClaimUID != claim.UID):
		if err := env.Client.Create(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) {
			return
		}
		h.Status.Provisioning = &infrav1.HostProvisioningStatus{ClaimUID: claim.UID, State: infrav1.ProvisioningSucceeded}
		h.Status.ProviderID, h.Status.NodeName = inventory.ProviderID(h), node.Name
		h.Status.Addresses = infrav1.MachineAddresses{{Type: infrav1.MachineHostName, Address: h.Name}}
	case claim == nil && hostphase.Phase(h) == infrav1.HostDeprovisioning:
		if err := env.Client.Delete(ctx, node); err != nil && !apierrors.IsNotFound(err) {
			return
		}
		h.Status.Provisioning = nil
		h.Status.ProviderID, h.Status.NodeName = "", ""
	default:
		return
	}
	h.Status.AgentObservedGeneration = h.Generation
	_ = env.Client.Status().Update(ctx, h)
}

// runningMachines is how many Machines the cluster has, and how many of
// them are Running, as stored.
func runningMachines(t *testing.T, ns, cluster string) (all, running int) {
	t.Helper()
	l, err := machines(ns, cluster)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range l.Items {
		if m.Status.Phase == string(clusterv1.MachinePhaseRunning) {
			running++
		}
	}
	return len(l.Items), running
}

// create --wait and scale --wait, up and down, return once Cluster API's
// real reconcilers have made the Machines asked for Running (their Nodes
// registered) and removed the ones asked away: what they print and what is
// stored when they return agree.
func TestCreateAndScaleWait(t *testing.T) {
	ns := newNamespace(t, "wait")
	// The workload cluster is this API server: its kubeconfig comes first,
	// so Cluster API never makes one for the unreachable endpoint.
	wkc := capikubeconfig.FromEnvTestConfig(env.Config, &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "wait", Namespace: ns}})
	if err := env.Client.Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "wait-kubeconfig", Labels: map[string]string{clusterv1.ClusterNameLabel: "wait"}},
		Type:       clusterv1.ClusterSecretType, Data: map[string][]byte{"value": wkc},
	}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		h := hostFixture(t, ns, fmt.Sprintf("wait-%d", i), nil, nil, true)
		p := client.MergeFrom(h.DeepCopy())
		h.Labels = map[string]string{"site": "wait"}
		if err := env.Client.Patch(context.Background(), h, p); err != nil {
			t.Fatal(err)
		}
	}
	agentsOf(t, ns)

	out, stderr, err := fleet(t, "create", "cluster", "wait", "-n", ns, "--kubernetes-version", "v1.36.3", "--control-plane=machines",
		"--worker-machines", "1", "--host-selector", "site=wait", "--health-check=false", "--wait", "--timeout", "3m")
	if err != nil || !strings.HasSuffix(out, "machines: 2/2 Running (2 Running)\ncluster wait: every machine Running\n") {
		t.Fatalf("create --wait: %v\n%s%s", err, out, stderr)
	}
	if all, running := runningMachines(t, ns, "wait"); all != 2 || running != 2 {
		t.Fatalf("create --wait returned with %d machines, %d Running", all, running)
	}

	out, stderr, err = fleet(t, "scale", "cluster", "wait", "-n", ns, "--worker-machines", "2", "--wait", "--timeout", "3m")
	if err != nil || !strings.HasPrefix(out, "machinedeployment/wait-md-0 scaled to 2\nmachines: 2/3 Running") ||
		!strings.HasSuffix(out, "machines: 3/3 Running (3 Running)\ncluster wait: 1 control-plane and 2 worker machine(s) Running\n") {
		t.Fatalf("scale up --wait: %v\n%s%s", err, out, stderr)
	}
	if all, running := runningMachines(t, ns, "wait"); all != 3 || running != 3 {
		t.Fatalf("scale up --wait returned with %d machines, %d Running", all, running)
	}

	out, stderr, err = fleet(t, "scale", "cluster", "wait", "-n", ns, "--worker-machines", "0", "--wait", "--timeout", "3m")
	if err != nil || !strings.HasSuffix(out, "machines: 1/1 Running (1 Running)\ncluster wait: 1 control-plane and 0 worker machine(s) Running\n") {
		t.Fatalf("scale down --wait: %v\n%s%s", err, out, stderr)
	}
	if all, running := runningMachines(t, ns, "wait"); all != 1 || running != 1 {
		t.Fatalf("scale down --wait returned with %d machines, %d Running", all, running)
	}

	// A wait that cannot end gives up at --timeout, saying where it stood.
	_, _, err = fleet(t, "scale", "cluster", "wait", "-n", ns, "--worker-machines", "4", "--wait", "--timeout", "2s")
	if err == nil || !strings.HasPrefix(err.Error(), "timed out waiting for cluster wait (--timeout 2s): machines: ") {
		t.Errorf("scale to more machines than hosts: %v", err)
	}

	// Both halves asked of a cluster without a KubeadmControlPlane: refused
	// before either is scaled.
	md := &clusterv1.MachineDeployment{}
	key := client.ObjectKey{Namespace: ns, Name: "wait-md-0"}
	if err := env.Client.Get(context.Background(), key, md); err != nil {
		t.Fatal(err)
	}
	before := *md.Spec.Replicas
	_, _, err = fleet(t, "scale", "cluster", "wait", "-n", ns, "--worker-machines", "1", "--control-plane-machines", "3")
	if err == nil || !strings.Contains(err.Error(), "has no KubeadmControlPlane") {
		t.Errorf("scale of a control plane of plain Machines: %v", err)
	}
	if err := env.Client.Get(context.Background(), key, md); err != nil {
		t.Fatal(err)
	}
	if *md.Spec.Replicas != before {
		t.Errorf("the refused scale still scaled the workers from %d to %d", before, *md.Spec.Replicas)
	}
}
