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
		Long: "Moves the control-plane Machines of a cluster made with --control-plane=machines to another Kubernetes\n" +
			"version, one at a time: each host's agent runs kubeadm upgrade, swaps the kubelet and waits for its Node,\n" +
			"and puts the old version back if that fails. No Machine is replaced and no host is reset, so a one-host\n" +
			"site needs no spare. Before changing anything it refuses a downgrade, a skip of a minor version, and a\n" +
			"version a host cannot get (staged under /opt/fleet/kubernetes/<version> on the host).",
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
