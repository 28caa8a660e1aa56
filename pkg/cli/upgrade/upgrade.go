package upgrade

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/blang/semver/v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/edgefleet/fleet/pkg/cli/kube"
	"github.com/edgefleet/fleet/pkg/cli/progress"
	"github.com/edgefleet/fleet/pkg/cli/validate"
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

	conn   *kube.Connection
	target semver.Version
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
	v, err := parseVersion(o.Version)
	if err != nil {
		return fmt.Errorf("--kubernetes-version %q: want vMAJOR.MINOR.PATCH, e.g. v1.36.3", o.Version)
	}
	o.target = v
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

// Run checks every machine and host, then orders the control-plane
// Machines one at a time.
func (o *Options) Run(ctx context.Context) error {
	c, ns := o.conn.Client, o.conn.Namespace
	cluster := &clusterv1.Cluster{}
	if err := c.Get(ctx, kube.ObjectKey{Namespace: ns, Name: o.Name}, cluster); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("cluster %q not found in namespace %s (see `kubectl fleet get clusters`)", o.Name, ns)
		}
		return o.conn.Explain(err)
	}
	if cluster.Spec.Topology.IsDefined() || cluster.Spec.ControlPlaneRef.Kind == "KubeadmControlPlane" {
		return fmt.Errorf("cluster %s has a KubeadmControlPlane: fleet upgrades in place only clusters made with "+
			"--control-plane=machines so far (a KubeadmControlPlane of Cluster API v1.14 replaces its Machines, "+
			"which needs a spare host per machine); nothing was changed", o.Name)
	}
	machines, workers, err := o.machines(ctx)
	if err != nil {
		return err
	}
	if workers > 0 {
		return fmt.Errorf("cluster %s has %d worker machine(s): fleet upgrades in place only control-plane Machines so far "+
			"(workers of a MachineDeployment are replaced on a version change); nothing was changed", o.Name, workers)
	}
	if len(machines) == 0 {
		return fmt.Errorf("cluster %s has no control-plane Machine to upgrade", o.Name)
	}
	if err := o.check(machines); err != nil {
		return err
	}
	for i, mc := range machines {
		if mc.m.Spec.Version != o.Version {
			if err := o.order(ctx, mc); err != nil {
				return err
			}
		}
		// Control planes go one at a time: the next waits for the last.
		if !o.Wait && i == len(machines)-1 {
			return nil
		}
		if err := progress.Until(ctx, o.Out, o.Timeout, "machine "+mc.m.Name+" on "+o.Version, o.upgraded(mc.m.Name)); err != nil {
			return err
		}
	}
	fmt.Fprintf(o.Out, "cluster %s: %d machine(s) on %s, Ready\n", o.Name, len(machines), o.Version)
	return nil
}

// machines returns the cluster's control-plane Machines with their hosts,
// by name, and counts its worker Machines.
func (o *Options) machines(ctx context.Context) ([]machine, int, error) {
	c, ns := o.conn.Client, o.conn.Namespace
	list := &clusterv1.MachineList{}
	if err := c.List(ctx, list, kube.InNamespace(ns), kube.MatchingLabels{clusterv1.ClusterNameLabel: o.Name}); err != nil {
		return nil, 0, o.conn.Explain(err)
	}
	var out []machine
	workers := 0
	for i := range list.Items {
		m := &list.Items[i]
		if !m.DeletionTimestamp.IsZero() {
			continue
		}
		if _, cp := m.Labels[clusterv1.MachineControlPlaneLabel]; !cp {
			workers++
			continue
		}
		mc := machine{m: m, em: &infrav1.EdgeMachine{}}
		if err := c.Get(ctx, kube.ObjectKey{Namespace: ns, Name: m.Spec.InfrastructureRef.Name}, mc.em); err != nil {
			return nil, 0, fmt.Errorf("EdgeMachine of Machine %s: %w", m.Name, o.conn.Explain(err))
		}
		if h := mc.em.Status.HostRef; h != "" {
			mc.host = &infrav1.EdgeHost{}
			if err := c.Get(ctx, kube.ObjectKey{Namespace: ns, Name: h}, mc.host); err != nil {
				return nil, 0, fmt.Errorf("EdgeHost %s of Machine %s: %w", h, m.Name, o.conn.Explain(err))
			}
		}
		out = append(out, mc)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].m.Name < out[j].m.Name })
	return out, workers, nil
}

// check refuses, before anything changes, a downgrade, a skipped minor
// version, and a machine whose host cannot get the version, naming each.
func (o *Options) check(machines []machine) error {
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
		cur, err := parseVersion(running)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: its version %q cannot be read", name, running))
			continue
		}
		switch {
		case o.target.LT(cur):
			problems = append(problems, fmt.Sprintf("%s runs %s: %s would be a downgrade, which kubeadm cannot do", name, running, o.Version))
			continue
		case o.target.Major != cur.Major || o.target.Minor > cur.Minor+1:
			problems = append(problems, fmt.Sprintf("%s runs %s: %s skips a minor version; upgrade one minor version at a time", name, running, o.Version))
			continue
		case o.target.EQ(cur):
			continue
		}
		if u := statusUpgrade(h); mc.m.Spec.Version == o.Version && u != nil && u.To == o.Version &&
			(u.State == infrav1.UpgradeFailed || u.State == infrav1.UpgradeRolledBack) {
			problems = append(problems, fmt.Sprintf("%s: the upgrade of EdgeHost %s to %s failed at step %q and is not retried by itself: "+
				"once the host is fixed, order %s (cancels it), then %s again", name, h.Name, o.Version, u.Step, running, o.Version))
			continue
		}
		switch {
		case h == nil || mc.m.Spec.ProviderID == "":
			problems = append(problems, fmt.Sprintf("%s is not provisioned on a host yet", name))
		case h.Status.KubernetesVersion == "":
			problems = append(problems, fmt.Sprintf("%s: the agent of EdgeHost %s reports no Kubernetes version (a fleet-agent too old, or not run by systemd) and cannot upgrade in place", name, h.Name))
		case h.Status.KubernetesVersion != o.Version && !slices.Contains(h.Status.Facts.KubernetesVersions, o.Version):
			staged := "none"
			if v := h.Status.Facts.KubernetesVersions; len(v) > 0 {
				staged = strings.Join(v, ", ")
			}
			problems = append(problems, fmt.Sprintf("%s: EdgeHost %s cannot get %s: stage it under /opt/fleet/kubernetes/%s on the host (staged: %s)", name, h.Name, o.Version, o.Version, staged))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("cannot upgrade cluster %s to %s; nothing was changed:\n  %s", o.Name, o.Version, strings.Join(problems, "\n  "))
	}
	return nil
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

func statusUpgrade(h *infrav1.EdgeHost) *infrav1.HostUpgradeStatus {
	if h == nil {
		return nil
	}
	return h.Status.Upgrade
}

func nodeHealthy(m *clusterv1.Machine) bool {
	for _, c := range m.Status.Conditions {
		if c.Type == clusterv1.MachineNodeHealthyCondition {
			return c.Status == "True"
		}
	}
	return false
}

// parseVersion parses "v1.36.3".
func parseVersion(s string) (semver.Version, error) {
	if !strings.HasPrefix(s, "v") {
		return semver.Version{}, fmt.Errorf("%q has no leading v", s)
	}
	return semver.Parse(s[1:])
}
