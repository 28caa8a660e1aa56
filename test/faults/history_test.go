package faults

import (
	"bufio"
	"bytes"
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
		b, err := os.ReadFile(filepath.Join(a.root, historyFile))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) < 2 {
				return fmt.Errorf("host %s: history line %q", a.name, sc.Text())
			}
			sec, err := strconv.ParseFloat(f[0], 64)
			if err != nil {
				return fmt.Errorf("host %s: history line %q: %w", a.name, sc.Text(), err)
			}
			e := event{At: time.Unix(0, int64(sec*1e9)), Host: a.name, What: f[1]}
			if len(f) > 2 {
				e.Machine = f[2]
			}
			read = append(read, e)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, read...)
	h.agentsRead = true
	sort.SliceStable(h.events, func(i, j int) bool { return h.events[i].At.Before(h.events[j].At) })
	return nil
}

// check returns every invariant the history breaks: no Machine
// bootstrapped twice, no host bootstrapped again before a reset, and no
// reset without the deletion of the Machine the host served.
func (h *history) check() []string {
	var broken []string
	bootstraps := map[string][]string{} // machine → hosts
	serving := map[string]string{}      // host → machine it was bootstrapped for
	deleted := map[string]bool{}
	for _, e := range h.snapshot() {
		switch {
		case e.Host == "" && e.What == "delete":
			deleted[e.Machine] = true
		case e.What == "bootstrap":
			bootstraps[e.Machine] = append(bootstraps[e.Machine], e.Host)
			if len(bootstraps[e.Machine]) == 2 {
				broken = append(broken, fmt.Sprintf("Machine %s was bootstrapped twice (on %s)", e.Machine, strings.Join(bootstraps[e.Machine], ", ")))
			}
			if m, ok := serving[e.Host]; ok {
				broken = append(broken, fmt.Sprintf("host %s was bootstrapped for %s while it served %s, with no reset between", e.Host, e.Machine, m))
			}
			serving[e.Host] = e.Machine
		case e.What == "reset":
			m, ok := serving[e.Host]
			switch {
			case !ok:
				broken = append(broken, fmt.Sprintf("host %s reset with no Machine to undo", e.Host))
			case !deleted[m]:
				broken = append(broken, fmt.Sprintf("host %s reset while its Machine %s was not deleted: a reset without an order", e.Host, m))
			}
			delete(serving, e.Host)
		}
	}
	return broken
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
