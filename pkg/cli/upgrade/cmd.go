package upgrade

import (
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/edgefleet/fleet/pkg/cli/command"
	"github.com/edgefleet/fleet/pkg/cli/completion"
	"github.com/edgefleet/fleet/pkg/cli/kube"
)

// NewCmd returns `kubectl fleet upgrade`.
func NewCmd(flags *kube.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{flags: flags, IOStreams: streams}
	cluster := &cobra.Command{
		Use:   "cluster NAME --kubernetes-version vX.Y.Z [--wait]",
		Short: "Upgrade a cluster's Kubernetes in place",
		Long: "Moves a cluster to another Kubernetes version, the control plane first, then the workers.\n\n" +
			"A control plane of plain Machines (kubectl fleet create cluster --control-plane=machines, the one-host site)\n" +
			"is upgraded in place, one Machine at a time: each host's agent runs kubeadm upgrade, swaps the kubelet,\n" +
			"waits for its Node, and puts the old version back if that fails. A KubeadmControlPlane (or a ClusterClass\n" +
			"cluster, whose topology version is set) is rolled out by Cluster API: in place through fleet's hub with 3\n" +
			"or more replicas and maxSurge 0, otherwise onto a spare host per machine at a time, which must exist.\n\n" +
			"The MachineDeployments follow once the control plane runs the version (run the command again, or use\n" +
			"--wait; Cluster API moves a topology's by itself): Cluster API asks fleet's hub whether their Machines can\n" +
			"be updated in place, and the hosts' agents do it, so with maxSurge 0 no worker needs a spare host.\n\n" +
			"Before changing anything it refuses a downgrade, a skip of a minor version, a version a host cannot get\n" +
			"(staged under /opt/fleet/kubernetes/<version> on the host), and a rollout with no spare host to go to.",
		Example:           "  kubectl fleet upgrade cluster store-0042 --kubernetes-version v1.36.3 --wait",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completion.Clusters(flags),
		RunE:              command.RunE(o),
	}
	cluster.Flags().StringVar(&o.Version, "kubernetes-version", "", "The version to move to, vMAJOR.MINOR.PATCH (required).")
	cluster.Flags().BoolVar(&o.Wait, "wait", false, "Wait until every machine runs the version, Ready, showing each one's step.")
	cluster.Flags().DurationVar(&o.Timeout, "timeout", 30*time.Minute, "How long --wait waits.")
	_ = cluster.MarkFlagRequired("kubernetes-version")
	cmd := &cobra.Command{Use: "upgrade", Short: "Upgrade a cluster in place"}
	cmd.AddCommand(cluster)
	return cmd
}
