package faults

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/fleet/internal/testkit"
)

// Two hub replicas, leader-elected, serve one site through a load
// balancer; in the middle of the provisioning and of the deletion the
// leader is killed with SIGKILL, and started again 5 to 15 s later, twice
// a phase. The other replica takes the Lease and the agents; nothing is
// done twice or lost, and the API server reads as the agents' records.
func TestReplicaFailover(t *testing.T) {
	ns := hub.NewNamespace(t, "faults")
	r := newRun(t, ns)
	a := startHubProcess(t, ns, hubOptions{leaderElect: true, replica: "hub-a"})
	testkit.Eventually(t, time.Minute, 200*time.Millisecond, "hub-a leads", func() error {
		if !a.leads() {
			return errors.New("no Lease yet")
		}
		return nil
	})
	b := startHubProcess(t, ns, hubOptions{leaderElect: true, replica: "hub-b"})
	lb := testkit.NewForwarder(t, a.gateway, b.gateway)
	site := newSite(t)
	const router = "127.0.0.1:17443"
	_, err := site.Forward(router, lb.Addr())
	must(t, err)
	n := hosts(4)
	r.setAgents(startAgents(t, site, ns, n, "f"+strings.TrimPrefix(ns, "faults-"), "https://"+router, a.pin(t), hostOptions{}))

	failover := func(f fault) error {
		var leader *hubProcess
		testkit.Eventually(t, time.Minute, 200*time.Millisecond, "a replica leads", func() error {
			for _, hp := range []*hubProcess{a, b} {
				if hp.leads() {
					leader = hp
					return nil
				}
			}
			return errors.New("no replica leads")
		})
		r.h.add("fault", "", "killed the leader, "+map[bool]string{true: "hub-a", false: "hub-b"}[leader == a])
		leader.kill()
		time.Sleep(f.For)
		return leader.start()
	}
	draw := func() []fault {
		out := make([]fault, 2)
		for i := range out {
			out[i] = fault{State: "leader killed", After: time.Duration(2000+r.intN(4000)) * time.Millisecond,
				For: time.Duration(5000+r.intN(10000)) * time.Millisecond}
		}
		return out
	}
	all := []string{"cp"}
	for i := range n - 1 {
		all = append(all, fmt.Sprintf("w%d", i))
	}
	r.phase("provisioning", draw(), failover, func() { r.createMachines(all...) }, all)
	r.phase("deletion", draw(), failover, func() { r.deleteMachines(all[2:]...) }, all[:2])
	r.waitGone(all[2:]...)
	r.check(len(all) - 2)
}
