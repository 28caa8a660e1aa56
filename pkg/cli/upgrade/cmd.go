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
		Long: "Moves a cluster made with --control-plane=machines to another Kubernetes version in place. The\n" +
			"control-plane Machines go first, one at a time: each host's agent runs kubeadm upgrade, swaps the kubelet,\n" +
			"waits for its Node, and puts the old version back if that fails. The MachineDeployments follow once the\n" +
			"control plane runs the version (run the command again, or use --wait): Cluster API asks fleet's hub\n" +
			"whether their Machines can be updated in place, and the hosts' agents do the same. No Machine is\n" +
			"replaced and no host is reset, so a site needs no spare host. Before changing anything it refuses a\n" +
			"downgrade, a skip of a minor version, and a version a host cannot get (staged under\n" +
			"/opt/fleet/kubernetes/<version> on the host).",
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
