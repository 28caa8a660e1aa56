package version

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/internal/version"
	"github.com/edgefleet/fleet/pkg/cli/kube"
	"github.com/edgefleet/fleet/pkg/hub/gateway"
)

// Options is `kubectl fleet version`.
type Options struct {
	flags *genericclioptions.ConfigFlags
	genericiooptions.IOStreams
	HubNamespace string
	ClientOnly   bool
}

// NewCmd returns `kubectl fleet version`.
func NewCmd(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{flags: flags, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the plugin's version, and the hub's if it is reachable",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return o.Run(cmd.Context()) },
	}
	cmd.Flags().StringVar(&o.HubNamespace, "hub-namespace", "fleet-system", "Namespace of the fleet hub.")
	cmd.Flags().BoolVar(&o.ClientOnly, "client", false, "Print only the plugin's version, without contacting the cluster.")
	return cmd
}

// Run prints the versions; an unreachable hub is reported, not an error.
func (o *Options) Run(ctx context.Context) error {
	fmt.Fprintf(o.Out, "kubectl-fleet: %s\n", version.Version)
	if o.ClientOnly {
		return nil
	}
	conn, err := kube.Connect(o.flags)
	if err != nil {
		fmt.Fprintf(o.Out, "fleet-hub: unknown (%v)\n", err)
		return nil
	}
	info := &corev1.ConfigMap{}
	if err := conn.Client.Get(ctx, client.ObjectKey{Namespace: o.HubNamespace, Name: gateway.InfoConfigMap}, info); err != nil {
		fmt.Fprintf(o.Out, "fleet-hub: unknown (%v)\n", err)
		return nil
	}
	fmt.Fprintf(o.Out, "fleet-hub: %s\n", info.Data[gateway.InfoKeyVersion])
	return nil
}
