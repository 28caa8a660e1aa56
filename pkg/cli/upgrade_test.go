package cli_test

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// upgrade cluster refuses, naming the machine and changing nothing, what
// it cannot do; then orders the control-plane Machine, and describe shows
// the upgrade's progress.
func TestUpgradeClusterChecksThenOrders(t *testing.T) {
	ctx := context.Background()
	ns := "upgrade-cluster"
	fleetOf(t, ns, 0)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "store-cp-0"}}
	must(setSpec(m, func() { m.Spec.Version = "v1.35.4" }))
	version := func() string {
		t.Helper()
		got := &clusterv1.Machine{}
		must(env.Client.Get(ctx, client.ObjectKeyFromObject(m), got))
		return got.Spec.Version
	}
	refused := func(version, want string) {
		t.Helper()
		out, stderr, err := fleet(t, "upgrade", "cluster", "store", "-n", ns, "--kubernetes-version", version)
		if err == nil || !strings.Contains(err.Error()+stderr, want) || !strings.Contains(err.Error()+stderr, "nothing was changed") {
			t.Errorf("upgrade to %s: %v\n%s%s\nwant %q and \"nothing was changed\"", version, err, out, stderr, want)
		}
	}

	refused("v1.36.3", "machine store-cp-0: the agent of EdgeHost host-01 reports no Kubernetes version")
	host := &infrav1.EdgeHost{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "host-01"}}
	must(setStatus(host, func() {
		host.Status.KubernetesVersion, host.Status.Facts.KubernetesVersions = "v1.35.4", []string{"v1.36.3"}
	}))
	refused("v1.36.4", "machine store-cp-0: EdgeHost host-01 cannot get v1.36.4: stage it under /opt/fleet/kubernetes/v1.36.4 on the host (staged: v1.36.3)")
	// A host fetching the version (an EdgeKubernetesRelease) is waited for
	// with --wait, and named without.
	must(setStatus(host, func() {
		host.Status.Staging = []infrav1.HostStagingStatus{{Version: "v1.36.4", State: infrav1.StagingDownloading, Bytes: 40 << 20, TotalBytes: 100 << 20}}
	}))
	refused("v1.36.4", "machine store-cp-0: EdgeHost host-01 is still fetching v1.36.4 (40% of 100 MiB); wait until it is staged")
	out, stderr, err := fleet(t, "upgrade", "cluster", "store", "-n", ns, "--kubernetes-version", "v1.36.4", "--wait", "--timeout", "2s")
	if err == nil || !strings.Contains(out, "hosts: 1 of 1 still fetching v1.36.4 (host-01 40%)") {
		t.Errorf("upgrade --wait while the host fetches the version: %v\n%s%s", err, out, stderr)
	}
	must(setStatus(host, func() { host.Status.Staging = nil }))
	refused("v1.37.0", "machine store-cp-0 runs v1.35.4: v1.37.0 skips a minor version")
	refused("v1.34.9", "machine store-cp-0 runs v1.35.4: v1.34.9 would be a downgrade")
	if _, _, err := fleet(t, "upgrade", "cluster", "store", "-n", ns, "--kubernetes-version", "1.36"); err == nil || !strings.Contains(err.Error(), "want vMAJOR.MINOR.PATCH") {
		t.Errorf("a bad version: %v", err)
	}
	if v := version(); v != "v1.35.4" {
		t.Fatalf("a refused upgrade set the Machine's version to %s", v)
	}

	out, stderr, err = fleet(t, "upgrade", "cluster", "store", "-n", ns, "--kubernetes-version", "v1.36.3")
	if err != nil || !strings.Contains(out, "machine/store-cp-0: v1.35.4 → v1.36.3 ordered on EdgeHost host-01") {
		t.Fatalf("upgrade: %v\n%s%s", err, out, stderr)
	}
	if v := version(); v != "v1.36.3" {
		t.Errorf("the Machine's version is %s after the upgrade was ordered", v)
	}
	em := &infrav1.EdgeMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "store-cp-0"}}
	must(setStatus(em, func() {
		em.Status.Conditions = append(em.Status.Conditions, metav1.Condition{Type: infrav1.KubernetesVersionCondition, Status: metav1.ConditionFalse,
			Reason: infrav1.UpgradingReason, Message: "EdgeHost host-01 is upgrading from v1.35.4 to v1.36.3: restarting the kubelet",
			LastTransitionTime: metav1.NewTime(fixedNow)})
	}))
	if out, _, err := fleet(t, "describe", "cluster", "store", "-n", ns); err != nil || !strings.Contains(out, "EdgeHost host-01 is upgrading from v1.35.4 to v1.36.3: restarting the kubelet") {
		t.Errorf("describe during the upgrade: %v\n%s", err, out)
	}

	// A failed upgrade is not ordered again by repeating it; ordering the
	// version the host still runs cancels it.
	must(setStatus(host, func() {
		host.Status.Upgrade = &infrav1.HostUpgradeStatus{From: "v1.35.4", To: "v1.36.3", State: infrav1.UpgradeRolledBack, Step: "restarting the kubelet"}
	}))
	refused("v1.36.3", `machine store-cp-0: the upgrade of EdgeHost host-01 to v1.36.3 failed at step "restarting the kubelet" and is not retried by itself: once the host is fixed, order v1.35.4 (cancels it), then v1.36.3 again`)
	if out, stderr, err := fleet(t, "upgrade", "cluster", "store", "-n", ns, "--kubernetes-version", "v1.35.4"); err != nil ||
		!strings.Contains(out, "machine/store-cp-0: v1.36.3 → v1.35.4 ordered on EdgeHost host-01") || version() != "v1.35.4" {
		t.Errorf("cancelling a failed upgrade: %v\n%s%s", err, out, stderr)
	}

}

// Workers follow the control plane: their hosts are checked with the
// rest before anything changes, and their MachineDeployment is ordered
// only once the control-plane hosts run the version.
func TestUpgradeClusterOrdersWorkersAfterTheControlPlane(t *testing.T) {
	ctx := context.Background()
	ns := "upgrade-workers"
	fleetOf(t, ns, 1)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"store-cp-0", "store-md-0-w00"} {
		m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		must(setSpec(m, func() { m.Spec.Version = "v1.35.4" }))
	}
	md := &clusterv1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "store-md-0"}}
	must(setSpec(md, func() { md.Spec.Template.Spec.Version = "v1.35.4" }))
	report := func(host, running string, staged ...string) {
		h := &infrav1.EdgeHost{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: host}}
		must(setStatus(h, func() { h.Status.KubernetesVersion, h.Status.Facts.KubernetesVersions = running, staged }))
	}
	versions := func() (cp, worker string) {
		t.Helper()
		m := &clusterv1.Machine{}
		must(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "store-cp-0"}, m))
		must(env.Client.Get(ctx, client.ObjectKeyFromObject(md), md))
		return m.Spec.Version, md.Spec.Template.Spec.Version
	}
	upgrade := func() (string, error) {
		out, stderr, err := fleet(t, "upgrade", "cluster", "store", "-n", ns, "--kubernetes-version", "v1.36.3")
		return out + stderr, err
	}

	report("host-01", "v1.35.4", "v1.36.3")
	report("host-02", "v1.35.4")
	if out, err := upgrade(); err == nil || !strings.Contains(err.Error(),
		"machine store-md-0-w00: EdgeHost host-02 cannot get v1.36.3: stage it under /opt/fleet/kubernetes/v1.36.3 on the host (staged: none)") {
		t.Fatalf("a worker host without the version: %v\n%s", err, out)
	}
	if cp, w := versions(); cp != "v1.35.4" || w != "v1.35.4" {
		t.Fatalf("a refused upgrade changed the versions to %s and %s", cp, w)
	}

	report("host-02", "v1.35.4", "v1.36.3")
	out, err := upgrade()
	if err != nil || !strings.Contains(out, "machine/store-cp-0: v1.35.4 → v1.36.3 ordered on EdgeHost host-01") ||
		!strings.Contains(out, "workers: machinedeployment(s) store-md-0 follow once the control plane runs v1.36.3") {
		t.Fatalf("upgrade: %v\n%s", err, out)
	}
	if cp, w := versions(); cp != "v1.36.3" || w != "v1.35.4" {
		t.Fatalf("after the first run: control plane %s, workers %s; want v1.36.3 and v1.35.4", cp, w)
	}

	report("host-01", "v1.36.3")
	out, err = upgrade()
	if err != nil || strings.Contains(out, "machine/store-cp-0") ||
		!strings.Contains(out, "machinedeployment/store-md-0: v1.35.4 → v1.36.3 ordered; its Machines are updated in place") ||
		!strings.Contains(out, "note: machinedeployment/store-md-0 rolls out with maxSurge 1") {
		t.Fatalf("upgrade once the control plane runs v1.36.3: %v\n%s", err, out)
	}
	if cp, w := versions(); cp != "v1.36.3" || w != "v1.36.3" {
		t.Fatalf("after the second run: control plane %s, workers %s", cp, w)
	}
}

// A KubeadmControlPlane of one Machine rolls out onto a spare host:
// refused, naming what is missing, while no free host its template
// selects can run the version; ordered once one can. One of three with
// maxSurge 0 is updated in place: its hosts are judged as plain Machines'.
func TestUpgradeClusterWithAKubeadmControlPlane(t *testing.T) {
	ctx := context.Background()
	ns := "upgrade-kcp"
	fleetOf(t, ns, 0)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	lbl := map[string]string{clusterv1.ClusterNameLabel: "store"}
	must(env.Client.Create(ctx, &infrav1.EdgeMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "store-control-plane", Namespace: ns},
		Spec: infrav1.EdgeMachineTemplateSpec{Template: infrav1.EdgeMachineTemplateResource{Spec: infrav1.EdgeMachineSpec{
			HostSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "control-plane"}}}}}}))
	kcp := &controlplanev1.KubeadmControlPlane{ObjectMeta: metav1.ObjectMeta{Name: "store-control-plane", Namespace: ns, Labels: lbl},
		Spec: controlplanev1.KubeadmControlPlaneSpec{Replicas: ptr.To(int32(1)), Version: "v1.35.4",
			MachineTemplate: controlplanev1.KubeadmControlPlaneMachineTemplate{Spec: controlplanev1.KubeadmControlPlaneMachineTemplateSpec{
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "EdgeMachineTemplate", Name: "store-control-plane"}}}}}
	must(env.Client.Create(ctx, kcp))
	cl := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "store"}}
	must(setSpec(cl, func() {
		cl.Spec.ControlPlaneRef = clusterv1.ContractVersionedObjectReference{APIGroup: controlplanev1.GroupVersion.Group,
			Kind: "KubeadmControlPlane", Name: "store-control-plane"}
	}))
	// host-01 runs the control plane's Machine.
	h1 := &infrav1.EdgeHost{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "host-01"}}
	must(setSpec(h1, func() {
		h1.Labels = map[string]string{"role": "control-plane"}
		h1.Spec.ClaimRef = &infrav1.HostClaimReference{Name: "store-cp-0", UID: "uid-cp-0"}
	}))
	must(setStatus(h1, func() {
		h1.Status.KubernetesVersion, h1.Status.Facts.KubernetesVersions = "v1.35.4", []string{"v1.35.4", "v1.36.3"}
	}))
	version := func() string {
		t.Helper()
		got := &controlplanev1.KubeadmControlPlane{}
		must(env.Client.Get(ctx, client.ObjectKeyFromObject(kcp), got))
		return got.Spec.Version
	}
	upgrade := func() (string, error) {
		out, stderr, err := fleet(t, "upgrade", "cluster", "store", "-n", ns, "--kubernetes-version", "v1.36.3")
		return out + stderr, err
	}
	refused := func(want string) {
		t.Helper()
		out, err := upgrade()
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "nothing was changed") {
			t.Errorf("upgrade: %v\n%s\nwant %q and \"nothing was changed\"", err, out, want)
		}
		if v := version(); v != "v1.35.4" {
			t.Fatalf("a refused upgrade set the KubeadmControlPlane's version to %s", v)
		}
	}

	refused(`kubeadmcontrolplane store-control-plane replaces its 1 machine(s) one at a time, each on a spare host (Cluster API v1.14 updates a ` +
		`KubeadmControlPlane in place only with 3 or more replicas and maxSurge 0): it needs 1 free host(s) matching "role=control-plane" that can run v1.36.3, and there are 0`)
	spare := &infrav1.EdgeHost{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "spare-01", Labels: map[string]string{"role": "control-plane"}}}
	must(env.Client.Create(ctx, spare))
	refused(`kubeadmcontrolplane store-control-plane may put its new Machine on any free host matching "role=control-plane", and not all can run v1.36.3: ` +
		`EdgeHost spare-01 cannot get v1.36.3`)
	must(setStatus(spare, func() { spare.Status.Facts.KubernetesVersions = []string{"v1.36.3"} }))
	if _, _, err := fleet(t, "upgrade", "cluster", "store", "-n", ns, "--kubernetes-version", "v1.37.0"); err == nil ||
		!strings.Contains(err.Error(), "kubeadmcontrolplane store-control-plane runs v1.35.4: v1.37.0 skips a minor version") {
		t.Errorf("a skipped minor version: %v", err)
	}
	out, err := upgrade()
	if err != nil || !strings.Contains(out, "kubeadmcontrolplane/store-control-plane: v1.35.4 → v1.36.3 ordered; Cluster API replaces its 1 machine(s) one at a time on a spare host") {
		t.Fatalf("upgrade with a spare host: %v\n%s", err, out)
	}
	if v := version(); v != "v1.36.3" {
		t.Fatalf("the KubeadmControlPlane's version is %s after the upgrade was ordered", v)
	}

	// Three replicas with maxSurge 0: in place, so each host is judged.
	must(setSpec(kcp, func() {
		kcp.Spec.Version, kcp.Spec.Replicas = "v1.35.4", ptr.To(int32(3))
		kcp.Spec.Rollout.Strategy = controlplanev1.KubeadmControlPlaneRolloutStrategy{Type: controlplanev1.RollingUpdateStrategyType,
			RollingUpdate: controlplanev1.KubeadmControlPlaneRolloutStrategyRollingUpdate{MaxSurge: ptr.To(intstr.FromInt32(0))}}
	}))
	must(setStatus(h1, func() { h1.Status.Facts.KubernetesVersions = []string{"v1.35.4"} }))
	refused("machine store-cp-0: EdgeHost host-01 cannot get v1.36.3")
	must(setStatus(h1, func() { h1.Status.Facts.KubernetesVersions = []string{"v1.35.4", "v1.36.3"} }))
	out, err = upgrade()
	if err != nil || !strings.Contains(out, "kubeadmcontrolplane/store-control-plane: v1.35.4 → v1.36.3 ordered; Cluster API updates its machines one at a time, in place through the hub's hooks where they allow") {
		t.Fatalf("upgrade of three in place: %v\n%s", err, out)
	}
}
