package faults

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// Uplink spells, kills of the hub and power cuts of workers, mixed at
// random from the seed, while a site's hosts are provisioned and while
// the Machines that failed (a power cut in their bootstrap) and one more
// are deleted; then the deleted are replaced, without faults. Every
// Machine ends Running or failed with a reason, nothing runs twice, no
// host is reset without an order, and the replacements end Running.
func TestMixedFaults(t *testing.T) {
	ns := hub.NewNamespace(t, "faults")
	r := newRun(t, ns)
	r.pause = 3 * time.Second
	hp := startHubProcess(t, ns, hubOptions{})
	site := newSite(t)
	const routerPort = "17443"
	router := "127.0.0.1:" + routerPort
	up := newUplink(t, hp.gateway, site.Path(), routerPort)
	_, err := site.Forward(router, up.addr())
	must(t, err)
	agents := startAgents(t, site, ns, 4, "x"+strings.TrimPrefix(ns, "faults-"), "https://"+router, hp.pin(t), hostOptions{pause: 3 * time.Second})
	r.setAgents(agents)

	// The control plane's host keeps its power: the workers' bootstrap
	// data waits for it (see TestPowerCuts).
	workers := agents[1:]
	inject := func(f fault) error {
		switch f.State {
		case "hub killed":
			hp.kill()
			time.Sleep(f.For)
			return hp.start()
		case "power cut":
			return r.powerCycle(workers[r.intN(len(workers))], f.For)
		default:
			if err := up.apply(f.State); err != nil {
				return err
			}
			time.Sleep(f.For)
			return up.apply("up")
		}
	}
	all := []string{"cp", "w0", "w1", "w2"}
	r.play("provisioning", mixed(r, *roundsFlag+1), inject, func() { r.createMachines(all...) })
	failed := r.outcomes(all)
	t.Logf("provisioning: Machines failed %v", failed)

	deleted := append([]string(nil), failed...)
	if !slices.Contains(deleted, "w2") {
		deleted = append(deleted, "w2")
	}
	kept := slices.DeleteFunc(slices.Clone(all), func(m string) bool { return slices.Contains(deleted, m) })
	r.phase("deletion", mixed(r, *roundsFlag+1), inject, func() {
		r.deleteMachines(deleted...)
		r.waitGone(deleted...)
	}, kept)

	var again []string
	for _, m := range deleted {
		again = append(again, m+"-b")
	}
	start := time.Now()
	r.createMachines(again...)
	r.converge("replacement", start, append(kept, again...))
	r.check(len(deleted))
}

// mixed draws n faults of every kind: an uplink state for 3 to 12 s, a
// hub kill with up to 3 s down, or a worker's power cut with 1 to 3 s
// off; each after a pause of up to 4 s.
func mixed(r *run, n int) []fault {
	kinds := []string{"cut", "half-open", "slow", "lossy", "hub killed", "power cut"}
	out := make([]fault, n)
	for i := range out {
		f := fault{State: kinds[r.intN(len(kinds))], After: time.Duration(r.intN(4000)) * time.Millisecond}
		switch f.State {
		case "hub killed":
			f.For = time.Duration(r.intN(3000)) * time.Millisecond
		case "power cut":
			f.For = time.Second + time.Duration(r.intN(2000))*time.Millisecond
		default:
			f.For = 3*time.Second + time.Duration(r.intN(9000))*time.Millisecond
		}
		out[i] = f
	}
	return out
}
