package progress

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/edgefleet/fleet/pkg/cli/kube"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// Machines checks that a cluster has exactly controlPlane control-plane
// Machines and workers other Machines, all Running: what `create --wait`
// and `scale --wait` wait for. A Machine being deleted still counts, so a
// scale-down is done only once the removed Machines are gone.
func Machines(c *kube.Client, ns, cluster string, controlPlane, workers int) Check {
	return func(ctx context.Context) (string, bool, error) {
		machines := &clusterv1.MachineList{}
		if err := c.List(ctx, machines, kube.InNamespace(ns), kube.MatchingLabels{clusterv1.ClusterNameLabel: cluster}); err != nil {
			return "", false, fmt.Errorf("listing the Machines of cluster %s: %w", cluster, err)
		}
		phases := map[string]int{}
		running, cp := 0, 0
		for _, m := range machines.Items {
			p := m.Status.Phase
			if p == "" {
				p = string(clusterv1.MachinePhasePending)
			}
			phases[p]++
			if p == string(clusterv1.MachinePhaseRunning) {
				running++
			}
			if _, ok := m.Labels[clusterv1.MachineControlPlaneLabel]; ok {
				cp++
			}
		}
		want := controlPlane + workers
		done := cp == controlPlane && len(machines.Items) == want && running == want
		return MachinesLine(running, want, phases), done, nil
	}
}

// MachinesLine is the progress line: how many Machines run, and how many
// are in each phase ("no Machines yet" before Cluster API made any).
func MachinesLine(running, want int, phases map[string]int) string {
	parts := make([]string, 0, len(phases))
	for p, n := range phases {
		parts = append(parts, fmt.Sprintf("%d %s", n, p))
	}
	slices.Sort(parts)
	if len(parts) == 0 {
		parts = []string{"no Machines yet"}
	}
	return fmt.Sprintf("machines: %d/%d Running (%s)", running, want, strings.Join(parts, ", "))
}
