package delete

import (
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/edgefleet/fleet/pkg/cli/command"
	"github.com/edgefleet/fleet/pkg/cli/completion"
	"github.com/edgefleet/fleet/pkg/cli/kube"
)

// NewCmd returns `kubectl fleet delete`.
func NewCmd(flags *kube.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{flags: flags, IOStreams: streams}
	cluster := &cobra.Command{
		Use:               "cluster NAME [--wait]",
		Short:             "Delete a cluster; its hosts are reset and return to the pool",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completion.Clusters(flags),
		RunE:              command.RunE(o),
	}
	cluster.Flags().BoolVar(&o.Wait, "wait", false, "Wait until the cluster is gone and its hosts are Available again, showing progress.")
	cluster.Flags().DurationVar(&o.Timeout, "timeout", 30*time.Minute, "How long --wait waits.")
	cmd := &cobra.Command{Use: "delete", Short: "Delete a cluster"}
	cmd.AddCommand(cluster)
	return cmd
}
