package token

import (
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/edgefleet/fleet/pkg/cli/command"
	"github.com/edgefleet/fleet/pkg/cli/kube"
)

// NewCmd returns `kubectl fleet token`.
func NewCmd(flags *kube.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Manage enrollment tokens for edge machines",
		Long: "Enrollment tokens let edge machines join the fleet. A token is <id>.<secret>; the hub keeps only a hash\n" +
			"of the secret, so the full token is shown once, by `create`.",
	}
	cmd.AddCommand(newCreateCmd(flags, streams), newListCmd(flags, streams), newRevokeCmd(flags, streams))
	return cmd
}

func bindHubNamespace(cmd *cobra.Command, into *string) {
	cmd.Flags().StringVar(into, "hub-namespace", "fleet-system", "Namespace of the fleet hub (its tokens and CA).")
}

func newCreateCmd(flags *kube.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &CreateOptions{flags: flags, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create an enrollment token and print the fleet-agent command that uses it",
		Example: `  # A token for one machine at store 17, valid for a day
  kubectl fleet token create --usages 1 --labels site=store-17,topology.kubernetes.io/zone=eu-west

  # A token for a batch of images, whose hosts wait for approval
  kubectl fleet token create --ttl 168h --usages 50 --require-approval`,
		Args: cobra.NoArgs,
		RunE: command.RunE(o),
	}
	bindHubNamespace(cmd, &o.HubNamespace)
	cmd.Flags().DurationVar(&o.TTL, "ttl", 24*time.Hour, "How long the token is valid; 0 never expires (discouraged).")
	cmd.Flags().IntVar(&o.Usages, "usages", 1, "How many machines may enroll with it; 0 is unlimited.")
	cmd.Flags().StringSliceVar(&o.Labels, "labels", nil, "Labels to put on every host enrolled with it (k=v,…).")
	cmd.Flags().BoolVar(&o.RequireApproval, "require-approval", false, "Hosts wait for `kubectl fleet host approve` before they can be used.")
	cmd.Flags().StringVar(&o.HubURL, "hub-url", "", "Gateway URL agents dial (default: the one the hub publishes).")
	cmd.Flags().StringVar(&o.Description, "description", "", "Free text kept with the token.")
	return cmd
}

func newListCmd(flags *kube.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &ListOptions{flags: flags, IOStreams: streams}
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List enrollment tokens (never their secrets)",
		Args:    cobra.NoArgs,
		RunE:    command.RunE(o),
	}
	bindHubNamespace(cmd, &o.HubNamespace)
	return cmd
}

func newRevokeCmd(flags *kube.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &RevokeOptions{flags: flags, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke an enrollment token: no further machine can enroll with it",
		Long:  "Revoke an enrollment token. Hosts already enrolled keep their identity; delete their EdgeHost to cut them off.",
		Args:  cobra.ExactArgs(1),
		RunE:  command.RunE(o),
	}
	bindHubNamespace(cmd, &o.HubNamespace)
	return cmd
}
