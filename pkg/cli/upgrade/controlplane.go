package upgrade

import (
	"context"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/edgefleet/fleet/pkg/cli/kube"
	"github.com/edgefleet/fleet/pkg/cli/progress"
	"github.com/edgefleet/fleet/pkg/contract/hostphase"
	"github.com/edgefleet/fleet/pkg/contract/hostupgrade"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// kubeadmControlPlane is a cluster's KubeadmControlPlane and how Cluster
// API v1.14 rolls it to a new version.
type kubeadmControlPlane struct {
	kcp *controlplanev1.KubeadmControlPlane
	// inPlace: three or more replicas with maxSurge 0, which Cluster API
	// updates through the hub's hooks. Otherwise it adds a Machine on a
	// spare host, then deletes an old one, one at a time.
	inPlace bool
	// surge is how many spare hosts a rollout on new Machines takes.
	surge int
}

// getKubeadmControlPlane reads the cluster's KubeadmControlPlane, nil when
// its control plane is of plain Machines.
func (o *Options) getKubeadmControlPlane(ctx context.Context, cluster *clusterv1.Cluster) (*kubeadmControlPlane, error) {
	ref := cluster.Spec.ControlPlaneRef
	switch {
	case ref.Kind == "KubeadmControlPlane":
	case ref.Kind != "":
		return nil, fmt.Errorf("cluster %s's control plane is a %s: kubectl fleet upgrades a KubeadmControlPlane or plain control-plane Machines; nothing was changed", o.Name, ref.Kind)
	case cluster.Spec.Topology.IsDefined():
		return nil, fmt.Errorf("cluster %s has a topology but Cluster API has not made its control plane yet; nothing was changed", o.Name)
	default:
		return nil, nil
	}
	kcp := &controlplanev1.KubeadmControlPlane{}
	if err := o.conn.Client.Get(ctx, kube.ObjectKey{Namespace: o.conn.Namespace, Name: ref.Name}, kcp); err != nil {
		return nil, fmt.Errorf("kubeadmcontrolplane %s of cluster %s: %w", ref.Name, o.Name, o.conn.Explain(err))
	}
	replicas := int(ptr.Deref(kcp.Spec.Replicas, 1))
	surge := 1
	if s := kcp.Spec.Rollout.Strategy.RollingUpdate.MaxSurge; s != nil {
		n, err := intstr.GetScaledValueFromIntOrPercent(s, replicas, true)
		if err == nil {
			surge = n
		}
	}
	return &kubeadmControlPlane{kcp: kcp, surge: surge, inPlace: surge == 0 && replicas >= 3}, nil
}

// checkKubeadmControlPlane says, before anything changes, why the control
// plane cannot move to the version: a step kubeadm does not take, hosts
// that cannot take it in place, or no spare host to roll onto.
func (o *Options) checkKubeadmControlPlane(ctx context.Context, cluster *clusterv1.Cluster, cp *kubeadmControlPlane, machines []machine) ([]string, error) {
	current := cp.kcp.Spec.Version
	if cluster.Spec.Topology.IsDefined() {
		current = cluster.Spec.Topology.Version
	}
	if current != o.Version {
		if err := hostupgrade.Step(current, o.Version); err != nil {
			return []string{fmt.Sprintf("kubeadmcontrolplane %s runs %s: %v", cp.kcp.Name, current, err)}, nil
		}
	}
	if cp.inPlace {
		return o.problems(machines), nil
	}
	if current == o.Version {
		return nil, nil
	}
	return o.checkSpares(ctx, cp)
}

// checkSpares: a control plane rolled out on new Machines needs, for each
// Machine it adds at a time, a free host its EdgeMachineTemplate selects
// that can run the version. Any free host it selects may be given the new
// Machine, so each must be able to.
func (o *Options) checkSpares(ctx context.Context, cp *kubeadmControlPlane) ([]string, error) {
	c, ns := o.conn.Client, o.conn.Namespace
	kcp := cp.kcp
	ref := kcp.Spec.MachineTemplate.Spec.InfrastructureRef
	tmpl := &infrav1.EdgeMachineTemplate{}
	if err := c.Get(ctx, kube.ObjectKey{Namespace: ns, Name: ref.Name}, tmpl); err != nil {
		if apierrors.IsNotFound(err) {
			return []string{fmt.Sprintf("kubeadmcontrolplane %s: its EdgeMachineTemplate %s is missing", kcp.Name, ref.Name)}, nil
		}
		return nil, o.conn.Explain(err)
	}
	selector := labels.Everything()
	selectorText := "any"
	if s := tmpl.Spec.Template.Spec.HostSelector; s != nil {
		var err error
		if selector, err = metav1.LabelSelectorAsSelector(s); err != nil {
			return []string{fmt.Sprintf("kubeadmcontrolplane %s: EdgeMachineTemplate %s: hostSelector: %v", kcp.Name, tmpl.Name, err)}, nil
		}
		selectorText = selector.String()
	}
	hosts := &infrav1.EdgeHostList{}
	if err := c.List(ctx, hosts, kube.InNamespace(ns)); err != nil {
		return nil, o.conn.Explain(err)
	}
	var ready, unfit []string
	for i := range hosts.Items {
		h := &hosts.Items[i]
		if !hostphase.IsClaimable(h) || !selector.Matches(labels.Set(h.Labels)) {
			continue
		}
		if err := hostupgrade.Staged(h, o.Version); err != nil {
			unfit = append(unfit, err.Error())
			continue
		}
		ready = append(ready, h.Name)
	}
	var problems []string
	if len(unfit) > 0 {
		problems = append(problems, fmt.Sprintf("kubeadmcontrolplane %s may put its new Machine on any free host matching %q, and not all can run %s: %s",
			kcp.Name, selectorText, o.Version, strings.Join(unfit, "; ")))
	}
	if len(ready) < cp.surge {
		problems = append(problems, fmt.Sprintf("kubeadmcontrolplane %s replaces its %d machine(s) one at a time, each on a spare host (Cluster API v1.14 "+
			"updates a KubeadmControlPlane in place only with 3 or more replicas and maxSurge 0): it needs %d free host(s) matching %q "+
			"that can run %s, and there are %d. Enroll a spare host, or make one-host sites with --control-plane=machines, which upgrade in place",
			kcp.Name, ptr.Deref(kcp.Spec.Replicas, 1), cp.surge, selectorText, o.Version, len(ready)))
	}
	return problems, nil
}

// orderKubeadmControlPlane sets the new version where its owner reads
// it: the Cluster's topology (Cluster API then moves the control plane and,
// after it, the MachineDeployments), or the KubeadmControlPlane itself.
// Each is guarded by the version it was read with.
func (o *Options) orderKubeadmControlPlane(ctx context.Context, cluster *clusterv1.Cluster, cp *kubeadmControlPlane) error {
	var obj kube.Object = cp.kcp
	path, from := "/spec/version", cp.kcp.Spec.Version
	if cluster.Spec.Topology.IsDefined() {
		obj, path, from = cluster, "/spec/topology/version", cluster.Spec.Topology.Version
	}
	if from == o.Version {
		return nil
	}
	patch := fmt.Appendf(nil, `[{"op":"test","path":%q,"value":%q},{"op":"replace","path":%q,"value":%q}]`, path, from, path, o.Version)
	if err := o.conn.Client.Patch(ctx, obj, kube.RawPatch(types.JSONPatchType, patch)); err != nil {
		switch {
		case apierrors.IsConflict(err) || strings.Contains(err.Error(), "testing value"):
			return fmt.Errorf("%s changed while being upgraded (run the command again): %w", path, err)
		case apierrors.IsInvalid(err):
			// Cluster API's webhooks refuse a version while the control
			// plane is still provisioning or rolling out another.
			return fmt.Errorf("refused by Cluster API, %s %s; nothing was changed: %w", path, o.Version, err)
		}
		return o.conn.Explain(err)
	}
	how := fmt.Sprintf("Cluster API replaces its %d machine(s) one at a time on a spare host", ptr.Deref(cp.kcp.Spec.Replicas, 1))
	if cp.inPlace {
		how = "Cluster API updates its machines one at a time, in place through the hub's hooks where they allow, else by replacing each on its own host"
	}
	if cluster.Spec.Topology.IsDefined() {
		fmt.Fprintf(o.Out, "cluster/%s: topology version %s → %s ordered; kubeadmcontrolplane %s goes first (%s), then the MachineDeployments\n",
			cluster.Name, from, o.Version, cp.kcp.Name, how)
	} else {
		fmt.Fprintf(o.Out, "kubeadmcontrolplane/%s: %s → %s ordered; %s\n", cp.kcp.Name, from, o.Version, how)
	}
	return nil
}

// controlPlaneUpgraded checks a KubeadmControlPlane's Machines: as many
// as it wants, each on the version with its Node healthy, none on the way
// out; and the first that is not, with why from its EdgeMachine (waiting
// for a host, upgrading, failed).
func (o *Options) controlPlaneUpgraded(name string) progress.Check {
	c, ns := o.conn.Client, o.conn.Namespace
	return func(ctx context.Context) (string, bool, error) {
		kcp := &controlplanev1.KubeadmControlPlane{}
		if err := c.Get(ctx, kube.ObjectKey{Namespace: ns, Name: name}, kcp); err != nil {
			return "", false, o.conn.Explain(err)
		}
		list := &clusterv1.MachineList{}
		if err := c.List(ctx, list, kube.InNamespace(ns), kube.MatchingLabels{clusterv1.ClusterNameLabel: o.Name},
			kube.HasLabels{clusterv1.MachineControlPlaneLabel}); err != nil {
			return "", false, o.conn.Explain(err)
		}
		want := int(ptr.Deref(kcp.Spec.Replicas, 1))
		done, waiting, err := o.machinesOnVersion(ctx, list.Items)
		if err != nil {
			return "", false, err
		}
		line := fmt.Sprintf("kubeadmcontrolplane %s: %d/%d machine(s) on %s, Ready", name, done, want, o.Version)
		if waiting != "" {
			line += "; " + waiting
		}
		return line, done == want && len(list.Items) == want, nil
	}
}

// machinesOnVersion counts the Machines done: on the version, their Node
// healthy, not on the way out, and Cluster API's in-place update finished
// too. It says why the first other one waits, from its EdgeMachine, and
// fails when that one's host failed this order.
func (o *Options) machinesOnVersion(ctx context.Context, machines []clusterv1.Machine) (done int, waiting string, err error) {
	slices.SortFunc(machines, func(a, b clusterv1.Machine) int { return strings.Compare(a.Name, b.Name) })
	for i := range machines {
		m := &machines[i]
		_, updating := m.Annotations[clusterv1.UpdateInProgressAnnotation]
		if m.DeletionTimestamp.IsZero() && m.Spec.Version == o.Version && m.Status.NodeInfo != nil && m.Status.NodeInfo.KubeletVersion == o.Version &&
			nodeHealthy(m) && !updating && !conditionTrue(m.Status.Conditions, clusterv1.MachineUpdatingCondition) {
			done++
			continue
		}
		if waiting != "" {
			continue
		}
		waiting = "machine " + m.Name
		if !m.DeletionTimestamp.IsZero() {
			waiting += " is being deleted"
			continue
		}
		em := &infrav1.EdgeMachine{}
		if err := o.conn.Client.Get(ctx, kube.ObjectKey{Namespace: o.conn.Namespace, Name: m.Spec.InfrastructureRef.Name}, em); err != nil {
			continue
		}
		// Upfront checks refuse repeating a failed order, so a failure
		// here is this order's.
		if cond := meta.FindStatusCondition(em.Status.Conditions, infrav1.KubernetesVersionCondition); cond != nil &&
			cond.Reason == infrav1.UpgradeFailedReason && m.Spec.Version == o.Version {
			return done, waiting, fmt.Errorf("machine %s: %s", m.Name, cond.Message)
		}
		if why := edgeMachineWaiting(em); why != "" {
			waiting += ": " + why
		}
	}
	return done, waiting, nil
}

// edgeMachineWaiting is what an EdgeMachine waits for, from the first of
// its conditions that is not True, or "".
func edgeMachineWaiting(em *infrav1.EdgeMachine) string {
	for _, t := range []string{infrav1.HostClaimedCondition, infrav1.HostProvisionedCondition, infrav1.KubernetesVersionCondition} {
		if c := meta.FindStatusCondition(em.Status.Conditions, t); c != nil && c.Status != metav1.ConditionTrue && c.Message != "" {
			return c.Message
		}
	}
	return ""
}
