package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/fleet/internal/testkit"
	"github.com/edgefleet/fleet/internal/testkit/testenv"
	"github.com/edgefleet/fleet/internal/testkit/testhost"
)

// A site's uplink is cut, half-opened, slowed and made lossy at random
// while its four hosts are provisioned, while they idle (with spells
// longer than every timeout), and while two of their Machines are
// deleted. Whatever the schedule: no Machine is bootstrapped twice, no
// host serves two Machines, no host is reset but the two whose Machines
// were deleted, and the API server reads as the agents' own records say
// within convergeBound of the last fault.
func TestUplinkFaults(t *testing.T) {
	ns := hub.NewNamespace(t, "faults")
	r := newRun(t, ns)
	gw := startHub(t, ns)
	site := newSite(t)
	const routerPort = "17443"
	router := "127.0.0.1:" + routerPort
	up := newUplink(t, gw.Addr(), site.Path(), routerPort)
	_, err := site.Forward(router, up.addr())
	must(t, err)
	r.setAgents(startAgents(t, site, ns, 4, "u"+strings.TrimPrefix(ns, "faults-"), "https://"+router, gw.CA().Pin(), hostOptions{}))

	spell := func(f fault) error {
		if err := up.apply(f.State); err != nil {
			return err
		}
		time.Sleep(f.For)
		return up.apply("up")
	}
	rounds := *roundsFlag
	all := []string{"cp", "w0", "w1", "w2"}
	r.phase("provisioning", schedule(r.rng, rounds), spell, func() { r.createMachines(all...) }, all)
	// Longer than every timeout: the agents' keepalive (2 s), the hub's
	// silence limit (8 s) and the reconnection back-off (3 s).
	r.phase("idle", append(schedule(r.rng, rounds), fault{State: "half-open", For: 20 * time.Second}, fault{State: "cut", For: 20 * time.Second}),
		spell, func() {}, all)
	r.phase("deletion", schedule(r.rng, rounds), spell, func() { r.deleteMachines("w1", "w2") }, []string{"cp", "w0"})
	r.waitGone("w1", "w2")
	r.check(2)
}

// schedule draws n faults of the uplink: each a state, after a pause of
// up to 4 s, for 3 to 12 s.
func schedule(rng *rand.Rand, n int) []fault {
	states := []string{"cut", "half-open", "slow", "lossy"}
	out := make([]fault, n)
	for i := range out {
		out[i] = fault{State: states[rng.IntN(len(states))], After: time.Duration(rng.IntN(4000)) * time.Millisecond,
			For: 3*time.Second + time.Duration(rng.IntN(9000))*time.Millisecond}
	}
	return out
}

// newSite makes the site's network namespace. The simulated kubeadm
// reaches the workload API server (outside) at the same address from
// inside, not through the uplink: the faults are the hub's link's, not
// the cluster's.
func newSite(t *testing.T) *testhost.Site {
	t.Helper()
	site, err := testhost.NewSite(fmt.Sprintf("fleet-faults-%d", os.Getpid()%100000), "10.94.1")
	must(t, err)
	t.Cleanup(func() { _ = site.Close() })
	w, err := url.Parse(workload.Config.Host)
	must(t, err)
	_, err = site.Forward(w.Host, w.Host)
	must(t, err)
	return site
}

// startAgents starts n hosts in the site: <prefix>-cp-0 (labelled
// role=cp), then <prefix>-w-0 … (role=worker), and waits until they are
// Available. Node names are the workload cluster's, which every run
// shares: each has its own prefix.
func startAgents(t *testing.T, site *testhost.Site, ns string, n int, prefix, hubURL, pin string, opts hostOptions) []*agent {
	t.Helper()
	agentBin, simBin := build(t)
	wkc := createCluster(t, ns)
	cpToken, wToken := tokenFor(t, ns, "cp"), tokenFor(t, ns, "worker")
	var agents []*agent
	for i := range n {
		name, token := fmt.Sprintf("%s-w-%d", prefix, i-1), wToken
		if i == 0 {
			name, token = prefix+"-cp-0", cpToken
		}
		o := opts
		if i < len(opts.clocks) {
			o.clock = opts.clocks[i]
		}
		agents = append(agents, startAgent(t, site, name, agentBin, simBin, hubURL, pin, token, wkc, o))
	}
	testkit.Eventually(t, 2*time.Minute, time.Second, fmt.Sprintf("%d hosts enrolled and Available", n), func() error {
		return testenv.HostsAvailable(context.Background(), hub.Client, ns, n)
	})
	return agents
}
