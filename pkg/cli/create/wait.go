package create

import (
	"context"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/edgefleet/fleet/pkg/cli/kube"
	"github.com/edgefleet/fleet/pkg/contract/hostphase"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// warnAboutHosts says, before anything is written, when fewer hosts match
// than machines are asked for — with what the hosts do look like.
func (o *Options) warnAboutHosts(ctx context.Context) {
	hosts := &infrav1.EdgeHostList{}
	if err := o.conn.Client.List(ctx, hosts, kube.InNamespace(o.spec.Namespace)); err != nil {
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
