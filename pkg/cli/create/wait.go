package create

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/pkg/contract/hostphase"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// warnAboutHosts says, before anything is written, when fewer hosts match
// than machines are asked for — with what the hosts do look like.
func (o *Options) warnAboutHosts(ctx context.Context) {
	hosts := &infrav1.EdgeHostList{}
	if err := o.conn.Client.List(ctx, hosts, client.InNamespace(o.spec.Namespace)); err != nil {
		return
	}
	check := func(role string, sel *metav1.LabelSelector, want int32) {
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			return
		}
		free := 0
		for i := range hosts.Items {
			if s.Matches(labels.Set(hosts.Items[i].Labels)) && hostphase.IsClaimable(&hosts.Items[i]) {
				free++
			}
		}
		if int32(free) >= want {
			return
		}
		seen := map[string]int{}
		for _, h := range hosts.Items {
			seen[labels.FormatLabels(h.Labels)]++
		}
		var kinds []string
		for l, n := range seen {
			kinds = append(kinds, fmt.Sprintf("%d× {%s}", n, l))
		}
		slices.Sort(kinds)
		fmt.Fprintf(o.ErrOut, "warning: %d %s machine(s) wanted but only %d Available host(s) in namespace %s match {%s}; the rest will wait for hosts. Hosts there: %s\n",
			want, role, free, o.spec.Namespace, metav1.FormatLabelSelector(sel), strings.Join(kinds, ", "))
	}
	check("control-plane", o.spec.ControlPlaneSelector, o.spec.ControlPlaneMachines)
	check("worker", o.spec.WorkerSelector, o.spec.WorkerMachines)
}

// WaitForMachines waits until want Machines of the cluster are Running,
// printing a line whenever the count by phase changes.
func WaitForMachines(ctx context.Context, c client.Client, out io.Writer, ns, cluster string, want int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := ""
	for {
		machines := &clusterv1.MachineList{}
		if err := c.List(ctx, machines, client.InNamespace(ns), client.MatchingLabels{clusterv1.ClusterNameLabel: cluster}); err != nil {
			return err
		}
		phases := map[string]int{}
		running := 0
		for _, m := range machines.Items {
			p := m.Status.Phase
			if p == "" {
				p = "Pending"
			}
			phases[p]++
			if p == string(clusterv1.MachinePhaseRunning) {
				running++
			}
		}
		line := machinesLine(running, want, phases)
		if line != last {
			fmt.Fprintln(out, line)
			last = line
		}
		if running >= want && len(machines.Items) == want {
			fmt.Fprintf(out, "cluster %s: every machine Running\n", cluster)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("timed out waiting for cluster %s: %s", cluster, line)
		case <-time.After(2 * time.Second):
		}
	}
}

// machinesLine is the progress line: how many Machines run, and how many
// are in each phase ("no Machines yet" before Cluster API made any).
func machinesLine(running, want int, phases map[string]int) string {
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
