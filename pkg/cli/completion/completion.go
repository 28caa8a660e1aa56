package completion

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/edgefleet/fleet/pkg/cli/kube"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// Completer is a cobra ValidArgsFunction.
type Completer func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective)

func names(flags *kube.ConfigFlags, list kube.ObjectList, each func(kube.ObjectList) []string) Completer {
	return func(_ *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
		conn, err := kube.Connect(flags)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := conn.Client.List(ctx, list, kube.InNamespace(conn.Namespace)); err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		taken := map[string]bool{}
		for _, a := range args {
			taken[a] = true
		}
		var out []string
		for _, n := range each(list) {
			if strings.HasPrefix(n, prefix) && !taken[n] {
				out = append(out, n)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// Hosts completes EdgeHost names.
func Hosts(flags *kube.ConfigFlags) Completer {
	return names(flags, &infrav1.EdgeHostList{}, func(l kube.ObjectList) []string {
		var out []string
		for _, h := range l.(*infrav1.EdgeHostList).Items {
			out = append(out, h.Name)
		}
		return out
	})
}

// Clusters completes Cluster names (one argument).
func Clusters(flags *kube.ConfigFlags) Completer {
	inner := names(flags, &clusterv1.ClusterList{}, func(l kube.ObjectList) []string {
		var out []string
		for _, c := range l.(*clusterv1.ClusterList).Items {
			out = append(out, c.Name)
		}
		return out
	})
	return func(cmd *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return inner(cmd, args, prefix)
	}
}
