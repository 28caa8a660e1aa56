package faults

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/internal/testkit"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/test/faults/results"
)

// The power of edge hosts is cut — every process of the host killed at
// once, then the host booted again — in the middle of workers'
// bootstraps and in the middle of resets. An interrupted bootstrap is
// never run again: its Machine fails with a reason, and is deleted and
// replaced as a MachineHealthCheck would; an interrupted reset is
// carried out when the host is back; no host is reset without an order;
// and the replacements, on the hosts that lost power, end Running.
func TestPowerCuts(t *testing.T) {
	r, _ := siteOnHub(t, "p", hostOptions{pause: 3 * time.Second})
	workers := []string{"w0", "w1", "w2"}
	all := append([]string{"cp"}, workers...)

	// The control plane's bootstrap is left alone: the workers' bootstrap
	// data waits for it, so cutting it would only test waiting.
	cutter := r.cutPower("bootstrap", func(machine string) bool { return machine != "cp" })
	r.createMachines(all...)
	failed := r.outcomes(all)
	cut := cutter.stop()
	for _, m := range failed {
		if !cut[m] {
			t.Fatalf("Machine %s failed though no power cut fell in its bootstrap (cut: %v)", m, cut)
		}
	}
	t.Logf("bootstraps cut: %v; Machines failed: %v", slices.Sorted(maps.Keys(cut)), failed)

	deleted := append([]string(nil), failed...)
	if !slices.Contains(deleted, "w2") {
		deleted = append(deleted, "w2")
	}
	cutter = r.cutPower("reset", func(string) bool { return true })
	start := time.Now()
	r.deleteMachines(deleted...)
	r.waitGone(deleted...)
	cut = cutter.stop()
	kept := slices.DeleteFunc(slices.Clone(all), func(m string) bool { return slices.Contains(deleted, m) })
	r.converge("deletion", start, kept)
	t.Logf("resets cut on hosts: %v", slices.Sorted(maps.Keys(cut)))

	var again []string
	for _, m := range deleted {
		again = append(again, m+"-b")
	}
	start = time.Now()
	r.createMachines(again...)
	r.converge("replacement", start, append(kept, again...))
	r.check(len(deleted))
}

// watcher does something to hosts as their records show an act begin.
type watcher struct {
	cancel context.CancelFunc
	done   chan struct{}
	busy   sync.WaitGroup
	mu     sync.Mutex
	hit    map[string]bool // machine (bootstrap) or host (reset) → done to
}

// watchActs watches the hosts' records for acts of kind what ("bootstrap"
// or "reset"); for each that begins, on a Machine that may be hit, the
// run's seed decides whether to do to its host, at once — the first is
// always hit.
func (r *run) watchActs(what string, may func(machine string) bool, do func(*agent) error) *watcher {
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{cancel: cancel, done: make(chan struct{}), hit: map[string]bool{}}
	// A test that fails before it stops the watch must not leave it
	// reading hosts whose roots are gone.
	r.t.Cleanup(func() { w.stop() })
	seen := map[string]int{} // host → lines of its record read
	go func() {
		defer close(w.done)
		for first := true; ctx.Err() == nil; time.Sleep(50 * time.Millisecond) {
			for _, a := range r.agents {
				acts, err := a.records()
				if err != nil {
					r.t.Error(err)
					return
				}
				fresh := acts[min(seen[a.name], len(acts)):]
				seen[a.name] = len(acts)
				for _, e := range fresh {
					if e.What != what || !may(e.Machine) || (!first && r.intN(2) == 0) {
						continue
					}
					first = false
					w.mu.Lock()
					w.hit[cmp.Or(e.Machine, a.name)] = true
					w.mu.Unlock()
					w.busy.Add(1)
					go func() {
						defer w.busy.Done()
						if err := do(a); err != nil {
							r.t.Error(err)
						}
					}()
				}
			}
		}
	}()
	return w
}

// stop ends the watch, waits for what it started and returns what was hit.
func (w *watcher) stop() map[string]bool {
	w.cancel()
	<-w.done
	w.busy.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.hit
}

// cutPower cuts the power of hosts as acts of kind what begin (see
// watchActs); each boots again 1 to 3 s later.
func (r *run) cutPower(what string, may func(machine string) bool) *watcher {
	return r.watchActs(what, may, func(a *agent) error {
		r.count(1, 0)
		return r.powerCycle(a, time.Second+time.Duration(r.intN(2000))*time.Millisecond)
	})
}

// powerCycle cuts a's power and boots it again after off.
func (r *run) powerCycle(a *agent, off time.Duration) error {
	r.h.add("power-cut", "", a.name)
	if err := a.powerCut(); err != nil {
		return err
	}
	time.Sleep(off)
	r.h.add("boot", "", a.name)
	return a.boot()
}

// outcomes waits until every Machine in names is Running, or has failed
// with a reason on its EdgeMachine — none may stay without either — and
// returns the failed.
func (r *run) outcomes(names []string) []string {
	t := r.t
	t.Helper()
	var failed []string
	start := time.Now()
	testkit.Eventually(t, convergeBound, time.Second, "every Machine Running or failed with a reason", func() error {
		failed = nil
		for _, name := range names {
			m := &clusterv1.Machine{}
			if err := hub.Client.Get(context.Background(), client.ObjectKey{Namespace: r.ns, Name: name}, m); err != nil {
				return err
			}
			if m.Status.Phase == string(clusterv1.MachinePhaseRunning) && m.Status.NodeRef.IsDefined() {
				continue
			}
			em := &infrav1.EdgeMachine{}
			if err := hub.Client.Get(context.Background(), client.ObjectKey{Namespace: r.ns, Name: name}, em); err != nil {
				return err
			}
			cond := meta.FindStatusCondition(em.Status.Conditions, infrav1.HostProvisionedCondition)
			if cond == nil || cond.Reason != infrav1.ProvisioningFailedReason || cond.Message == "" {
				return fmt.Errorf("Machine %s is %s, its EdgeMachine's %s is %+v", name, m.Status.Phase, infrav1.HostProvisionedCondition, cond)
			}
			failed = append(failed, name)
		}
		return nil
	})
	took := time.Since(start).Round(10 * time.Millisecond)
	r.h.add("outcomes", "", fmt.Sprintf("failed %v after %s", failed, took))
	r.resMu.Lock()
	r.res.Phases = append(r.res.Phases, results.Phase{Name: "bootstrap outcomes", ConvergeSeconds: took.Seconds()})
	r.resMu.Unlock()
	return failed
}
