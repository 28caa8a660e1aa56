package host

import (
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/edgefleet/fleet/pkg/cli/command"
	"github.com/edgefleet/fleet/pkg/cli/completion"
	"github.com/edgefleet/fleet/pkg/cli/kube"
)

// NewCmd returns `kubectl fleet host`.
func NewCmd(flags *kube.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	cmd := &cobra.Command{Use: "host", Short: "Approve, cordon, uncordon, remove edge hosts, retry their reset, read their logs and facts"}
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
	cmd.AddCommand(newRemoveCmd(flags, streams), newRetryCmd(flags, streams), newLogsCmd(flags, streams), newFactsCmd(flags, streams))
	return cmd
}

func newLogsCmd(flags *kube.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &LogsOptions{flags: flags, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "logs NAME [--bootstrap|--reset] [-f] [--since DURATION] [--tail N]",
		Short: "Print a host's agent log, or the whole output of its last bootstrap or reset",
		Long: `Print one of the logs a host's agent keeps, fetched through the hub over the agent's own session (the
host needs no inbound connection): the agent's recent log (the default; --follow streams new lines), or
the whole output of the last bootstrap (--bootstrap) or reset (--reset) the agent ran.

Secrets the bootstrap carried (join tokens, certificate keys, private keys) are redacted on the host,
before anything leaves it. Each read is recorded as an Event on the EdgeHost. It needs RBAC permission
to get edgehosts/log in API group hostaccess.fleet.edgefleet.io (ClusterRole fleet-host-access).`,
		Example: `  # Why did the bootstrap of kiosk-17 fail?
  kubectl fleet host logs kiosk-17 --bootstrap

  # Follow the agent's log, starting with the last 10 minutes
  kubectl fleet host logs kiosk-17 -f --since 10m`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completion.Hosts(flags),
		RunE:              command.RunE(o),
	}
	fs := cmd.Flags()
	fs.BoolVar(&o.Bootstrap, "bootstrap", false, "Print the whole output of the last bootstrap (cloud-config commands, kubeadm).")
	fs.BoolVar(&o.Reset, "reset", false, "Print the whole output of the last reset.")
	fs.BoolVarP(&o.Follow, "follow", "f", false, "Keep streaming the agent's log as it grows.")
	fs.DurationVar(&o.Since, "since", 0, "Only lines of the agent's log newer than this, e.g. 10m.")
	fs.Int64Var(&o.Tail, "tail", -1, "Only the last lines; -1 prints all.")
	fs.Int64Var(&o.LimitBytes, "limit-bytes", 0, "Stop after this many bytes (0: the hub's limit, 8 MiB, unless following).")
	return cmd
}

func newFactsCmd(flags *kube.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &FactsOptions{flags: flags, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "facts NAME [-o json|yaml]",
		Short: "Show what a host's agent knows of its host: OS, kernel, addresses, disks, versions, link, certificates",
		Long: `Ask a host's agent, through the hub over its own session, what it knows of its host now: OS and kernel,
boot time, network interfaces and addresses, disks, the agent's and Kubernetes' versions, the link's
health, and the dates of the host's Kubernetes certificates. Each read is recorded as an Event on the
EdgeHost. It needs RBAC permission to get edgehosts/facts in API group hostaccess.fleet.edgefleet.io
(ClusterRole fleet-host-access).`,
		Example: `  kubectl fleet host facts kiosk-17
  kubectl fleet host facts kiosk-17 -o yaml`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completion.Hosts(flags),
		RunE:              command.RunE(o),
	}
	cmd.Flags().StringVarP(&o.Output, "output", "o", "", "Output format: json or yaml (default: a summary).")
	return cmd
}

func newRemoveCmd(flags *kube.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &RemoveOptions{flags: flags, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "remove NAME [--force]",
		Short: "Remove a host from the fleet; --force for a dead host or one whose reset failed",
		Long: `Remove a host from the fleet: its EdgeHost is deleted, which revokes its identity (its agent is
refused from then on; to use the machine again, enroll it anew).

Without --force, remove deletes a host that is Available at once, and waits for a host whose agent is
resetting it (cordoning it meanwhile). It refuses a host that still serves a Machine (delete the
Machine first: its host is then reset) and one whose reset failed or whose agent is gone.

--force is for hardware that is dead or broken: the hub gives up the claim of the Machine the host
serves (that Machine loses its host), lets the host go without a reset, and records what was given up
in Events on the host and the Machine. Wipe such a machine before it serves again.`,
		Example: `  # Remove a host that is back in the pool
  kubectl fleet host remove kiosk-17

  # Remove a host whose hardware died while it served a Machine
  kubectl fleet host remove kiosk-17 --force`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completion.Hosts(flags),
		RunE:              command.RunE(o),
	}
	cmd.Flags().BoolVar(&o.Force, "force", false, "Give up the Machine the host serves and the host's reset: for a host whose agent is gone or whose reset failed.")
	cmd.Flags().BoolVar(&o.Wait, "wait", true, "Wait until the EdgeHost is gone.")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", 10*time.Minute, "How long to wait for the agent's reset and for the EdgeHost to go.")
	return cmd
}

func newRetryCmd(flags *kube.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &RetryOptions{flags: flags, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "retry NAME [--wait]",
		Short: "Order the failed reset of a NeedsAttention host again",
		Long: `Order the reset of a host whose reset failed (phase NeedsAttention) again. The hub sends its agent a
new order; the agent runs the reset again without being restarted. An agent never retries a reset on its
own. A host whose bootstrap failed is not retried: a bootstrap never runs twice on a host; delete its
Machine instead.`,
		Example: `  # Fix what made the reset fail on the host, then
  kubectl fleet host retry kiosk-17 --wait`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completion.Hosts(flags),
		RunE:              command.RunE(o),
	}
	cmd.Flags().BoolVar(&o.Wait, "wait", false, "Wait until the host is Available again, showing its phases.")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", 10*time.Minute, "How long --wait waits.")
	return cmd
}
