package kubeconfig

import (
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/edgefleet/fleet/pkg/cli/command"
	"github.com/edgefleet/fleet/pkg/cli/completion"
	"github.com/edgefleet/fleet/pkg/cli/kube"
)

// NewCmd returns `kubectl fleet kubeconfig`.
func NewCmd(flags *kube.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{flags: flags, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "kubeconfig CLUSTER [--proxy-url http://HUB:7444]",
		Short: "Print a kubeconfig that reaches an edge cluster through the hub",
		Long: "Print the admin kubeconfig of a fleet cluster. Its cluster entry has the hub's edge-reach proxy as\n" +
			"proxy-url, with this cluster's proxy credentials, so kubectl reaches the cluster's API server through\n" +
			"one of its agents from anywhere the hub's proxy is reachable. TLS is end to end: the hub never sees\n" +
			"inside the connection. Treat the output as a secret: it holds the cluster's admin credentials.",
		Example: "  kubectl fleet kubeconfig store-042 > store-042.kubeconfig\n" +
			"  # a kubeconfig leaked: retire the credential in it\n" +
			"  kubectl fleet kubeconfig store-042 --rotate-credential > store-042.kubeconfig\n" +
			"  kubectl --kubeconfig store-042.kubeconfig get nodes\n\n" +
			"  # from outside the management cluster, through the proxy's external address:\n" +
			"  kubectl fleet kubeconfig store-042 --proxy-url http://fleet-proxy.example.com:7444",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completion.Clusters(flags),
		RunE:              command.RunE(o),
	}
	cmd.Flags().StringVar(&o.ProxyURL, "proxy-url", "", "Reach the hub's edge-reach proxy at this URL instead of the one the hub wrote (http://host:port).")
	cmd.Flags().BoolVar(&o.RotateCredential, "rotate-credential", false, "Retire the cluster's edge-reach proxy credential (every kubeconfig printed before stops working; Cluster API's Secret is rewritten by the hub) and print a kubeconfig with the new one.")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", 2*time.Minute, "With --rotate-credential: how long to wait for the hub to write the new credential.")
	return cmd
}
