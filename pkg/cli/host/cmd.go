package host

import (
	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/edgefleet/fleet/pkg/cli/command"
	"github.com/edgefleet/fleet/pkg/cli/completion"
)

// NewCmd returns `kubectl fleet host`.
func NewCmd(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	cmd := &cobra.Command{Use: "host", Short: "Approve, cordon or uncordon edge hosts"}
	for _, a := range []struct {
		action Action
		short  string
	}{
		{Approve, "Admit hosts enrolled with a token that requires approval"},
		{Cordon, "Keep hosts from being claimed by new machines (machines that hold them keep them)"},
		{Uncordon, "Let cordoned hosts be claimed again"},
	} {
		o := &Options{flags: flags, IOStreams: streams, Action: a.action}
		cmd.AddCommand(&cobra.Command{
			Use:               string(a.action) + " NAME...",
			Short:             a.short,
			Args:              cobra.MinimumNArgs(1),
			ValidArgsFunction: completion.Hosts(flags),
			RunE:              command.RunE(o),
		})
	}
	return cmd
}
