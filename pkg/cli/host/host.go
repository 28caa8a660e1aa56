package host

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/pkg/cli/completion"
	"github.com/edgefleet/fleet/pkg/cli/kube"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// Options is one `kubectl fleet host` action on some hosts.
type Options struct {
	flags *genericclioptions.ConfigFlags
	genericiooptions.IOStreams
	Names  []string
	action string
}

// NewCmd returns `kubectl fleet host`.
func NewCmd(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	cmd := &cobra.Command{Use: "host", Short: "Approve, cordon or uncordon edge hosts"}
	for _, a := range []struct{ use, short string }{
		{"approve", "Admit hosts enrolled with a token that requires approval"},
		{"cordon", "Keep hosts from being claimed by new machines (machines that hold them keep them)"},
		{"uncordon", "Let cordoned hosts be claimed again"},
	} {
		o := &Options{flags: flags, IOStreams: streams, action: a.use}
		cmd.AddCommand(&cobra.Command{
			Use:               a.use + " NAME...",
			Short:             a.short,
			Args:              cobra.MinimumNArgs(1),
			ValidArgsFunction: completion.Hosts(flags),
			RunE: func(cmd *cobra.Command, args []string) error {
				o.Names = args
				return o.Run(cmd.Context())
			},
		})
	}
	return cmd
}

// Run applies the action to each host by a label change (a merge patch, so
// nothing else on the host is touched).
func (o *Options) Run(ctx context.Context) error {
	conn, err := kube.Connect(o.flags)
	if err != nil {
		return err
	}
	for _, name := range o.Names {
		h := &infrav1.EdgeHost{}
		if err := conn.Client.Get(ctx, client.ObjectKey{Namespace: conn.Namespace, Name: name}, h); err != nil {
			if apierrors.IsNotFound(err) {
				return fmt.Errorf("host %q not found in namespace %s (see `kubectl fleet get hosts`)", name, conn.Namespace)
			}
			return conn.Explain(err)
		}
		patch := client.MergeFrom(h.DeepCopy())
		if h.Labels == nil {
			h.Labels = map[string]string{}
		}
		var msg string
		switch o.action {
		case "approve":
			if _, gated := h.Labels[infrav1.ApprovalLabel]; !gated {
				fmt.Fprintf(o.Out, "edgehost/%s needs no approval\n", name)
				continue
			}
			h.Labels[infrav1.ApprovalLabel] = infrav1.ApprovalApproved
			msg = "approved"
		case "cordon":
			h.Labels[infrav1.CordonedLabel] = "true"
			msg = "cordoned"
		case "uncordon":
			delete(h.Labels, infrav1.CordonedLabel)
			msg = "uncordoned"
		}
		if err := conn.Client.Patch(ctx, h, patch); err != nil {
			return conn.Explain(err)
		}
		fmt.Fprintf(o.Out, "edgehost/%s %s\n", name, msg)
	}
	return nil
}
