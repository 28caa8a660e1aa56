package get

import (
	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/edgefleet/fleet/pkg/cli/command"
	"github.com/edgefleet/fleet/pkg/cli/kube"
)

// NewCmd returns `kubectl fleet get`.
func NewCmd(flags *kube.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := NewOptions(flags, streams)
	cmd := &cobra.Command{
		Use:   "get (clusters|machines|hosts|rollouts|releases)",
		Short: "List clusters, machines, edge hosts, agent roll-outs or agent releases as tables",
		Long: "The tables have the columns of the kinds' CRDs, as `kubectl get` shows them; -o wide adds the wide columns and the labels.\n" +
			"-w prints the list, then a row for every change (added, changed or deleted) until Ctrl-C, as `kubectl get -w` does.",
		ValidArgs: []string{"clusters", "machines", "hosts", "rollouts", "releases"},
		Args:      cobra.ExactArgs(1),
		Example: `  kubectl fleet get hosts
  kubectl fleet get hosts -A -l 'site in (store-17,store-18)' -o wide
  kubectl fleet get machines -o yaml
  kubectl fleet get hosts --sort-by .metadata.creationTimestamp --no-headers
  kubectl fleet get machines -w
  kubectl fleet get rollouts`,
		RunE: command.RunE(o),
	}
	cmd.Flags().BoolVarP(&o.AllNamespaces, "all-namespaces", "A", false, "List across all namespaces.")
	cmd.Flags().StringVarP(&o.Selector, "selector", "l", "", "Label selector, as kubectl's -l (k=v, k!=v, 'k in (a,b)', !k, …).")
	cmd.Flags().BoolVar(&o.ShowLabels, "show-labels", false, "Show all labels as the last column (-o wide does too).")
	cmd.Flags().BoolVar(&o.NoHeaders, "no-headers", false, "Print the table without its header line.")
	cmd.Flags().StringVar(&o.SortBy, "sort-by", "", "Sort by the value at a JSONPath, as kubectl's --sort-by (e.g. '.metadata.creationTimestamp', '{.status.phase}').")
	cmd.Flags().BoolVarP(&o.Watch, "watch", "w", false, "After the list, print a line for every change (added, changed or deleted) until Ctrl-C, as kubectl get -w.")
	o.PrintFlags.AddFlags(cmd)
	cmd.Flags().Lookup("output").Usage = "Output format: wide, json, yaml, name, jsonpath=… or go-template=…."
	return cmd
}
