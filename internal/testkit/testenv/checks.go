package testenv

import (
	"context"
	"fmt"
	"strings"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// The checks below are for eventually-style waits in the end-to-end
// suites: nil when the fleet is as wanted, else what it is instead. An
// empty namespace means all namespaces.

// MachinesRunning checks that there are want Machines, all Running with a
// nodeRef.
func MachinesRunning(ctx context.Context, c client.Client, ns string, want int) error {
	machines := &clusterv1.MachineList{}
	if err := c.List(ctx, machines, client.InNamespace(ns)); err != nil {
		return err
	}
	if len(machines.Items) != want {
		return fmt.Errorf("%d machines, want %d", len(machines.Items), want)
	}
	var notYet []string
	for _, m := range machines.Items {
		if m.Status.Phase != string(clusterv1.MachinePhaseRunning) || !m.Status.NodeRef.IsDefined() {
			notYet = append(notYet, fmt.Sprintf("%s=%s", m.Name, m.Status.Phase))
		}
	}
	if len(notYet) > 0 {
		return fmt.Errorf("not Running: %s", strings.Join(notYet, ", "))
	}
	return nil
}

// HostsAvailable checks that exactly want EdgeHosts are Available.
func HostsAvailable(ctx context.Context, c client.Client, ns string, want int) error {
	hosts := &infrav1.EdgeHostList{}
	if err := c.List(ctx, hosts, client.InNamespace(ns)); err != nil {
		return err
	}
	n := 0
	var phases []string
	for _, h := range hosts.Items {
		phases = append(phases, h.Name+"="+string(h.Status.Phase))
		if h.Status.Phase == infrav1.HostAvailable {
			n++
		}
	}
	if n != want {
		return fmt.Errorf("%d Available, want %d (%s)", n, want, strings.Join(phases, ", "))
	}
	return nil
}

// HostsConnected checks that exactly want EdgeHosts have AgentConnected
// True.
func HostsConnected(ctx context.Context, c client.Client, ns string, want int) error {
	hosts := &infrav1.EdgeHostList{}
	if err := c.List(ctx, hosts, client.InNamespace(ns)); err != nil {
		return err
	}
	n := 0
	for _, h := range hosts.Items {
		if apimeta.IsStatusConditionTrue(h.Status.Conditions, infrav1.AgentConnectedCondition) {
			n++
		}
	}
	if n != want {
		return fmt.Errorf("%d hosts connected, want %d", n, want)
	}
	return nil
}
