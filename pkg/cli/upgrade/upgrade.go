package upgrade

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/edgefleet/fleet/pkg/cli/kube"
	"github.com/edgefleet/fleet/pkg/cli/progress"
	"github.com/edgefleet/fleet/pkg/cli/validate"
	"github.com/edgefleet/fleet/pkg/contract/hostupgrade"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// Options is `kubectl fleet upgrade cluster`.
type Options struct {
	flags *kube.ConfigFlags
	genericiooptions.IOStreams
	Name    string
	Version string
	Wait    bool
	Timeout time.Duration

	conn *kube.Connection
}

// Complete takes the cluster name and builds the client.
func (o *Options) Complete(args []string) error {
	o.Name = args[0]
	var err error
	o.conn, err = kube.Connect(o.flags)
	return err
}

// Validate checks the flags.
func (o *Options) Validate() error {
	if err := validate.ClusterName(o.Name); err != nil {
		return err
	}
	if _, err := hostupgrade.Parse(o.Version); err != nil {
		return fmt.Errorf("--kubernetes-version %q: want vMAJOR.MINOR.PATCH, e.g. v1.36.3", o.Version)
	}
	if o.Timeout <= 0 {
		return fmt.Errorf("--timeout %s: want a positive duration", o.Timeout)
	}
	return nil
}

// machine is one Machine to upgrade, with the host it runs on.
type machine struct {
	m    *clusterv1.Machine
	em   *infrav1.EdgeMachine
	host *infrav1.EdgeHost
}

// Run checks every machine and host, then orders the control plane (its
// plain Machines one at a time, or its KubeadmControlPlane, or the
// Cluster's topology) and, once it runs the version, the
// MachineDeployments, whose Machines Cluster API updates in place through
// the hub's hooks.
func (o *Options) Run(ctx context.Context) error {
	c, ns := o.conn.Client, o.conn.Namespace
	cluster := &clusterv1.Cluster{}
	if err := c.Get(ctx, kube.ObjectKey{Namespace: ns, Name: o.Name}, cluster); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("cluster %q not found in namespace %s (see `kubectl fleet get clusters`)", o.Name, ns)
		}
		return o.conn.Explain(err)
	}
	kcp, err := o.getKubeadmControlPlane(ctx, cluster)
	if err != nil {
		return err
	}
	cps, workers, err := o.machines(ctx)
	if err != nil {
		return err
	}
	if len(cps) == 0 && kcp == nil {
		return fmt.Errorf("cluster %s has no control-plane Machine to upgrade", o.Name)
	}
	mds := &clusterv1.MachineDeploymentList{}
	if err := c.List(ctx, mds, kube.InNamespace(ns), kube.MatchingLabels{clusterv1.ClusterNameLabel: o.Name}); err != nil {
		return o.conn.Explain(err)
	}
	if o.Wait && fetching(append(slices.Clone(cps), workers...), o.Version) > 0 {
		// Hosts fetching the version (an EdgeKubernetesRelease) get there
		// by themselves: wait for them, then judge.
		if err := progress.Until(ctx, o.Out, o.Timeout, "hosts staging "+o.Version, o.staged(append(slices.Clone(cps), workers...))); err != nil {
			return err
		}
		if cps, workers, err = o.machines(ctx); err != nil {
			return err
		}
	}
	if kcp == nil {
		if err := o.refuse(o.problems(append(slices.Clone(cps), workers...))); err != nil {
			return err
		}
		if err := o.upgradeMachines(ctx, cps); err != nil {
			return err
		}
	} else {
		problems, err := o.checkKubeadmControlPlane(ctx, cluster, kcp, cps)
		if err != nil {
			return err
		}
		if err := o.refuse(append(problems, o.problems(workers)...)); err != nil {
			return err
		}
		if err := o.orderKubeadmControlPlane(ctx, cluster, kcp); err != nil {
			return err
		}
		if o.Wait {
			if err := progress.Until(ctx, o.Out, o.Timeout, "kubeadmcontrolplane "+kcp.kcp.Name+" on "+o.Version, o.controlPlaneUpgraded(kcp.kcp.Name)); err != nil {
				return err
			}
		}
	}
	// A topology's MachineDeployments are Cluster API's to move, once
	// the control plane runs the version.
	topology := cluster.Spec.Topology.IsDefined()
	if !o.Wait {
		if topology {
			return nil
		}
		// Kubelets must not be newer than their API server: workers
		// follow a control plane that runs the version.
		done, err := o.controlPlaneDone(ctx, kcp, cps)
		if err != nil || !done {
			var pending []string
			for i := range mds.Items {
				if mds.Items[i].Spec.Template.Spec.Version != o.Version {
					pending = append(pending, mds.Items[i].Name)
				}
			}
			if len(pending) > 0 {
				fmt.Fprintf(o.Out, "workers: machinedeployment(s) %s follow once the control plane runs %s: "+
					"run this command again then, or use --wait\n", strings.Join(pending, ", "), o.Version)
			}
			return err
		}
	}
	for i := range mds.Items {
		md := &mds.Items[i]
		switch {
		case md.Spec.Template.Spec.Version == o.Version:
		case !topology:
			if err := o.orderDeployment(ctx, md); err != nil {
				return err
			}
		case surge(md) > 0:
			fmt.Fprintf(o.Out, "note: machinedeployment/%s rolls out with maxSurge %v: Cluster API adds a Machine first, which waits for a spare host\n",
				md.Name, surge(md))
		}
		if o.Wait {
			if err := progress.Until(ctx, o.Out, o.Timeout, "machinedeployment "+md.Name+" on "+o.Version, o.deploymentUpgraded(md.Name)); err != nil {
				return err
			}
		}
	}
	if o.Wait {
		fmt.Fprintf(o.Out, "cluster %s: %d control-plane and %d worker machine(s) on %s, Ready\n", o.Name, len(cps), len(workers), o.Version)
	}
	return nil
}

// upgradeMachines orders plain control-plane Machines one at a time, each
// once the one before runs the version; without --wait it returns when the
// last is ordered.
func (o *Options) upgradeMachines(ctx context.Context, cps []machine) error {
	for i, mc := range cps {
		if mc.m.Spec.Version != o.Version {
			if err := o.order(ctx, mc); err != nil {
				return err
			}
		}
		if !o.Wait && i == len(cps)-1 {
			break
		}
		if err := progress.Until(ctx, o.Out, o.Timeout, "machine "+mc.m.Name+" on "+o.Version, o.upgraded(mc.m.Name)); err != nil {
			return err
		}
	}
	return nil
}

// controlPlaneDone tells whether the control plane runs the version now.
func (o *Options) controlPlaneDone(ctx context.Context, kcp *kubeadmControlPlane, cps []machine) (bool, error) {
	if kcp != nil {
		_, done, err := o.controlPlaneUpgraded(kcp.kcp.Name)(ctx)
		return done, err
	}
	for _, mc := range cps {
		if mc.host == nil || mc.host.Status.KubernetesVersion != o.Version {
			return false, nil
		}
	}
	return true, nil
}

// machines returns the cluster's control-plane and worker Machines with
// their hosts, each by name.
func (o *Options) machines(ctx context.Context) (cps, workers []machine, err error) {
	c, ns := o.conn.Client, o.conn.Namespace
	list := &clusterv1.MachineList{}
	if err := c.List(ctx, list, kube.InNamespace(ns), kube.MatchingLabels{clusterv1.ClusterNameLabel: o.Name}); err != nil {
		return nil, nil, o.conn.Explain(err)
	}
	for i := range list.Items {
		m := &list.Items[i]
		if !m.DeletionTimestamp.IsZero() {
			continue
		}
		mc := machine{m: m, em: &infrav1.EdgeMachine{}}
		if err := c.Get(ctx, kube.ObjectKey{Namespace: ns, Name: m.Spec.InfrastructureRef.Name}, mc.em); err != nil {
			return nil, nil, fmt.Errorf("EdgeMachine of Machine %s: %w", m.Name, o.conn.Explain(err))
		}
		if h := mc.em.Status.HostRef; h != "" {
			mc.host = &infrav1.EdgeHost{}
			if err := c.Get(ctx, kube.ObjectKey{Namespace: ns, Name: h}, mc.host); err != nil {
				return nil, nil, fmt.Errorf("EdgeHost %s of Machine %s: %w", h, m.Name, o.conn.Explain(err))
			}
		}
		if _, cp := m.Labels[clusterv1.MachineControlPlaneLabel]; cp {
			cps = append(cps, mc)
		} else {
			workers = append(workers, mc)
		}
	}
	byName := func(a, b machine) int { return strings.Compare(a.m.Name, b.m.Name) }
	slices.SortFunc(cps, byName)
	slices.SortFunc(workers, byName)
	return cps, workers, nil
}

// problems are why machines cannot move to the version in place: a
// downgrade, a skipped minor version, a host that cannot get the version
// or failed to move to it, each named.
func (o *Options) problems(machines []machine) []string {
	var problems []string
	for _, mc := range machines {
		name := "machine " + mc.m.Name
		h := mc.host
		// What the host runs decides: after a rolled-back upgrade the
		// Machine names a version its host does not run.
		running := mc.m.Spec.Version
		if h != nil && h.Status.KubernetesVersion != "" {
			running = h.Status.KubernetesVersion
		}
		if err := hostupgrade.Step(running, o.Version); err != nil {
			problems = append(problems, fmt.Sprintf("%s runs %s: %v", name, running, err))
			continue
		}
		if running == o.Version {
			continue
		}
		if f := hostupgrade.Failed(h, o.Version); mc.m.Spec.Version == o.Version && f != nil {
			problems = append(problems, fmt.Sprintf("%s: the upgrade of EdgeHost %s to %s failed at step %q and is not retried by itself: "+
				"once the host is fixed, order %s (cancels it), then %s again", name, h.Name, o.Version, f.Step, running, o.Version))
			continue
		}
		if h == nil || mc.m.Spec.ProviderID == "" {
			problems = append(problems, fmt.Sprintf("%s is not provisioned on a host yet", name))
		} else if err := hostupgrade.Check(h, o.Version); err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", name, err))
		}
	}
	return problems
}

// refuse is the error for problems found before anything changed.
func (o *Options) refuse(problems []string) error {
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("cannot upgrade cluster %s to %s; nothing was changed:\n  %s", o.Name, o.Version, strings.Join(problems, "\n  "))
}

// fetching counts the machines whose hosts are fetching version.
func fetching(machines []machine, version string) int {
	n := 0
	for _, mc := range machines {
		if mc.host == nil {
			continue
		}
		for _, st := range mc.host.Status.Staging {
			if st.Version == version && st.State == infrav1.StagingDownloading {
				n++
			}
		}
	}
	return n
}

// staged checks the machines' hosts until none is fetching the version.
func (o *Options) staged(machines []machine) progress.Check {
	c, ns := o.conn.Client, o.conn.Namespace
	return func(ctx context.Context) (string, bool, error) {
		var busy []string
		for _, mc := range machines {
			if mc.host == nil {
				continue
			}
			h := &infrav1.EdgeHost{}
			if err := c.Get(ctx, kube.ObjectKey{Namespace: ns, Name: mc.host.Name}, h); err != nil {
				return "", false, o.conn.Explain(err)
			}
			for _, st := range h.Status.Staging {
				if st.Version != o.Version || st.State != infrav1.StagingDownloading {
					continue
				}
				line := h.Name
				if st.TotalBytes > 0 {
					line += fmt.Sprintf(" %d%%", st.Bytes*100/st.TotalBytes)
				}
				busy = append(busy, line)
			}
		}
		if len(busy) == 0 {
			return fmt.Sprintf("hosts: %s staged", o.Version), true, nil
		}
		return fmt.Sprintf("hosts: %d of %d still fetching %s (%s)", len(busy), len(machines), o.Version, strings.Join(busy, ", ")), false, nil
	}
}

// order sets the Machine's version, guarded by the version it was read
// with: a Machine changed meanwhile is left alone.
func (o *Options) order(ctx context.Context, mc machine) error {
	from := mc.m.Spec.Version
	patch := fmt.Appendf(nil, `[{"op":"test","path":"/spec/version","value":%q},{"op":"replace","path":"/spec/version","value":%q}]`,
		from, o.Version)
	if err := o.conn.Client.Patch(ctx, mc.m, kube.RawPatch(types.JSONPatchType, patch)); err != nil {
		if apierrors.IsInvalid(err) || apierrors.IsConflict(err) {
			return fmt.Errorf("machine %s changed while being upgraded (run the command again): %w", mc.m.Name, err)
		}
		return o.conn.Explain(err)
	}
	fmt.Fprintf(o.Out, "machine/%s: %s → %s ordered on EdgeHost %s\n", mc.m.Name, from, o.Version, mc.host.Name)
	return nil
}

// orderDeployment sets a MachineDeployment's version, guarded by the
// version it was read with, not by its resourceVersion: with --wait it
// is read before the control plane's upgrade, and Cluster API writes it
// many times meanwhile.
// Cluster API then asks the hub's hooks whether its Machines can take it in
// place, and replaces those they cannot.
func (o *Options) orderDeployment(ctx context.Context, md *clusterv1.MachineDeployment) error {
	from := md.Spec.Template.Spec.Version
	patch := fmt.Appendf(nil, `[{"op":"test","path":"/spec/template/spec/version","value":%q},{"op":"replace","path":"/spec/template/spec/version","value":%q}]`,
		from, o.Version)
	if from == "" {
		// No version to guard: a JSON patch cannot test for an absent field.
		patch = fmt.Appendf(nil, `[{"op":"add","path":"/spec/template/spec/version","value":%q}]`, o.Version)
	}
	if err := o.conn.Client.Patch(ctx, md, kube.RawPatch(types.JSONPatchType, patch)); err != nil {
		if apierrors.IsInvalid(err) || apierrors.IsConflict(err) {
			return fmt.Errorf("machinedeployment %s changed while being upgraded (run the command again): %w", md.Name, err)
		}
		return o.conn.Explain(err)
	}
	fmt.Fprintf(o.Out, "machinedeployment/%s: %s → %s ordered; its Machines are updated in place\n", md.Name, from, o.Version)
	if surge(md) > 0 {
		fmt.Fprintf(o.Out, "note: machinedeployment/%s rolls out with maxSurge %v: Cluster API adds a Machine first, which waits for a spare host; "+
			"set maxSurge 0 and maxUnavailable 1 on a site without one\n", md.Name, surge(md))
	}
	return nil
}

// surge is how many Machines a rolling update of md adds before it
// updates one.
func surge(md *clusterv1.MachineDeployment) int {
	ru := md.Spec.Rollout.Strategy.RollingUpdate
	if md.Spec.Rollout.Strategy.Type != clusterv1.RollingUpdateMachineDeploymentStrategyType || ru.MaxSurge == nil {
		return 0
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(ru.MaxSurge, int(ptr.Deref(md.Spec.Replicas, 0)), true)
	if err != nil {
		return 1
	}
	return n
}

// deploymentUpgraded checks a MachineDeployment: every one of its Machines
// on the version with its Node Ready, and the first that is not, with its
// EdgeMachine's step.
func (o *Options) deploymentUpgraded(name string) progress.Check {
	c, ns := o.conn.Client, o.conn.Namespace
	return func(ctx context.Context) (string, bool, error) {
		md := &clusterv1.MachineDeployment{}
		if err := c.Get(ctx, kube.ObjectKey{Namespace: ns, Name: name}, md); err != nil {
			return "", false, o.conn.Explain(err)
		}
		list := &clusterv1.MachineList{}
		if err := c.List(ctx, list, kube.InNamespace(ns), kube.MatchingLabels{clusterv1.MachineDeploymentNameLabel: name}); err != nil {
			return "", false, o.conn.Explain(err)
		}
		done, waiting, err := o.machinesOnVersion(ctx, list.Items)
		if err != nil {
			return "", false, err
		}
		want := int(ptr.Deref(md.Spec.Replicas, 0))
		line := fmt.Sprintf("machinedeployment %s: %d/%d machine(s) on %s, Ready", name, done, want, o.Version)
		if waiting != "" {
			line += "; " + waiting
		}
		return line, done == want && len(list.Items) == want, nil
	}
}

// upgraded checks one machine: its host's report of this order, its
// EdgeMachine's KubernetesVersion condition, and its Node's kubelet as
// Cluster API reads it.
func (o *Options) upgraded(name string) progress.Check {
	c, ns := o.conn.Client, o.conn.Namespace
	return func(ctx context.Context) (string, bool, error) {
		m := &clusterv1.Machine{}
		if err := c.Get(ctx, kube.ObjectKey{Namespace: ns, Name: name}, m); err != nil {
			return "", false, o.conn.Explain(err)
		}
		em := &infrav1.EdgeMachine{}
		if err := c.Get(ctx, kube.ObjectKey{Namespace: ns, Name: m.Spec.InfrastructureRef.Name}, em); err != nil {
			return "", false, o.conn.Explain(err)
		}
		host := &infrav1.EdgeHost{}
		if err := c.Get(ctx, kube.ObjectKey{Namespace: ns, Name: em.Status.HostRef}, host); err != nil {
			return "", false, o.conn.Explain(err)
		}
		kubelet := "?"
		if m.Status.NodeInfo != nil {
			kubelet = m.Status.NodeInfo.KubeletVersion
		}
		line := fmt.Sprintf("machine %s: node kubelet %s", name, kubelet)
		cond := meta.FindStatusCondition(em.Status.Conditions, infrav1.KubernetesVersionCondition)
		if cond == nil {
			return line + ": waiting for the hub", false, nil
		}
		// A failure counts once the agent has seen this order: until then
		// the host may still report an earlier attempt.
		u := host.Status.Upgrade
		if claim := host.Spec.ClaimRef; claim != nil && claim.KubernetesVersion == o.Version && host.Status.AgentObservedGeneration >= host.Generation &&
			u != nil && u.To == o.Version && (u.State == infrav1.UpgradeFailed || u.State == infrav1.UpgradeRolledBack) && cond.Reason == infrav1.UpgradeFailedReason {
			return "", false, errors.New(cond.Message)
		}
		if cond.Message != "" {
			line += ": " + cond.Message
		}
		return line, cond.Status == metav1.ConditionTrue && host.Status.KubernetesVersion == o.Version && kubelet == o.Version && nodeHealthy(m), nil
	}
}

func conditionTrue(conds []metav1.Condition, t string) bool {
	c := meta.FindStatusCondition(conds, t)
	return c != nil && c.Status == metav1.ConditionTrue
}

func nodeHealthy(m *clusterv1.Machine) bool {
	return conditionTrue(m.Status.Conditions, clusterv1.MachineNodeHealthyCondition)
}
