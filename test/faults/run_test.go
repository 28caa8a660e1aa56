package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/internal/testkit"
	"github.com/edgefleet/fleet/test/faults/results"
)

// convergeBound is how long the fleet has, once the faults stop, to tell
// the truth again; the suite reports how long it took.
const convergeBound = 3 * time.Minute

// run is one run of a fault test: its seed, its history and its hosts.
type run struct {
	t      *testing.T
	seed   int64
	rngMu  sync.Mutex
	rng    *rand.Rand
	h      *history
	ns     string
	agents []*agent
	// pause is how long each bootstrap sleeps after it records itself.
	pause time.Duration

	// res is the run's outcome, written to -faults.results at its end.
	resMu sync.Mutex
	res   results.Run
}

// newRun starts a run from -faults.seed or a new seed, which it logs
// with the command that replays it.
func newRun(t *testing.T, ns string) *run {
	seed := *seedFlag
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	replay := fmt.Sprintf("go test ./test/faults -run '%s$' -args -faults.seed=%d -faults.rounds=%d", t.Name(), seed, *roundsFlag)
	if *hostsFlag > 0 {
		replay += fmt.Sprintf(" -faults.hosts=%d", *hostsFlag)
	}
	t.Logf("seed %d (replay: %s)", seed, replay)
	r := &run{t: t, seed: seed, rng: rand.New(rand.NewPCG(uint64(seed), 0)), h: &history{seed: seed}, ns: ns, //nolint:gosec // a replayable schedule, not a secret
		res: results.Run{Test: t.Name(), Seed: seed, When: time.Now().UTC().Truncate(time.Second), Replay: replay}}
	if dir := *resultsFlag; dir != "" {
		start := time.Now()
		t.Cleanup(func() {
			r.resMu.Lock()
			defer r.resMu.Unlock()
			r.res.Hosts, r.res.Passed = len(r.agents), !t.Failed()
			r.res.Seconds = time.Since(start).Round(time.Second).Seconds()
			if err := results.Write(dir, r.res); err != nil {
				t.Errorf("writing the run's outcome: %v", err)
			}
		})
	}
	return r
}

// count adds to the run's tallies of faults injected and orders given.
func (r *run) count(faults, orders int) {
	r.resMu.Lock()
	defer r.resMu.Unlock()
	r.res.Faults += faults
	r.res.Orders += orders
}

// intN draws from the run's seed; safe for the goroutines that inject
// faults.
func (r *run) intN(n int) int {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return r.rng.IntN(n)
}

// setAgents records the run's hosts. A failing run then logs its history
// and writes it to a file, before the hosts' roots (and their records)
// are removed.
func (r *run) setAgents(agents []*agent) {
	t := r.t
	r.agents = agents
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		if err := r.h.readAgents(r.agents); err != nil {
			t.Logf("reading the agents' histories: %v", err)
		}
		t.Logf("seed %d; history:\n%s", r.seed, strings.Join(lines(r.h), "\n"))
		// Kept where a failing run's files go: the test's own temporary
		// directory is removed with it.
		if path, err := r.h.write(os.TempDir()); err == nil {
			t.Logf("history written to %s", path)
		}
	})
}

// phase gives orders while inject plays the faults one after the other,
// then waits until the API server reads as the agents' records say, with
// the Machines in want Running, and reports how long that took after the
// last fault.
func (r *run) phase(name string, faults []fault, inject func(fault) error, orders func(), want []string) {
	t := r.t
	t.Helper()
	r.play(name, faults, inject, orders)
	took := r.converge(name, time.Now(), want)
	t.Logf("%s: converged %s after the faults stopped (%d faults: %v)", name, took, len(faults), faults)
}

// play gives orders while inject plays the faults one after the other,
// and returns once both are done.
func (r *run) play(name string, faults []fault, inject func(fault) error, orders func()) {
	t := r.t
	r.h.add("phase", "", name)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, f := range faults {
			time.Sleep(f.After)
			r.h.add("fault", "", f.String())
			r.count(1, 0)
			if err := inject(f); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	orders()
	<-done
	r.h.add("fault", "", "faults over")
}

// converge waits until the API server reads as the agents' records say,
// with the Machines in want Running, and returns how long that took from
// since.
func (r *run) converge(name string, since time.Time, want []string) time.Duration {
	t := r.t
	t.Helper()
	testkit.Eventually(t, convergeBound, time.Second, name+": the API server tells the agents' truth", func() error {
		// The agents' records are read afresh each time: a bootstrap or
		// reset may still be under way.
		cur := &history{seed: r.seed, events: r.h.snapshot()}
		if err := cur.readAgents(r.agents); err != nil {
			return err
		}
		return cur.converged(context.Background(), hub.Client, r.ns, want)
	})
	took := time.Since(since).Round(10 * time.Millisecond)
	r.h.add("converged", "", name+" "+took.String())
	r.resMu.Lock()
	r.res.Phases = append(r.res.Phases, results.Phase{Name: name, ConvergeSeconds: took.Seconds()})
	r.resMu.Unlock()
	return took
}

// check reads the agents' histories and fails the test with every
// invariant the run broke, and unless exactly resets resets were ordered.
func (r *run) check(resets int) {
	t := r.t
	t.Helper()
	must(t, r.h.readAgents(r.agents))
	broken, n := r.h.check()
	r.resMu.Lock()
	r.res.Violations = broken
	r.resMu.Unlock()
	if len(broken) > 0 {
		t.Fatalf("seed %d broke %d invariant(s):\n  %s", r.seed, len(broken), strings.Join(broken, "\n  "))
	}
	if n != resets {
		t.Fatalf("seed %d: %d resets, want %d", r.seed, n, resets)
	}
}

// createMachines creates the Machines ("cp" a control plane) and
// records each in the history.
func (r *run) createMachines(names ...string) {
	for _, m := range names {
		role := "worker"
		if m == "cp" {
			role = "cp"
		}
		r.h.add("create", m, "")
		r.count(0, 1)
		createMachine(r.t, r.ns, m, role, r.pause)
	}
}

// deleteMachines deletes the Machines, each recorded first: the
// history's order for its host's reset.
func (r *run) deleteMachines(names ...string) {
	for _, m := range names {
		r.h.add("delete", m, "")
		r.count(0, 1)
		must(r.t, hub.Client.Delete(context.Background(), &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: m}}))
	}
}

// waitGone waits until the Machines are gone.
func (r *run) waitGone(names ...string) {
	r.t.Helper()
	testkit.Eventually(r.t, convergeBound, time.Second, "the deleted Machines gone", func() error {
		for _, m := range names {
			err := hub.Client.Get(context.Background(), client.ObjectKey{Namespace: r.ns, Name: m}, &clusterv1.Machine{})
			if err == nil {
				return fmt.Errorf("Machine %s still exists", m)
			}
			if !apierrors.IsNotFound(err) {
				return err
			}
		}
		return nil
	})
}
