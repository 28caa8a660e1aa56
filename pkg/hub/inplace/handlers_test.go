package inplace

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/fleetscheme"
)

const ns = "site"

// site is a MachineSet "ms" of one Machine per host, each host reporting
// what status sets.
func site(status ...infrav1.EdgeHostStatus) client.Client {
	var objs []client.Object
	for i, st := range status {
		name := string(rune('a' + i))
		objs = append(objs,
			&clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m-" + name,
				Labels: map[string]string{clusterv1.MachineSetNameLabel: "ms"}},
				Spec: clusterv1.MachineSpec{Version: "v1.35.4", InfrastructureRef: clusterv1.ContractVersionedObjectReference{
					APIGroup: infrav1.GroupVersion.Group, Kind: "EdgeMachine", Name: "em-" + name}}},
			&infrav1.EdgeMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "em-" + name},
				Status: infrav1.EdgeMachineStatus{HostRef: "host-" + name}},
			&infrav1.EdgeHost{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "host-" + name}, Status: st})
	}
	return fake.NewClientBuilder().WithScheme(fleetscheme.New()).WithObjects(objs...).Build()
}

func ready(running string, staged ...string) infrav1.EdgeHostStatus {
	return infrav1.EdgeHostStatus{KubernetesVersion: running, Facts: infrav1.HostFacts{KubernetesVersions: staged}}
}

func machineSet(version string) clusterv1.MachineSet {
	ms := clusterv1.MachineSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ms"}}
	ms.Spec.Template.Spec.Version = version
	return ms
}

func TestCanUpdateMachineSetClaimsOnlyAVersionEveryHostCanTake(t *testing.T) {
	failed := ready("v1.35.4", "v1.36.3")
	failed.Upgrade = &infrav1.HostUpgradeStatus{From: "v1.35.4", To: "v1.36.3", State: infrav1.UpgradeRolledBack, Step: "restarting the kubelet"}
	for _, tc := range []struct {
		name     string
		hosts    []infrav1.EdgeHostStatus
		from, to string
		patched  bool
		message  string
	}{
		{"every host has it staged", []infrav1.EdgeHostStatus{ready("v1.35.4", "v1.36.3"), ready("v1.35.4", "v1.36.3")}, "v1.35.4", "v1.36.3", true,
			"the hosts' agents upgrade to v1.36.3 in place"},
		{"one host lacks it", []infrav1.EdgeHostStatus{ready("v1.35.4", "v1.36.3"), ready("v1.35.4")}, "v1.35.4", "v1.36.3", false,
			"not in place: machine m-b: EdgeHost host-b cannot get v1.36.3: stage it under /opt/fleet/kubernetes/v1.36.3 on the host (staged: none)"},
		{"an agent too old to report its version", []infrav1.EdgeHostStatus{{}}, "v1.35.4", "v1.36.3", false,
			"not in place: machine m-a: the agent of EdgeHost host-a reports no Kubernetes version"},
		{"a skipped minor version", []infrav1.EdgeHostStatus{ready("v1.35.4", "v1.37.0")}, "v1.35.4", "v1.37.0", false,
			"not in place: machine m-a: EdgeHost host-a runs v1.35.4: v1.37.0 skips a minor version"},
		{"a downgrade", []infrav1.EdgeHostStatus{ready("v1.35.4", "v1.34.1")}, "v1.35.4", "v1.34.1", false,
			"would be a downgrade"},
		{"an order that failed before", []infrav1.EdgeHostStatus{failed}, "v1.35.4", "v1.36.3", false,
			`not in place: machine m-a: the upgrade of EdgeHost host-a to v1.36.3 failed at step "restarting the kubelet"`},
		{"no version change", []infrav1.EdgeHostStatus{ready("v1.35.4", "v1.36.3")}, "v1.35.4", "v1.35.4", false,
			"fleet changes only the Kubernetes version in place"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &Handlers{Client: site(tc.hosts...)}
			resp := &runtimehooksv1.CanUpdateMachineSetResponse{}
			h.CanUpdateMachineSet(context.Background(), &runtimehooksv1.CanUpdateMachineSetRequest{
				Current: runtimehooksv1.CanUpdateMachineSetRequestObjects{MachineSet: machineSet(tc.from)},
				Desired: runtimehooksv1.CanUpdateMachineSetRequestObjects{MachineSet: machineSet(tc.to)},
			}, resp)
			if resp.Status != runtimehooksv1.ResponseStatusSuccess || !strings.Contains(resp.Message, tc.message) {
				t.Errorf("status %s message %q, want Success and %q", resp.Status, resp.Message, tc.message)
			}
			want := ""
			if tc.patched {
				want = `[{"op":"add","path":"/spec/template/spec/version","value":"` + tc.to + `"}]`
			}
			if got := string(resp.MachineSetPatch.Patch); got != want {
				t.Errorf("patch %s, want %q", got, want)
			}
		})
	}
}

func TestUpdateMachineReportsTheHostsProgress(t *testing.T) {
	machine := func(version string) runtimehooksv1.UpdateMachineRequest {
		return runtimehooksv1.UpdateMachineRequest{Desired: runtimehooksv1.UpdateMachineRequestObjects{Machine: clusterv1.Machine{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m-a"},
			Spec: clusterv1.MachineSpec{Version: version, InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: infrav1.GroupVersion.Group, Kind: "EdgeMachine", Name: "em-a"}}}}}
	}
	running := ready("v1.35.4", "v1.36.3")
	running.Upgrade = &infrav1.HostUpgradeStatus{From: "v1.35.4", To: "v1.36.3", State: infrav1.UpgradeRunning, Step: "kubeadm upgrade node"}
	failed := ready("v1.35.4", "v1.36.3")
	failed.Upgrade = &infrav1.HostUpgradeStatus{From: "v1.35.4", To: "v1.36.3", State: infrav1.UpgradeRolledBack,
		Step: "restarting the kubelet", Message: "the kubelet did not start"}
	for _, tc := range []struct {
		name    string
		host    infrav1.EdgeHostStatus
		status  runtimehooksv1.ResponseStatus
		retry   int32
		message string
	}{
		{"ordered, not started", ready("v1.35.4", "v1.36.3"), runtimehooksv1.ResponseStatusSuccess, pollSeconds,
			"EdgeHost host-a is ordered to upgrade from v1.35.4 to v1.36.3; waiting for its agent"},
		{"at a step", running, runtimehooksv1.ResponseStatusSuccess, pollSeconds,
			"EdgeHost host-a is upgrading from v1.35.4 to v1.36.3: kubeadm upgrade node"},
		{"done", ready("v1.36.3"), runtimehooksv1.ResponseStatusSuccess, 0, "EdgeHost host-a runs v1.36.3"},
		{"failed and rolled back", failed, runtimehooksv1.ResponseStatusFailure, 0,
			`the upgrade of EdgeHost host-a to v1.36.3 failed at step "restarting the kubelet" (the kubelet did not start) and the host runs v1.35.4 again`},
		{"not staged", ready("v1.35.4"), runtimehooksv1.ResponseStatusFailure, 0, "EdgeHost host-a cannot get v1.36.3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &Handlers{Client: site(tc.host)}
			req, resp := machine("v1.36.3"), &runtimehooksv1.UpdateMachineResponse{}
			h.UpdateMachine(context.Background(), &req, resp)
			if resp.Status != tc.status || resp.RetryAfterSeconds != tc.retry || !strings.Contains(resp.Message, tc.message) {
				t.Errorf("got %s retry %d %q, want %s retry %d %q", resp.Status, resp.RetryAfterSeconds, resp.Message, tc.status, tc.retry, tc.message)
			}
		})
	}
	h := &Handlers{Client: site()}
	req, resp := machine("v1.36.3"), &runtimehooksv1.UpdateMachineResponse{}
	h.UpdateMachine(context.Background(), &req, resp)
	if resp.Status != runtimehooksv1.ResponseStatusFailure || !strings.Contains(resp.Message, "machine m-a: reading EdgeMachine em-a") {
		t.Errorf("a Machine without its EdgeMachine: %s %q", resp.Status, resp.Message)
	}
}

// KubeadmControlPlane compares a Machine's whole KubeadmConfig with the
// desired one, and the gate it sets by version alone differs across
// v1.36: the answer patches the gates to the desired ones, and only when
// nothing else of them changed.
func TestCanUpdateMachineFollowsTheVersionsKubeadmGates(t *testing.T) {
	config := func(gates string) runtime.RawExtension {
		spec := `{"clusterConfiguration":{"apiServer":{"certSANs":["a"]}}}`
		if gates != "" {
			spec = `{"clusterConfiguration":{"apiServer":{"certSANs":["a"]},"featureGates":` + gates + `}}`
		}
		return runtime.RawExtension{Raw: []byte(`{"apiVersion":"bootstrap.cluster.x-k8s.io/v1beta2","kind":"KubeadmConfig","metadata":{"name":"m-a"},"spec":` + spec + `}`)}
	}
	for _, tc := range []struct {
		name, current, desired, patch string
	}{
		{"the gate dropped at v1.36", `{"ControlPlaneKubeletLocalMode":true}`, "", `[{"op":"remove","path":"/spec/clusterConfiguration/featureGates"}]`},
		{"the gate dropped, another kept", `{"ControlPlaneKubeletLocalMode":true,"X":true}`, `{"X":true}`, `[{"op":"add","path":"/spec/clusterConfiguration/featureGates","value":{"X":true}}]`},
		{"the same gates", `{"X":true}`, `{"X":true}`, ""},
		{"another gate changed", `{"ControlPlaneKubeletLocalMode":true,"X":true}`, `{"X":false}`, ""},
		{"another gate added", "", `{"X":true}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &Handlers{Client: site(ready("v1.35.4", "v1.36.3"))}
			cur := clusterv1.Machine{}
			cur.Namespace, cur.Name, cur.Spec.Version = ns, "m-a", "v1.35.4"
			cur.Spec.InfrastructureRef = clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "EdgeMachine", Name: "em-a"}
			want := *cur.DeepCopy()
			want.Spec.Version = "v1.36.3"
			resp := &runtimehooksv1.CanUpdateMachineResponse{}
			h.CanUpdateMachine(context.Background(), &runtimehooksv1.CanUpdateMachineRequest{
				Current: runtimehooksv1.CanUpdateMachineRequestObjects{Machine: cur, BootstrapConfig: config(tc.current)},
				Desired: runtimehooksv1.CanUpdateMachineRequestObjects{Machine: want, BootstrapConfig: config(tc.desired)},
			}, resp)
			if got := string(resp.MachinePatch.Patch); got != `[{"op":"add","path":"/spec/version","value":"v1.36.3"}]` {
				t.Errorf("machine patch %s (message %q)", got, resp.Message)
			}
			if got := string(resp.BootstrapConfigPatch.Patch); got != tc.patch {
				t.Errorf("bootstrap config patch %s, want %q", got, tc.patch)
			}
		})
	}
}
