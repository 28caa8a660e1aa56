package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/edgefleet/fleet/pkg/cli/agent"
	"github.com/edgefleet/fleet/pkg/cli/create"
	fleetdelete "github.com/edgefleet/fleet/pkg/cli/delete"
	"github.com/edgefleet/fleet/pkg/cli/describe"
	"github.com/edgefleet/fleet/pkg/cli/get"
	"github.com/edgefleet/fleet/pkg/cli/host"
	"github.com/edgefleet/fleet/pkg/cli/kube"
	"github.com/edgefleet/fleet/pkg/cli/kubeconfig"
	"github.com/edgefleet/fleet/pkg/cli/scale"
	"github.com/edgefleet/fleet/pkg/cli/token"
	"github.com/edgefleet/fleet/pkg/cli/upgrade"
	"github.com/edgefleet/fleet/pkg/cli/validate"
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
		upgrade.NewCmd(flags, streams),
		agent.NewCmd(flags, streams),
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
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		if ns := flags.Namespace(); ns != "" {
			return validate.Namespace("namespace", ns)
		}
		return nil
	}
	root.InitDefaultCompletionCmd()
	oneLineRefusals(root)
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	return root
}

// oneLineRefusals makes every command refuse bad arguments in one line
// that says what it takes, rather than cobra's usage text or, for a group
// such as `create`, its help with exit status 0.
func oneLineRefusals(c *cobra.Command) {
	for _, sub := range c.Commands() {
		oneLineRefusals(sub)
	}
	if c.HasSubCommands() && !c.Runnable() {
		c.Args = cobra.ArbitraryArgs
		c.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			return unknownCommand(cmd, args[0])
		}
		return
	}
	if check := c.Args; check != nil {
		c.Args = func(cmd *cobra.Command, args []string) error {
			if check(cmd, args) == nil {
				return nil
			}
			return badArgs(cmd, args)
		}
	}
}

// badArgs says what a command takes, from its usage line, and what it got.
func badArgs(cmd *cobra.Command, args []string) error {
	want := strings.TrimSpace(strings.TrimPrefix(strings.TrimSuffix(cmd.UseLine(), " [flags]"), cmd.CommandPath()))
	if want == "" {
		want = "no arguments"
	}
	got := "none"
	if len(args) > 0 {
		got = fmt.Sprintf("%d: %s", len(args), strings.Join(args, " "))
	}
	return fmt.Errorf("%s takes %s; arguments given: %s", cmd.CommandPath(), want, got)
}

// unknownCommand names the subcommands a group has, and the likeliest one.
func unknownCommand(group *cobra.Command, name string) error {
	var subs []string
	for _, sub := range group.Commands() {
		if sub.IsAvailableCommand() {
			subs = append(subs, sub.Name())
		}
	}
	msg := fmt.Sprintf("unknown command %q for %q: want %s", name, group.CommandPath(), strings.Join(subs, ", "))
	if group.SuggestionsMinimumDistance <= 0 {
		group.SuggestionsMinimumDistance = 2
	}
	if s := group.SuggestionsFor(name); len(s) > 0 {
		msg += fmt.Sprintf(" (did you mean %q?)", s[0])
	}
	return errors.New(msg)
}
