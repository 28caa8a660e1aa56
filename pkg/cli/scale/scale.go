package scale

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/pkg/cli/completion"
	"github.com/edgefleet/fleet/pkg/cli/kube"
)

// Options is `kubectl fleet scale cluster`.
type Options struct {
	flags *genericclioptions.ConfigFlags
	genericiooptions.IOStreams
	Name                 string
	WorkerMachines       int32
	ControlPlaneMachines int32
}

// NewCmd returns `kubectl fleet scale`.
func NewCmd(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{flags: flags, IOStreams: streams}
	cluster := &cobra.Command{
		Use:               "cluster NAME [--worker-machines M] [--control-plane-machines N]",
		Short:             "Change how many machines a cluster has (through the scale subresource)",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completion.Clusters(flags),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Name = args[0]
			if err := o.Validate(cmd); err != nil {
				return err
			}
			return o.Run(cmd.Context(), cmd)
		},
	}
	cluster.Flags().Int32Var(&o.WorkerMachines, "worker-machines", 0, "Worker machines.")
	cluster.Flags().Int32Var(&o.ControlPlaneMachines, "control-plane-machines", 0, "Control-plane machines (odd).")
	cmd := &cobra.Command{Use: "scale", Short: "Scale a cluster"}
	cmd.AddCommand(cluster)
	return cmd
}

// Validate refuses impossible counts with the reason.
func (o *Options) Validate(cmd *cobra.Command) error {
	w, cp := cmd.Flags().Changed("worker-machines"), cmd.Flags().Changed("control-plane-machines")
	if !w && !cp {
		return errors.New("say what to scale: --worker-machines and/or --control-plane-machines")
	}
	if w && o.WorkerMachines < 0 {
		return errors.New("--worker-machines must not be negative")
	}
	if cp && (o.ControlPlaneMachines < 1 || o.ControlPlaneMachines%2 == 0) {
		return fmt.Errorf("--control-plane-machines %d: want an odd number ≥ 1, so etcd keeps quorum when one member is lost", o.ControlPlaneMachines)
	}
	return nil
}

// Run scales through the scale subresource, as kubectl scale does.
func (o *Options) Run(ctx context.Context, cmd *cobra.Command) error {
	conn, err := kube.Connect(o.flags)
	if err != nil {
		return err
	}
	c := conn.Client
	cluster := &clusterv1.Cluster{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: conn.Namespace, Name: o.Name}, cluster); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("cluster %q not found in namespace %s (see `kubectl fleet get clusters`)", o.Name, conn.Namespace)
		}
		return conn.Explain(err)
	}
	if cmd.Flags().Changed("worker-machines") {
		md := &clusterv1.MachineDeployment{}
		key := client.ObjectKey{Namespace: conn.Namespace, Name: o.Name + "-md-0"}
		if err := c.Get(ctx, key, md); err != nil {
			return fmt.Errorf("worker MachineDeployment %s: %w", key.Name, err)
		}
		if err := scaleTo(ctx, c, md, o.WorkerMachines); err != nil {
			return conn.Explain(err)
		}
		fmt.Fprintf(o.Out, "machinedeployment/%s scaled to %d\n", md.Name, o.WorkerMachines)
	}
	if cmd.Flags().Changed("control-plane-machines") {
		ref := cluster.Spec.ControlPlaneRef
		if ref.Kind != "KubeadmControlPlane" {
			return fmt.Errorf("cluster %s has no KubeadmControlPlane (it was created with --control-plane=machines): add or delete its control-plane Machines instead", o.Name)
		}
		kcp := &controlplanev1.KubeadmControlPlane{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: conn.Namespace, Name: ref.Name}, kcp); err != nil {
			return conn.Explain(err)
		}
		if err := scaleTo(ctx, c, kcp, o.ControlPlaneMachines); err != nil {
			return conn.Explain(err)
		}
		fmt.Fprintf(o.Out, "kubeadmcontrolplane/%s scaled to %d\n", kcp.Name, o.ControlPlaneMachines)
	}
	return nil
}

func scaleTo(ctx context.Context, c client.Client, obj client.Object, replicas int32) error {
	scale := &autoscalingv1.Scale{}
	if err := c.SubResource("scale").Get(ctx, obj, scale); err != nil {
		return fmt.Errorf("reading scale of %s: %w", obj.GetName(), err)
	}
	scale.Spec.Replicas = replicas
	if err := c.SubResource("scale").Update(ctx, obj, client.WithSubResourceBody(scale)); err != nil {
		return fmt.Errorf("scaling %s: %w", obj.GetName(), err)
	}
	return nil
}
