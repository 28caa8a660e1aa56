package faults

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// event is one line of a run's history: what the suite did (an order or
// a fault) or what an agent did on its host (a bootstrap or a reset).
type event struct {
	At      time.Time
	Host    string // "" for the suite's own
	What    string // bootstrap, reset, fault, delete, create
	Machine string
	Detail  string
}

func (e event) String() string {
	who := e.Host
	if who == "" {
		who = "suite"
	}
	return strings.TrimSpace(fmt.Sprintf("%s %-10s %-9s %s %s", e.At.Format("15:04:05.000"), who, e.What, e.Machine, e.Detail))
}

// history is a run's record: the suite's own events and, read at the end,
// the agents'.
type history struct {
	seed int64
	// agentsRead is set once the agents' records are in.
	agentsRead bool

	mu     sync.Mutex
	events []event
}

func (h *history) add(what, machine, detail string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, event{At: time.Now(), What: what, Machine: machine, Detail: detail})
}

// readAgents adds what each host's bootstrap and reset recorded.
func (h *history) readAgents(agents []*agent) error {
	if h.agentsRead {
		return nil
	}
	var read []event
	for _, a := range agents {
		acts, err := a.records()
		if err != nil {
			return err
		}
		read = append(read, acts...)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, read...)
	h.agentsRead = true
	sort.SliceStable(h.events, func(i, j int) bool { return h.events[i].At.Before(h.events[j].At) })
	return nil
}

// records reads what a's bootstrap and reset commands recorded on its
// disk; a line still being written is left for the next read.
func (a *agent) records() ([]event, error) {
	b, err := os.ReadFile(filepath.Join(a.root, historyFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []event
	lines := strings.Split(string(b), "\n")
	for _, l := range lines[:len(lines)-1] {
		f := strings.Fields(l)
		if len(f) < 2 {
			return nil, fmt.Errorf("host %s: history line %q", a.name, l)
		}
		sec, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return nil, fmt.Errorf("host %s: history line %q: %w", a.name, l, err)
		}
		e := event{At: time.Unix(0, int64(sec*1e9)), Host: a.name, What: f[1]}
		if len(f) > 2 {
			e.Machine = f[2]
		}
		out = append(out, e)
	}
	return out, nil
}

// check returns every invariant the history breaks — no Machine
// bootstrapped twice, no host bootstrapped again before a reset, and no
// reset without the deletion of the Machine the host served — and how
// many resets were ordered. A reset that a power cut interrupted runs
// again when its host is back: one order, not a reset without one.
func (h *history) check() (broken []string, resets int) {
	bootstraps := map[string][]string{} // machine → hosts
	serving := map[string]string{}      // host → machine it was bootstrapped for
	deleted := map[string]bool{}
	resetting := map[string]bool{} // host → its last act was a reset
	cut := map[string]bool{}       // host → its power was cut since its last act
	for _, e := range h.snapshot() {
		switch {
		case e.Host == "" && e.What == "delete":
			deleted[e.Machine] = true
		case e.Host == "" && e.What == "power-cut":
			cut[e.Detail] = true
		case e.What == "bootstrap":
			bootstraps[e.Machine] = append(bootstraps[e.Machine], e.Host)
			if len(bootstraps[e.Machine]) == 2 {
				broken = append(broken, fmt.Sprintf("Machine %s was bootstrapped twice (on %s)", e.Machine, strings.Join(bootstraps[e.Machine], ", ")))
			}
			if m, ok := serving[e.Host]; ok {
				broken = append(broken, fmt.Sprintf("host %s was bootstrapped for %s while it served %s, with no reset between", e.Host, e.Machine, m))
			}
			serving[e.Host] = e.Machine
			resetting[e.Host], cut[e.Host] = false, false
		case e.What == "reset":
			m, ok := serving[e.Host]
			switch {
			case !ok && resetting[e.Host] && cut[e.Host]:
				// The interrupted reset's order, carried out again.
			case !ok:
				broken = append(broken, fmt.Sprintf("host %s reset with no Machine to undo", e.Host))
			case !deleted[m]:
				broken = append(broken, fmt.Sprintf("host %s reset while its Machine %s was not deleted: a reset without an order", e.Host, m))
			default:
				resets++
			}
			delete(serving, e.Host)
			resetting[e.Host], cut[e.Host] = true, false
		}
	}
	return broken, resets
}

// write puts the history in a file and returns its path.
func (h *history) write(dir string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d\n", h.seed)
	for _, e := range h.snapshot() {
		b.WriteString(e.String())
		b.WriteByte('\n')
	}
	path := filepath.Join(dir, fmt.Sprintf("faults-%d.history", h.seed))
	return path, os.WriteFile(path, []byte(b.String()), 0o644)
}

// converged checks that the API server tells the truth the agents
// recorded: each host connected and caught up with its generation, held
// by the Machine its last bootstrap was for (provisioned) or by none
// (available) after its last reset, and each Machine in want Running.
func (h *history) converged(ctx context.Context, c client.Client, ns string, want []string) error {
	serving := map[string]string{}
	for _, e := range h.snapshot() {
		switch e.What {
		case "bootstrap":
			serving[e.Host] = e.Machine
		case "reset":
			delete(serving, e.Host)
		}
	}
	hosts := &infrav1.EdgeHostList{}
	if err := c.List(ctx, hosts, client.InNamespace(ns)); err != nil {
		return err
	}
	for _, host := range hosts.Items {
		if !meta.IsStatusConditionTrue(host.Status.Conditions, infrav1.AgentConnectedCondition) {
			return fmt.Errorf("EdgeHost %s does not read as connected", host.Name)
		}
		if host.Status.AgentObservedGeneration < host.Generation {
			return fmt.Errorf("EdgeHost %s: agent at generation %d of %d", host.Name, host.Status.AgentObservedGeneration, host.Generation)
		}
		m, held := serving[host.Name]
		switch claim, prov := host.Spec.ClaimRef, host.Status.Provisioning; {
		case held && (claim == nil || claim.Name != m):
			return fmt.Errorf("EdgeHost %s serves %s by its agent's record, but its claim is %+v", host.Name, m, claim)
		case held && (prov == nil || prov.ClaimUID != claim.UID || prov.State != infrav1.ProvisioningSucceeded):
			return fmt.Errorf("EdgeHost %s serves %s by its agent's record, but reports %+v", host.Name, m, prov)
		case !held && (claim != nil || prov != nil || host.Status.Phase != infrav1.HostAvailable):
			return fmt.Errorf("EdgeHost %s was reset (or never bootstrapped) by its agent's record, but reads %s, claim %+v, provisioning %+v",
				host.Name, host.Status.Phase, claim, prov)
		}
	}
	for _, name := range want {
		m := &clusterv1.Machine{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, m); err != nil {
			return err
		}
		if m.Status.Phase != string(clusterv1.MachinePhaseRunning) || !m.Status.NodeRef.IsDefined() {
			return fmt.Errorf("Machine %s is %s", name, m.Status.Phase)
		}
	}
	return nil
}

// snapshot is a copy of the events so far.
func (h *history) snapshot() []event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]event(nil), h.events...)
}

func lines(h *history) []string {
	var out []string
	for _, e := range h.snapshot() {
		out = append(out, e.String())
	}
	return out
}
