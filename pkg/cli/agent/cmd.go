package agent

import (
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/edgefleet/fleet/pkg/cli/command"
	"github.com/edgefleet/fleet/pkg/cli/kube"
)

// NewCmd returns `kubectl fleet agent`.
func NewCmd(flags *kube.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	cmd := &cobra.Command{Use: "agent", Short: "Roll a new fleet-agent release out to hosts in waves, and steer the roll-out"}
	cmd.AddCommand(newUpgradeCmd(flags, streams))
	for _, a := range []struct {
		action Action
		short  string
	}{
		{Approve, "Let the next wave of a roll-out that requires approval start"},
		{Pause, "Stop a roll-out from moving more hosts (hosts moving finish)"},
		{Resume, "Let a paused roll-out go on"},
		{Abort, "Stop a roll-out and move the hosts it moved back to the release each ran before, the last wave first"},
	} {
		o := &ControlOptions{flags: flags, IOStreams: streams, Action: a.action}
		c := &cobra.Command{
			Use:   string(a.action) + " ROLLOUT",
			Short: a.short,
			Args:  cobra.ExactArgs(1),
			RunE:  command.RunE(o),
		}
		if a.action == Abort {
			c.Flags().BoolVar(&o.Wait, "wait", false, "Wait until every host moved is back.")
			c.Flags().DurationVar(&o.Timeout, "timeout", 30*time.Minute, "How long --wait waits.")
		}
		cmd.AddCommand(c)
	}
	return cmd
}

func newUpgradeCmd(flags *kube.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &UpgradeOptions{flags: flags, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "upgrade --version VERSION [-l SELECTOR] [--max-unavailable 25%] [--wait]",
		Short: "Move the hosts' agents to a fleet-agent release, in waves, each host rolling back by itself on failure",
		Long: `Create an EdgeAgentRollout that moves the agents of the selected hosts (all hosts of the namespace
without -l) to a fleet-agent release an EdgeAgentRelease of the namespace holds. The hub moves a canary
host first, then waves of --wave-size hosts; never more than --max-unavailable hosts that share a
--group-by label value (a site) move at once. Each host fetches the release through its own session,
checks its signature against the release root keys it was installed with, and runs it on trial: it
commits once the new agent has reached the hub, or goes back to the release it ran by itself. When more
hosts of a wave fail than --success-threshold allows, the roll-out stops; ` + "`kubectl fleet agent abort`" + `
then moves the hosts already moved back.`,
		Example: `  # Move every host of the namespace, a canary first, then waves of 10 %
  kubectl fleet agent upgrade --version v0.9.2 --wave-size 10% --wait

  # One shop at a time at most, approving each wave after the canary
  kubectl fleet agent upgrade --version v0.9.2 -l region=north --group-by site --max-unavailable 1 --require-approval`,
		Args: cobra.NoArgs,
		RunE: command.RunE(o),
	}
	fs := cmd.Flags()
	fs.StringVar(&o.Version, "version", "", "The fleet-agent release to run (an EdgeAgentRelease of the namespace must have it).")
	fs.StringVarP(&o.Selector, "selector", "l", "", "Label selector of the hosts to move (default: every host of the namespace).")
	fs.StringVar(&o.Name, "name", "", "Name of the EdgeAgentRollout (default agent-<version>-<random>).")
	fs.Int32Var(&o.Canary, "canary", 1, "Hosts in the first wave, alone; 0 skips the canary.")
	fs.StringVar(&o.WaveSize, "wave-size", "25%", "Hosts in each wave after the canary: a number, or a percentage of the hosts selected.")
	fs.StringVar(&o.MaxUnavailable, "max-unavailable", "25%", "Hosts of one group that may move at once: a number, or a percentage of the group (at least 1).")
	fs.StringVar(&o.GroupBy, "group-by", "topology.kubernetes.io/zone", "Label whose value groups hosts for --max-unavailable (a site, a shop).")
	fs.StringVar(&o.SuccessThreshold, "success-threshold", "100%", "Share of a wave's hosts that must run the release for the roll-out to go on (at least 1 or 1%).")
	fs.DurationVar(&o.TrialDeadline, "trial-deadline", 5*time.Minute, "How long a host's new agent has to reach the hub before the host rolls back by itself.")
	fs.BoolVar(&o.RequireApproval, "require-approval", false, "Hold each wave after the canary until `kubectl fleet agent approve`.")
	fs.BoolVar(&o.Wait, "wait", false, "Wait until the roll-out completes, showing each wave; fail if it stops.")
	fs.DurationVar(&o.Timeout, "timeout", time.Hour, "How long --wait waits.")
	return cmd
}
