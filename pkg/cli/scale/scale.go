package scale

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/edgefleet/fleet/pkg/cli/kube"
	"github.com/edgefleet/fleet/pkg/cli/progress"
	"github.com/edgefleet/fleet/pkg/cli/validate"
)

// Options is `kubectl fleet scale cluster`. A nil count is left as it is.
type Options struct {
	flags *kube.ConfigFlags
	genericiooptions.IOStreams
	Name                 string
	WorkerMachines       *int32
	ControlPlaneMachines *int32
	// MachineDeployment names the topology's worker pool to scale, when it
	// has more than one.
	MachineDeployment string
	Wait              bool
	Timeout           time.Duration

	conn *kube.Connection
}

// Complete takes the cluster name and builds the client.
func (o *Options) Complete(args []string) error {
	o.Name = args[0]
	var err error
	o.conn, err = kube.Connect(o.flags)
	return err
}

// Validate refuses impossible counts with the reason.
func (o *Options) Validate() error {
	if err := validate.ClusterName(o.Name); err != nil {
		return err
	}
	if o.WorkerMachines == nil && o.ControlPlaneMachines == nil {
		return errors.New("say what to scale: --worker-machines and/or --control-plane-machines")
	}
	if w := o.WorkerMachines; w != nil && *w < 0 {
		return errors.New("--worker-machines must not be negative")
	}
	if cp := o.ControlPlaneMachines; cp != nil && (*cp < 1 || *cp%2 == 0) {
		return fmt.Errorf("--control-plane-machines %d: want an odd number ≥ 1, so etcd keeps quorum when one member is lost", *cp)
	}
	if o.Wait && o.Timeout <= 0 {
		return fmt.Errorf("--timeout %s: want a positive duration", o.Timeout)
	}
	return nil
}

// Run scales through the scale subresource, as kubectl scale does.
func (o *Options) Run(ctx context.Context) error {
	c, ns := o.conn.Client, o.conn.Namespace
	cluster := &clusterv1.Cluster{}
	if err := c.Get(ctx, kube.ObjectKey{Namespace: ns, Name: o.Name}, cluster); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("cluster %q not found in namespace %s (see `kubectl fleet get clusters`)", o.Name, ns)
		}
		return o.conn.Explain(err)
	}
	// Topology clusters are scaled by their Cluster's spec.topology: the
	// topology controller would revert a direct scale.
	if cluster.Spec.Topology.IsDefined() {
		return o.scaleTopology(ctx, cluster)
	}
	if o.MachineDeployment != "" {
		return fmt.Errorf("--machine-deployment is for a cluster of a ClusterClass; cluster %s has one MachineDeployment, %s-md-0", o.Name, o.Name)
	}
	// Read everything first: a refused half must leave the other unscaled.
	var md *clusterv1.MachineDeployment
	if o.WorkerMachines != nil {
		md = &clusterv1.MachineDeployment{}
		key := kube.ObjectKey{Namespace: ns, Name: o.Name + "-md-0"}
		if err := c.Get(ctx, key, md); err != nil {
			return fmt.Errorf("worker MachineDeployment %s: %w", key.Name, err)
		}
	}
	var kcp *controlplanev1.KubeadmControlPlane
	if o.ControlPlaneMachines != nil {
		ref := cluster.Spec.ControlPlaneRef
		if ref.Kind != "KubeadmControlPlane" {
			return fmt.Errorf("cluster %s has no KubeadmControlPlane (it was created with --control-plane=machines): add or delete its control-plane Machines instead", o.Name)
		}
		kcp = &controlplanev1.KubeadmControlPlane{}
		if err := c.Get(ctx, kube.ObjectKey{Namespace: ns, Name: ref.Name}, kcp); err != nil {
			return o.conn.Explain(err)
		}
	}
	if md != nil {
		if err := scaleTo(ctx, c, md, *o.WorkerMachines); err != nil {
			return o.conn.Explain(err)
		}
		fmt.Fprintf(o.Out, "machinedeployment/%s scaled to %d\n", md.Name, *o.WorkerMachines)
	}
	if kcp != nil {
		if err := scaleTo(ctx, c, kcp, *o.ControlPlaneMachines); err != nil {
			return o.conn.Explain(err)
		}
		fmt.Fprintf(o.Out, "kubeadmcontrolplane/%s scaled to %d\n", kcp.Name, *o.ControlPlaneMachines)
	}
	if !o.Wait {
		return nil
	}
	cp, workers, err := o.wanted(ctx, cluster)
	if err != nil {
		return err
	}
	if err := progress.Until(ctx, o.Out, o.Timeout, "cluster "+o.Name, progress.Machines(c, ns, o.Name, cp, workers)); err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "cluster %s: %d control-plane and %d worker machine(s) Running\n", o.Name, cp, workers)
	return nil
}

// wanted is how many control-plane and worker Machines the cluster should
// have once Cluster API has done what was asked: the replicas of its
// KubeadmControlPlane (or its control-plane Machines, when it has none)
// and of all its MachineDeployments.
func (o *Options) wanted(ctx context.Context, cluster *clusterv1.Cluster) (cp, workers int, err error) {
	c, ns := o.conn.Client, o.conn.Namespace
	if ref := cluster.Spec.ControlPlaneRef; ref.Kind == "KubeadmControlPlane" {
		kcp := &controlplanev1.KubeadmControlPlane{}
		if err := c.Get(ctx, kube.ObjectKey{Namespace: ns, Name: ref.Name}, kcp); err != nil {
			return 0, 0, o.conn.Explain(err)
		}
		cp = int(ptr.Deref(kcp.Spec.Replicas, 1))
	} else {
		machines := &clusterv1.MachineList{}
		if err := c.List(ctx, machines, kube.InNamespace(ns), kube.MatchingLabels{clusterv1.ClusterNameLabel: o.Name},
			kube.HasLabels{clusterv1.MachineControlPlaneLabel}); err != nil {
			return 0, 0, o.conn.Explain(err)
		}
		for _, m := range machines.Items {
			if m.DeletionTimestamp.IsZero() {
				cp++
			}
		}
	}
	mds := &clusterv1.MachineDeploymentList{}
	if err := c.List(ctx, mds, kube.InNamespace(ns)); err != nil {
		return 0, 0, o.conn.Explain(err)
	}
	for _, md := range mds.Items {
		if md.Spec.ClusterName == o.Name {
			workers += int(ptr.Deref(md.Spec.Replicas, 1))
		}
	}
	return cp, workers, nil
}

// scaleTo sets replicas with a merge patch of the scale subresource, as
// kubectl scale does: Cluster API's reconcilers write the object all the
// time, and an update carrying the resourceVersion read would conflict.
func scaleTo(ctx context.Context, c *kube.Client, obj kube.Object, replicas int32) error {
	patch := kube.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas))
	if err := c.PatchScale(ctx, obj, patch); err != nil {
		return fmt.Errorf("scaling %s: %w", obj.GetName(), err)
	}
	return nil
}
