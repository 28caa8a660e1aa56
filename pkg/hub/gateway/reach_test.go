package gateway_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/hub/inventory"
)

// Where a cluster's endpoint name resolves at the site, from the hub's
// cache: the first control-plane host resolves it to itself (its kubeadm
// init needs the name first); a control-plane host that joins resolves it
// to the provisioned ones until its own API server runs; workers to the
// provisioned control-plane hosts; edge reach disabled keeps the names but
// allows no tunnels.
func TestReachFollowsTheControlPlane(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	h := startHub(t, hubOptions{ns: ns})
	c := env.Client

	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "store", Namespace: ns},
		Spec: clusterv1.ClusterSpec{
			InfrastructureRef:    clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "EdgeCluster", Name: "store"},
			ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "store." + ns + ".fleet.internal", Port: 6443},
		}}
	if err := c.Create(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	// A host claimed by a machine of the cluster (the EdgeMachine exists,
	// so the hub keeps the claim), with an address, provisioned or not.
	claim := func(name, ip string, controlPlane, provisioned bool) {
		t.Helper()
		em := &infrav1.EdgeMachine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Labels: map[string]string{clusterv1.ClusterNameLabel: "store"}}}
		if err := c.Create(ctx, em); err != nil {
			t.Fatal(err)
		}
		host := &infrav1.EdgeHost{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: infrav1.EdgeHostSpec{ClaimRef: &infrav1.HostClaimReference{Name: name, UID: em.UID}}}
		inventory.SetMembershipLabels(host, name, "store", controlPlane)
		if err := c.Create(ctx, host); err != nil {
			t.Fatal(err)
		}
		host.Status.Addresses = infrav1.MachineAddresses{{Type: infrav1.MachineInternalIP, Address: ip}}
		if provisioned {
			host.Status.Provisioning = &infrav1.HostProvisioningStatus{ClaimUID: em.UID, State: infrav1.ProvisioningSucceeded}
		}
		if err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			cur := &infrav1.EdgeHost{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(host), cur); err != nil {
				return err
			}
			cur.Status.Addresses, cur.Status.Provisioning = host.Status.Addresses, host.Status.Provisioning
			return c.Status().Update(ctx, cur)
		}); err != nil {
			t.Fatal(err)
		}
	}
	reachOf := func(name string, want ...string) func() error {
		return func() error {
			host := &infrav1.EdgeHost{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, host); err != nil {
				return err
			}
			r := h.srv.ReachFor(ctx, host)
			if r == nil {
				return fmt.Errorf("%s: no reach", name)
			}
			if r.Endpoint != "store."+ns+".fleet.internal:6443" || !slices.Equal(r.Addresses, want) {
				return fmt.Errorf("%s: reach %+v, want addresses %v", name, r, want)
			}
			return nil
		}
	}

	claim("cp-a", "10.0.0.1", true, false)
	claim("w-a", "10.0.0.9", false, false)
	eventually(t, "the first control-plane host resolves to itself", reachOf("cp-a", "127.0.0.1"))
	eventually(t, "a worker waits for a provisioned control plane", reachOf("w-a"))

	// cp-a is up; cp-b joins.
	host := &infrav1.EdgeHost{}
	if err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "cp-a"}, host); err != nil {
			return err
		}
		host.Status.Provisioning = &infrav1.HostProvisioningStatus{ClaimUID: host.Spec.ClaimRef.UID, State: infrav1.ProvisioningSucceeded}
		return c.Status().Update(ctx, host)
	}); err != nil {
		t.Fatal(err)
	}
	claim("cp-b", "10.0.0.2", true, false)
	eventually(t, "a joining control-plane host resolves to the running one", reachOf("cp-b", "10.0.0.1"))
	eventually(t, "the running control-plane host keeps itself first", reachOf("cp-a", "127.0.0.1"))
	eventually(t, "the worker resolves to the running control plane", reachOf("w-a", "10.0.0.1"))

	// Edge reach disabled: names still resolve, no tunnels.
	p := client.MergeFrom(cluster.DeepCopy())
	cluster.Annotations = map[string]string{infrav1.EdgeReachAnnotation: "disabled"}
	if err := c.Patch(ctx, cluster, p); err != nil {
		t.Fatal(err)
	}
	eventually(t, "tunnels off with edge reach disabled", func() error {
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "w-a"}, host); err != nil {
			return err
		}
		if r := h.srv.ReachFor(ctx, host); r == nil || r.Tunnels || !slices.Equal(r.Addresses, []string{"10.0.0.1"}) {
			return fmt.Errorf("reach %+v", r)
		}
		return nil
	})
}
