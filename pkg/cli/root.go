package cli

import (
	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/edgefleet/fleet/pkg/cli/create"
	fleetdelete "github.com/edgefleet/fleet/pkg/cli/delete"
	"github.com/edgefleet/fleet/pkg/cli/describe"
	"github.com/edgefleet/fleet/pkg/cli/get"
	"github.com/edgefleet/fleet/pkg/cli/host"
	"github.com/edgefleet/fleet/pkg/cli/kube"
	"github.com/edgefleet/fleet/pkg/cli/kubeconfig"
	"github.com/edgefleet/fleet/pkg/cli/scale"
	"github.com/edgefleet/fleet/pkg/cli/token"
	"github.com/edgefleet/fleet/pkg/cli/version"
)

// NewRootCmd returns `kubectl fleet`.
func NewRootCmd(streams genericiooptions.IOStreams) *cobra.Command {
	flags := kube.NewConfigFlags()
	root := &cobra.Command{
		Use:   "kubectl-fleet",
		Short: "Operate fleet, the Cluster API provider for edge machines behind NAT",
		Long: "kubectl fleet manages edge hosts and the clusters that run on them: enrollment tokens, hosts,\n" +
			"machines and clusters, next to Cluster API on the hub cluster.",
		SilenceUsage:  true,
		SilenceErrors: true,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl fleet"},
	}
	flags.AddFlags(root.PersistentFlags())
	root.AddGroup(&cobra.Group{ID: "fleet", Title: "Fleet commands:"})
	for _, c := range []*cobra.Command{
		create.NewCmd(flags, streams),
		scale.NewCmd(flags, streams),
		fleetdelete.NewCmd(flags, streams),
		describe.NewCmd(flags, streams),
		get.NewCmd(flags, streams),
		host.NewCmd(flags, streams),
		kubeconfig.NewCmd(flags, streams),
		token.NewCmd(flags, streams),
		version.NewCmd(flags, streams),
	} {
		c.GroupID = "fleet"
		root.AddCommand(c)
	}
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	return root
}
