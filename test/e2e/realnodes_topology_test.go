package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/internal/testkit/testhost"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/hub/inventory"
)

// rolloutLabel is the Node label the per-pool variable change gives the
// workers: the new Node carries it, proof that a new machine ran.
const rolloutLabel = "fleet.test/rollout"

// A site from the ClusterClass fleet ships, made with `kubectl fleet create
// --class edge` on two real hosts (a KubeadmControlPlane and one worker,
// the test hosts' settings as class variables): Available with both Nodes
// Ready. A variable change for the worker pool rolls its machine over on
// an exact-size site — maxSurge 0: the old machine goes first and frees the
// only worker host, which the new machine takes. Scaling the pool to 0
// through the topology resets the host; deleting the cluster resets both.
func TestRealNodesClusterClass(t *testing.T) {
	ctx := context.Background()
	c := hub.Client
	ns, cpHost, wHost := startTwoRealHosts(t, "tp", "10.97.2")
	cpName, wName := cpHost.Name, wHost.Name

	fleet := newFleetCLI(t)
	out := fleet.run(t, "create", "cluster", clusterName, "-n", ns, "--class", "edge", "--kubernetes-version", "v1.36.3",
		"--worker-machines", "1", "--variables", filepath.Join("..", "..", "docs", "templates", "topology-cgroupv1-test-hosts.yaml"),
		"--variable", "controlPlaneHostSelector={matchLabels: {role: cp}}", "--variable", "workerHostSelector={matchLabels: {role: worker}}")
	if !strings.Contains(out, "clusterclass/edge installed") || !strings.Contains(out, "cluster/"+clusterName+" applied (ClusterClass edge)") {
		t.Fatalf("create --class edge:\n%s", out)
	}
	realEventually(t, "the topology Cluster Available on real nodes", func() error { return topologyAvailable(ctx, c, ns) })
	kc := fleetKubeconfig(t, ns)
	for _, name := range []string{cpName, wName} {
		realEventually(t, "Node "+name+" Ready with fleet's providerID", func() error {
			return nodeReady(t, kc, name, inventory.ProviderIDOf(ns, name))
		})
	}
	if out := fleet.run(t, "describe", "cluster", clusterName, "-n", ns); !strings.Contains(out, "class edge v1.36.3") || !strings.Contains(out, "topology md-0") {
		t.Errorf("describe:\n%s", out)
	}

	// A variable of the worker pool only: its templates are rotated, the
	// control plane is left alone.
	cpMachine := machineOnHost(ctx, t, c, ns, cpName)
	first := machineOnHost(ctx, t, c, ns, wName)
	cluster := &clusterv1.Cluster{}
	must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: clusterName}, cluster))
	patch := client.MergeFrom(cluster.DeepCopy())
	pool := &cluster.Spec.Topology.Workers.MachineDeployments[0]
	pool.Variables.Overrides = append(pool.Variables.Overrides, clusterv1.ClusterVariable{Name: "kubeletExtraArgs",
		Value: apiextensionsv1.JSON{Raw: []byte(`[{"name":"node-labels","value":"` + rolloutLabel + `=2"}]`)}})
	must(t, c.Patch(ctx, cluster, patch))
	realEventually(t, "the worker rolled over onto the same host, its new Node labelled", func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(first), &clusterv1.Machine{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the first worker Machine %s is still there (%v)", first.Name, err)
		}
		m, err := liveMachineOnHost(ctx, c, ns, wName)
		if err != nil {
			return err
		}
		if m == nil || m.Name == first.Name || !m.Status.NodeRef.IsDefined() {
			return fmt.Errorf("no new worker Machine with a Node on %s yet", wName)
		}
		if got := kubectl(t, kc, "get", "node", wName, "-o", "jsonpath={.metadata.labels.fleet\\.test/rollout}"); got != "2" {
			return fmt.Errorf("Node %s label %s=%q", wName, rolloutLabel, got)
		}
		if err := nodeReady(t, kc, wName, inventory.ProviderIDOf(ns, wName)); err != nil {
			return err
		}
		return topologyAvailable(ctx, c, ns)
	})
	if m, err := liveMachineOnHost(ctx, c, ns, cpName); err != nil || m == nil || m.Name != cpMachine.Name {
		t.Errorf("the control-plane Machine changed with a worker pool's variable: was %s", cpMachine.Name)
	}

	// Scale the pool to 0 through the topology: the host is reset and free.
	if out := fleet.run(t, "scale", "cluster", clusterName, "-n", ns, "--worker-machines", "0"); !strings.Contains(out, "workers md-0 to 0") {
		t.Fatalf("scale:\n%s", out)
	}
	realEventually(t, "the worker host reset and Available", func() error {
		if err := hostPhase(ctx, c, ns, wName, infrav1.HostAvailable); err != nil {
			return err
		}
		return hostClean(wHost)
	})

	if out := fleet.run(t, "delete", "cluster", clusterName, "-n", ns, "--wait", "--timeout", realNodesWait.String()); !strings.Contains(out, "is gone") {
		t.Fatalf("delete:\n%s", out)
	}
	realEventually(t, "every host reset and Available after the cluster is gone", func() error {
		for _, h := range []*testhost.Host{cpHost, wHost} {
			if err := hostPhase(ctx, c, ns, h.Name, infrav1.HostAvailable); err != nil {
				return err
			}
			if err := hostClean(h); err != nil {
				return err
			}
		}
		return nil
	})
}

// topologyAvailable checks the Cluster's Available condition, which for a
// topology Cluster also needs the topology reconciled.
func topologyAvailable(ctx context.Context, c client.Client, ns string) error {
	cluster := &clusterv1.Cluster{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: clusterName}, cluster); err != nil {
		return err
	}
	if !conditions.IsTrue(cluster, clusterv1.ClusterAvailableCondition) {
		return fmt.Errorf("Cluster Available: %+v", conditions.Get(cluster, clusterv1.ClusterAvailableCondition))
	}
	return nil
}

// liveMachineOnHost is the Machine on host not being deleted, or nil.
func liveMachineOnHost(ctx context.Context, c client.Client, ns, host string) (*clusterv1.Machine, error) {
	machines := &clusterv1.MachineList{}
	if err := c.List(ctx, machines, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	for i := range machines.Items {
		if m := &machines.Items[i]; m.Spec.ProviderID == inventory.ProviderIDOf(ns, host) && m.DeletionTimestamp.IsZero() {
			return m, nil
		}
	}
	return nil, nil
}
