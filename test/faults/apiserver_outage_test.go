package faults

import (
	"net/url"
	"strings"
	"testing"
	"time"
)

// The hub loses the API server — every connection to it reset, new ones
// refused, as when it is stopped — for 25 to 40 s, longer than the hub's
// Lease (15 s) and every client timeout, once while a site's hosts are
// provisioned and once while two of their Machines are deleted. The hub
// runs as its Deployment does, leader-elected, and is started again when
// it exits. The hosts keep running, nothing is done twice or lost, and
// the API server reads as the agents' records once it is back.
//
// Cluster API's controllers, in the test's process, keep their own
// connection: the outage is the hub's.
func TestAPIServerOutage(t *testing.T) {
	ns := hub.NewNamespace(t, "faults")
	r := newRun(t, ns)
	api, err := url.Parse(hub.Config.Host)
	must(t, err)
	relay := newUplink(t, api.Host, "", "")
	hp := startHubProcess(t, ns, hubOptions{apiServer: relay.addr(), leaderElect: true})
	site := newSite(t)
	const router = "127.0.0.1:17443"
	_, err = site.Forward(router, hp.gateway)
	must(t, err)
	r.setAgents(startAgents(t, site, ns, 4, "a"+strings.TrimPrefix(ns, "faults-"), "https://"+router, hp.pin(t), hostOptions{}))

	outage := func(f fault) error {
		if err := relay.apply("cut"); err != nil {
			return err
		}
		time.Sleep(f.For)
		return relay.apply("up")
	}
	draw := func() []fault {
		return []fault{{State: "API server gone", After: time.Duration(1000+r.intN(3000)) * time.Millisecond,
			For: time.Duration(25000+r.intN(15000)) * time.Millisecond}}
	}
	all := []string{"cp", "w0", "w1", "w2"}
	r.phase("provisioning", draw(), outage, func() { r.createMachines(all...) }, all)
	r.phase("deletion", draw(), outage, func() { r.deleteMachines("w1", "w2") }, all[:2])
	r.waitGone("w1", "w2")
	r.check(2)
	hp.mu.Lock()
	t.Logf("the hub exited and was started again %d times", hp.restarts)
	hp.mu.Unlock()
}
