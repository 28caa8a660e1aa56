package inplace

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/cluster-api/util/labels/format"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/pkg/contract/hostupgrade"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// pollSeconds is how soon Cluster API asks UpdateMachine again while a
// host upgrades; an upgrade takes minutes.
const pollSeconds = 10

// Handlers answer the hooks from the hub's objects.
type Handlers struct {
	Client client.Reader
}

// CanUpdateMachineSet claims a version change of a MachineSet's template
// when every host of the set's Machines can take it in place.
func (h *Handlers) CanUpdateMachineSet(ctx context.Context, req *runtimehooksv1.CanUpdateMachineSetRequest, resp *runtimehooksv1.CanUpdateMachineSetResponse) {
	resp.Status = runtimehooksv1.ResponseStatusSuccess
	cur, want := req.Current.MachineSet, req.Desired.MachineSet.Spec.Template.Spec.Version
	if cur.Spec.Template.Spec.Version == want || want == "" {
		resp.Message = "fleet changes only the Kubernetes version in place"
		return
	}
	machines := &clusterv1.MachineList{}
	if err := h.Client.List(ctx, machines, client.InNamespace(cur.Namespace),
		client.MatchingLabels{clusterv1.MachineSetNameLabel: format.MustFormatValue(cur.Name)}); err != nil {
		resp.Status, resp.Message = runtimehooksv1.ResponseStatusFailure, fmt.Sprintf("listing the Machines of MachineSet %s: %v", cur.Name, err)
		return
	}
	var refused []string
	for i := range machines.Items {
		if err := h.canUpgrade(ctx, &machines.Items[i], want); err != nil {
			refused = append(refused, err.Error())
		}
	}
	if len(refused) > 0 {
		sort.Strings(refused)
		resp.Message = fmt.Sprintf("not in place: %s", strings.Join(refused, "; "))
		return
	}
	resp.MachineSetPatch = versionPatch("/spec/template/spec/version", want)
	resp.Message = fmt.Sprintf("the hosts' agents upgrade to %s in place", want)
}

// CanUpdateMachine claims a version change of one Machine (a
// KubeadmControlPlane's) when its host can take it in place.
func (h *Handlers) CanUpdateMachine(ctx context.Context, req *runtimehooksv1.CanUpdateMachineRequest, resp *runtimehooksv1.CanUpdateMachineResponse) {
	resp.Status = runtimehooksv1.ResponseStatusSuccess
	cur, want := req.Current.Machine, req.Desired.Machine.Spec.Version
	if cur.Spec.Version == want || want == "" {
		resp.Message = "fleet changes only the Kubernetes version in place"
		return
	}
	if err := h.canUpgrade(ctx, &cur, want); err != nil {
		resp.Message = "not in place: " + err.Error()
		return
	}
	gates, err := versionGatesPatch(req.Current.BootstrapConfig, req.Desired.BootstrapConfig)
	if err != nil {
		resp.Message = "not in place: " + err.Error()
		return
	}
	resp.MachinePatch = versionPatch("/spec/version", want)
	resp.BootstrapConfigPatch = gates
	resp.Message = fmt.Sprintf("the host's agent upgrades to %s in place", want)
}

// versionGates are the kubeadm feature gates KubeadmControlPlane sets or
// drops by Kubernetes version alone (ControlPlaneKubeletLocalMode: on from
// v1.31, dropped at v1.36, where it graduated), so they differ between a
// Machine's KubeadmConfig and the desired one across such a version.
// `kubeadm upgrade` on the host takes the cluster's configuration as
// Cluster API writes it; nothing of the host needs changing for them.
var versionGates = map[string]bool{"ControlPlaneKubeletLocalMode": true}

// versionGatesPatch makes current's kubeadm feature gates desired's when
// they differ only in versionGates: KubeadmControlPlane compares the whole
// KubeadmConfig, and goes in place only if the patched current equals the
// desired. Any other difference gets no patch, and so a replacement.
func versionGatesPatch(current, desired runtime.RawExtension) (runtimehooksv1.Patch, error) {
	gates := func(raw runtime.RawExtension) (map[string]bool, error) {
		if len(raw.Raw) == 0 {
			return nil, nil
		}
		var c bootstrapv1.KubeadmConfig
		if err := json.Unmarshal(raw.Raw, &c); err != nil {
			return nil, fmt.Errorf("reading the KubeadmConfig: %w", err)
		}
		return c.Spec.ClusterConfiguration.FeatureGates, nil
	}
	cur, err := gates(current)
	if err != nil {
		return runtimehooksv1.Patch{}, err
	}
	want, err := gates(desired)
	if err != nil {
		return runtimehooksv1.Patch{}, err
	}
	if maps.Equal(cur, want) {
		return runtimehooksv1.Patch{}, nil
	}
	for _, g := range slices.Concat(slices.Collect(maps.Keys(cur)), slices.Collect(maps.Keys(want))) {
		cv, cok := cur[g]
		if wv, wok := want[g]; !versionGates[g] && (cv != wv || cok != wok) {
			// Another gate changed: not the version's doing.
			return runtimehooksv1.Patch{}, nil
		}
	}
	op := []map[string]any{{"op": "add", "path": "/spec/clusterConfiguration/featureGates", "value": want}}
	if len(want) == 0 {
		op = []map[string]any{{"op": "remove", "path": "/spec/clusterConfiguration/featureGates"}}
	}
	p, err := json.Marshal(op)
	return runtimehooksv1.Patch{PatchType: runtimehooksv1.JSONPatchType, Patch: p}, err
}

// UpdateMachine reports the host's progress towards the Machine's version:
// in progress, done, or failed with the step and the agent's message.
func (h *Handlers) UpdateMachine(ctx context.Context, req *runtimehooksv1.UpdateMachineRequest, resp *runtimehooksv1.UpdateMachineResponse) {
	m, want := &req.Desired.Machine, req.Desired.Machine.Spec.Version
	host, err := h.host(ctx, m)
	if err != nil {
		resp.Status, resp.Message = runtimehooksv1.ResponseStatusFailure, err.Error()
		return
	}
	resp.Status = runtimehooksv1.ResponseStatusSuccess
	running := host.Status.KubernetesVersion
	switch u := host.Status.Upgrade; {
	case running == want && (host.Spec.ClaimRef == nil || host.Spec.ClaimRef.KubernetesVersion == want || host.Spec.ClaimRef.KubernetesVersion == ""):
		resp.Message = fmt.Sprintf("EdgeHost %s runs %s", host.Name, want)
	case hostupgrade.Failed(host, want) != nil:
		f := hostupgrade.Failed(host, want)
		resp.Status = runtimehooksv1.ResponseStatusFailure
		resp.Message = fmt.Sprintf("the upgrade of EdgeHost %s to %s failed at step %q (%s) and the host runs %s again; "+
			"its agent does not try the same order twice", host.Name, want, f.Step, f.Message, f.From)
	case running != want && hostupgrade.Check(host, want) != nil:
		resp.Status, resp.Message = runtimehooksv1.ResponseStatusFailure, hostupgrade.Check(host, want).Error()
	case u != nil && u.To == want && u.State == infrav1.UpgradeRunning:
		resp.RetryAfterSeconds = pollSeconds
		resp.Message = fmt.Sprintf("EdgeHost %s is upgrading from %s to %s: %s", host.Name, u.From, want, u.Step)
	default:
		resp.RetryAfterSeconds = pollSeconds
		resp.Message = fmt.Sprintf("EdgeHost %s is ordered to upgrade from %s to %s; waiting for its agent", host.Name, running, want)
	}
}

// canUpgrade says why machine m's host cannot move to version want in
// place, or nil.
func (h *Handlers) canUpgrade(ctx context.Context, m *clusterv1.Machine, want string) error {
	host, err := h.host(ctx, m)
	if err != nil {
		return err
	}
	if err := hostupgrade.Check(host, want); err != nil {
		return fmt.Errorf("machine %s: %w", m.Name, err)
	}
	if f := hostupgrade.Failed(host, want); f != nil {
		return fmt.Errorf("machine %s: the upgrade of EdgeHost %s to %s failed at step %q", m.Name, host.Name, want, f.Step)
	}
	return nil
}

// host is the EdgeHost that machine m's EdgeMachine holds.
func (h *Handlers) host(ctx context.Context, m *clusterv1.Machine) (*infrav1.EdgeHost, error) {
	ref := m.Spec.InfrastructureRef
	if ref.Kind != "EdgeMachine" || ref.APIGroup != infrav1.GroupVersion.Group {
		return nil, fmt.Errorf("machine %s is not on an EdgeMachine", m.Name)
	}
	em := &infrav1.EdgeMachine{}
	if err := h.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: ref.Name}, em); err != nil {
		return nil, fmt.Errorf("machine %s: reading EdgeMachine %s: %w", m.Name, ref.Name, err)
	}
	if em.Status.HostRef == "" {
		return nil, fmt.Errorf("machine %s: EdgeMachine %s holds no host yet", m.Name, em.Name)
	}
	host := &infrav1.EdgeHost{}
	if err := h.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: em.Status.HostRef}, host); err != nil {
		return nil, fmt.Errorf("machine %s: reading EdgeHost %s: %w", m.Name, em.Status.HostRef, err)
	}
	return host, nil
}

// versionPatch is an RFC 6902 patch setting the version at path.
func versionPatch(path, version string) runtimehooksv1.Patch {
	p, _ := json.Marshal([]map[string]string{{"op": "add", "path": path, "value": version}})
	return runtimehooksv1.Patch{PatchType: runtimehooksv1.JSONPatchType, Patch: p}
}
