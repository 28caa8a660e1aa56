package scale

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"k8s.io/utils/ptr"

	"github.com/edgefleet/fleet/pkg/cli/command"
	"github.com/edgefleet/fleet/pkg/cli/completion"
	"github.com/edgefleet/fleet/pkg/cli/kube"
)

// NewCmd returns `kubectl fleet scale`.
func NewCmd(flags *kube.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{flags: flags, IOStreams: streams}
	cluster := &cobra.Command{
		Use:   "cluster NAME [--worker-machines M] [--control-plane-machines N] [--wait]",
		Short: "Change how many machines a cluster has",
		Long: "Scales the KubeadmControlPlane and the workers' MachineDeployment through the scale subresource, as\n" +
			"kubectl scale does. A cluster of a ClusterClass is scaled in its Cluster's spec.topology instead (Cluster\n" +
			"API's topology controller owns the objects and would undo a direct scale); both counts change in one write.",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completion.Clusters(flags),
		RunE:              command.RunE(o),
	}
	// Pointers tell "not given" from 0: scaling workers to 0 is legitimate.
	cluster.Flags().Var(optionalInt32{&o.WorkerMachines}, "worker-machines", "Worker machines.")
	cluster.Flags().Var(optionalInt32{&o.ControlPlaneMachines}, "control-plane-machines", "Control-plane machines (odd).")
	cluster.Flags().StringVar(&o.MachineDeployment, "machine-deployment", "", "For a cluster of a ClusterClass with several worker pools: the pool (its name in spec.topology) --worker-machines scales.")
	cluster.Flags().BoolVar(&o.Wait, "wait", false, "Wait until the cluster has as many machines as asked, all Running (the removed ones gone), showing progress.")
	cluster.Flags().DurationVar(&o.Timeout, "timeout", 30*time.Minute, "How long --wait waits.")
	cmd := &cobra.Command{Use: "scale", Short: "Scale a cluster"}
	cmd.AddCommand(cluster)
	return cmd
}

// optionalInt32 is an int32 flag that stays nil unless given.
type optionalInt32 struct{ p **int32 }

func (v optionalInt32) String() string {
	if *v.p == nil {
		return ""
	}
	return strconv.Itoa(int(**v.p))
}

func (v optionalInt32) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return fmt.Errorf("want a whole number: %w", err)
	}
	*v.p = ptr.To(int32(n))
	return nil
}

func (v optionalInt32) Type() string { return "int32" }
