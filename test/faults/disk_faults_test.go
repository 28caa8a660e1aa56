package faults

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/internal/testkit"
	"github.com/edgefleet/fleet/pkg/agent/state"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// The agents' state directories fill up or turn read-only in the middle
// of workers' bootstraps and of resets, for longer than the acts take,
// then recover; afterwards each host that had the fault is restarted
// (cleanly: no power cut). What an agent did while its disk refused
// writes is reported at once and recorded once the disk allows: after
// the restart no finished bootstrap reads as interrupted, no finished
// reset runs again, and no host is reset without an order.
func TestFullAndReadOnlyStateDir(t *testing.T) {
	r, _ := siteOnHub(t, "d", hostOptions{pause: 3 * time.Second, stateFS: true})
	all := []string{"cp", "w0", "w1", "w2"}

	start := time.Now()
	w := r.diskFaults("bootstrap", func(m string) bool { return m != "cp" })
	r.createMachines(all...)
	r.converge("provisioning", start, all)
	hit := w.stop()
	r.rebootHit(r.hostsOf(hit), "provisioning", all)

	start = time.Now()
	w = r.diskFaults("reset", func(string) bool { return true })
	r.deleteMachines("w1", "w2")
	r.waitGone("w1", "w2")
	r.converge("deletion", start, all[:2])
	hit = w.stop()
	r.rebootHit(slices.Sorted(func(yield func(string) bool) {
		for h := range hit {
			if !yield(h) {
				return
			}
		}
	}), "deletion", all[:2])
	r.check(2)
}

// diskFaults fills or makes read-only (the seed picks) the state
// directory of hosts as acts of kind what begin (see watchActs), for 4 to
// 8 s: past the end of the act, whose commands sleep 3 s.
func (r *run) diskFaults(what string, may func(machine string) bool) *watcher {
	return r.watchActs(what, may, func(a *agent) error {
		kind := []string{"full", "read-only"}[r.intN(2)]
		hold := 4*time.Second + time.Duration(r.intN(4000))*time.Millisecond
		r.h.add("fault", "", fmt.Sprintf("%s: state directory %s for %s", a.name, kind, hold))
		r.count(1, 0)
		if err := a.diskFault(kind, true); err != nil {
			return err
		}
		time.Sleep(hold)
		r.h.add("fault", "", fmt.Sprintf("%s: state directory %s over", a.name, kind))
		return a.diskFault(kind, false)
	})
}

// diskFault starts (on) or ends the fault kind on a's state directory.
func (a *agent) diskFault(kind string, on bool) error {
	filler := filepath.Join(a.stateDir, "filler")
	switch {
	case kind == "read-only" && on:
		// A read-only bind mount on top: the file system itself cannot
		// turn read-only while a transcript is open for writing (EBUSY),
		// and every path the agent opens now leads to the read-only one.
		if err := syscall.Mount(a.stateDir, a.stateDir, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("making %s's state directory read-only: %w", a.name, err)
		}
		if err := syscall.Mount("", a.stateDir, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("making %s's state directory read-only: %w", a.name, err)
		}
	case kind == "read-only":
		if err := syscall.Unmount(a.stateDir, syscall.MNT_DETACH); err != nil {
			return fmt.Errorf("making %s's state directory writable again: %w", a.name, err)
		}
	case on:
		f, err := os.OpenFile(filler, os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		defer f.Close()
		chunk := make([]byte, 64<<10)
		for {
			if _, err := f.Write(chunk); err != nil {
				if errors.Is(err, syscall.ENOSPC) {
					return nil
				}
				return fmt.Errorf("filling %s's state directory: %w", a.name, err)
			}
		}
	default:
		return os.Remove(filler)
	}
	return nil
}

// hostsOf maps the Machines of hit to the hosts their records name.
func (r *run) hostsOf(hit map[string]bool) []string {
	var hosts []string
	for _, a := range r.agents {
		acts, err := a.records()
		must(r.t, err)
		for _, e := range acts {
			if e.What == "bootstrap" && hit[e.Machine] && !slices.Contains(hosts, a.name) {
				hosts = append(hosts, a.name)
			}
		}
	}
	return hosts
}

// rebootHit restarts the named hosts cleanly; once each is back with the
// hub, what it recorded on its disk must match what its commands did
// (what it did under the fault was recorded), and the API server must
// read so, with want Running.
func (r *run) rebootHit(hosts []string, phase string, want []string) {
	t := r.t
	t.Helper()
	start := time.Now()
	for _, a := range r.agents {
		if !slices.Contains(hosts, a.name) {
			continue
		}
		if strings.Contains(a.log.String(), "Cannot record what the agent did") {
			// The agent told the hub, and then that it recorded it after all.
			testkit.Eventually(t, time.Minute, 200*time.Millisecond, a.name+" reads StateUnwritable False", func() error {
				host := &infrav1.EdgeHost{}
				if err := hub.Client.Get(context.Background(), client.ObjectKey{Namespace: r.ns, Name: a.name}, host); err != nil {
					return err
				}
				cond := meta.FindStatusCondition(host.Status.Conditions, infrav1.StateUnwritableCondition)
				if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != infrav1.StateRecordedReason {
					return fmt.Errorf("%s is %+v", infrav1.StateUnwritableCondition, cond)
				}
				return nil
			})
			t.Logf("%s: its agent could not record its state, told the hub, and recorded it later", a.name)
		}
		r.h.add("reboot", "", a.name)
		welcomed := strings.Count(a.log.String(), welcome)
		must(t, a.reboot())
		testkit.Eventually(t, time.Minute, 100*time.Millisecond, a.name+" back with the hub", func() error {
			if strings.Count(a.log.String(), welcome) == welcomed {
				return errors.New("not welcomed again yet")
			}
			return nil
		})
		must(t, a.recordAgrees())
	}
	t.Logf("%s: rebooted %v after their disk faults", phase, hosts)
	r.converge(phase+": reboot after the disk faults", start, want)
}

// welcome is what an agent logs when a session with the hub starts.
const welcome = "Hub welcomed this agent"

// recordAgrees checks a's applied state on its disk against what its
// bootstrap and reset commands recorded: provisioned for the Machine of
// its last bootstrap, or clean after its last reset.
func (a *agent) recordAgrees() error {
	acts, err := a.records()
	if err != nil {
		return err
	}
	serving := ""
	for _, e := range acts {
		switch e.What {
		case "bootstrap":
			serving = e.Machine
		case "reset":
			serving = ""
		}
	}
	applied, err := state.Store{Dir: filepath.Join(a.root, "var/lib/fleet-agent")}.LoadApplied()
	if err != nil {
		return err
	}
	switch w := applied.Workload; {
	case serving == "" && w != nil:
		return fmt.Errorf("%s was reset by its record, but its agent's state has a workload: %+v", a.name, *w)
	case serving != "" && (w == nil || w.State != infrav1.ProvisioningSucceeded):
		return fmt.Errorf("%s was bootstrapped for %s by its record, but its agent's state says %+v", a.name, serving, w)
	}
	return nil
}

// reboot stops the agent as a shutdown does (SIGTERM) and starts it again.
func (a *agent) reboot() error {
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.exited:
	case <-time.After(20 * time.Second):
		return fmt.Errorf("the agent of %s did not stop within 20 s of SIGTERM", a.name)
	}
	return a.boot()
}
