package describe

import (
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/edgefleet/fleet/pkg/cli/command"
	"github.com/edgefleet/fleet/pkg/cli/completion"
	"github.com/edgefleet/fleet/pkg/cli/kube"
)

// NewCmd returns `kubectl fleet describe`.
func NewCmd(flags *kube.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{flags: flags, IOStreams: streams, Now: time.Now}
	cluster := &cobra.Command{
		Use:               "cluster NAME",
		Short:             "Show a cluster as a tree, with each machine's edge host, agent and node",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completion.Clusters(flags),
		RunE:              command.RunE(o),
	}
	cluster.Flags().StringVarP(&o.Output, "output", "o", "", "json or yaml: the same tree as data.")
	cluster.Flags().BoolVar(&o.ShowConditions, "show-conditions", false, "Show every condition of every object.")
	ro := &RolloutOptions{flags: flags, IOStreams: streams, Now: time.Now}
	rollout := &cobra.Command{
		Use:     "rollout NAME",
		Short:   "Show an agent roll-out: its policy, every wave, the hosts not done and why",
		Example: `  kubectl fleet describe rollout agent-v0-9-2-x7k2p`,
		Args:    cobra.ExactArgs(1),
		RunE:    command.RunE(ro),
	}
	rollout.Flags().StringVarP(&ro.Output, "output", "o", "", "json or yaml: the EdgeAgentRollout as data.")
	cmd := &cobra.Command{Use: "describe", Short: "Describe a cluster or an agent roll-out"}
	cmd.AddCommand(cluster, rollout)
	return cmd
}
