package version

import (
	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/edgefleet/fleet/pkg/cli/command"
	"github.com/edgefleet/fleet/pkg/cli/kube"
)

// NewCmd returns `kubectl fleet version`.
func NewCmd(flags *kube.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{flags: flags, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the plugin's version, and the hub's if it is reachable",
		Args:  cobra.NoArgs,
		RunE:  command.RunE(o),
	}
	cmd.Flags().StringVar(&o.HubNamespace, "hub-namespace", "fleet-system", "Namespace of the fleet hub.")
	cmd.Flags().BoolVar(&o.ClientOnly, "client", false, "Print only the plugin's version, without contacting the cluster.")
	return cmd
}
