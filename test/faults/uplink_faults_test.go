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

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/internal/testkit"
	"github.com/edgefleet/fleet/internal/testkit/testenv"
	"github.com/edgefleet/fleet/internal/testkit/testhost"
)

// convergeBound is how long the fleet has, once the faults stop, to tell
// the truth again; the suite reports how long it took.
const convergeBound = 3 * time.Minute

// A site's uplink is cut, half-opened and slowed at random while its four
// hosts are provisioned, while they idle (with one cut longer than every
// timeout), and while two of their Machines are deleted. Whatever the
// schedule: no Machine is bootstrapped twice, no host serves two Machines,
// no host is reset but the two whose Machines were deleted, and the API
// server reads as the agents' own records say within convergeBound of the
// last fault.
func TestUplinkFaults(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	t.Logf("seed %d (replay: go test ./test/faults -run 'TestUplinkFaults$' -args -faults.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0)) //nolint:gosec // a replayable schedule, not a secret
	ctx, c := context.Background(), hub.Client
	h := &history{seed: seed}

	ns := hub.NewNamespace(t, "faults")
	gw := startHub(t, ns)
	up := newUplink(t, gw.Addr())
	site, err := testhost.NewSite(fmt.Sprintf("fleet-faults-%d", os.Getpid()%100000), "10.94.1")
	must(t, err)
	t.Cleanup(func() { _ = site.Close() })
	const router = "127.0.0.1:17443"
	_, err = site.Forward(router, up.addr())
	must(t, err)

	// The simulated kubeadm reaches the workload API server (outside)
	// at the same address from inside the site, not through the uplink:
	// the faults are the hub's link's, not the cluster's.
	workloadURL, err := url.Parse(workload.Config.Host)
	must(t, err)
	_, err = site.Forward(workloadURL.Host, workloadURL.Host)
	must(t, err)

	agentBin, simBin := build(t)
	wkc := createCluster(t, ns)
	cpToken, wToken := tokenFor(t, ns, "cp"), tokenFor(t, ns, "worker")
	var agents []*agent
	for i, name := range []string{"cp-0", "w-0", "w-1", "w-2"} {
		token := wToken
		if i == 0 {
			token = cpToken
		}
		agents = append(agents, startAgent(t, site, name, agentBin, simBin, "https://"+router, gw.CA().Pin(), token, wkc))
	}
	testkit.Eventually(t, 2*time.Minute, time.Second, "four hosts enrolled and Available", func() error {
		return testenv.HostsAvailable(ctx, c, ns, 4)
	})
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		if err := h.readAgents(agents); err != nil {
			t.Logf("reading the agents' histories: %v", err)
		}
		path, err := h.write(t.TempDir())
		t.Logf("seed %d; history:\n%s", seed, strings.Join(lines(h), "\n"))
		if err == nil {
			// Kept where a failing run's files go: the test's own
			// temporary directory is removed with it.
			if keep, kerr := h.write(os.TempDir()); kerr == nil {
				path = keep
			}
			t.Logf("history written to %s", path)
		}
	})

	phase := func(name string, faults []fault, orders func(), want []string) {
		t.Helper()
		h.add("phase", "", name)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for _, f := range faults {
				time.Sleep(f.After)
				h.add("fault", "", f.String())
				if err := up.apply(f.State); err != nil {
					t.Error(err)
				}
				time.Sleep(f.For)
				if err := up.apply("up"); err != nil {
					t.Error(err)
				}
			}
		}()
		orders()
		<-done
		h.add("fault", "", "uplink up")
		stopped := time.Now()
		testkit.Eventually(t, convergeBound, time.Second, name+": the API server tells the agents' truth", func() error {
			// The agents' records are read afresh each time: a bootstrap
			// or reset may still be under way.
			cur := &history{seed: seed, events: h.snapshot()}
			if err := cur.readAgents(agents); err != nil {
				return err
			}
			return cur.converged(ctx, c, ns, want)
		})
		took := time.Since(stopped)
		h.add("converged", "", took.Round(10*time.Millisecond).String())
		t.Logf("%s: converged %s after the faults stopped (%d faults: %v)", name, took.Round(10*time.Millisecond), len(faults), faults)
	}

	rounds := *roundsFlag
	all := []string{"cp", "w0", "w1", "w2"}
	phase("provisioning", schedule(rng, rounds), func() {
		for _, m := range all {
			role := "worker"
			if m == "cp" {
				role = "cp"
			}
			h.add("create", m, "")
			createMachine(t, ns, m, role)
		}
	}, all)
	// Longer than every timeout: the agents' keepalive (2 s), the hub's
	// silence limit (8 s) and the reconnection back-off (3 s).
	phase("idle", append(schedule(rng, rounds), fault{State: "half-open", For: 20 * time.Second}, fault{State: "cut", For: 20 * time.Second}), func() {}, all)
	phase("deletion", schedule(rng, rounds), func() {
		for _, m := range []string{"w1", "w2"} {
			h.add("delete", m, "")
			must(t, c.Delete(ctx, &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: m}}))
		}
	}, []string{"cp", "w0"})
	testkit.Eventually(t, convergeBound, time.Second, "the deleted Machines gone", func() error {
		for _, m := range []string{"w1", "w2"} {
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: m}, &clusterv1.Machine{}); err == nil {
				return fmt.Errorf("Machine %s still exists", m)
			}
		}
		return nil
	})

	must(t, h.readAgents(agents))
	if broken := h.check(); len(broken) > 0 {
		t.Fatalf("seed %d broke %d invariant(s):\n  %s", seed, len(broken), strings.Join(broken, "\n  "))
	}
	resets := 0
	for _, e := range h.snapshot() {
		if e.What == "reset" {
			resets++
		}
	}
	if resets != 2 {
		t.Fatalf("seed %d: %d resets, want 2 (the hosts of w1 and w2):\n%s", seed, resets, strings.Join(lines(h), "\n"))
	}
}

// schedule draws n faults: each a state of the uplink, after a pause of
// up to 4 s, for 3 to 12 s.
func schedule(rng *rand.Rand, n int) []fault {
	states := []string{"cut", "half-open", "slow"}
	out := make([]fault, n)
	for i := range out {
		out[i] = fault{State: states[rng.IntN(len(states))], After: time.Duration(rng.IntN(4000)) * time.Millisecond,
			For: 3*time.Second + time.Duration(rng.IntN(9000))*time.Millisecond}
	}
	return out
}
