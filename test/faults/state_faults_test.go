package faults

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/pkg/agent/state"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// Between two runs of each agent, one of its state files is emptied,
// truncated or overwritten with garbage (the seed picks which and how),
// as a failing disk or a file system that lost data would leave it. Every
// agent comes back as it was: no host re-enrolls, no bootstrap runs
// again, no host is reset; and a Machine deleted afterwards still has
// its host reset.
func TestCorruptStateFiles(t *testing.T) {
	r, agents := siteOnHub(t, "s", hostOptions{})
	ns := r.ns
	all := []string{"cp", "w0", "w1", "w2"}
	start := time.Now()
	r.createMachines(all...)
	r.converge("provisioning", start, all)

	files := []string{state.FileIdentity, state.FileCA, state.FileCredentials, state.FileApplied, state.FileDesired}
	damage := []struct {
		name string
		do   func([]byte) []byte
	}{
		{"emptied", func([]byte) []byte { return nil }},
		{"truncated", func(b []byte) []byte { return b[:len(b)/3] }},
		{"overwritten", func(b []byte) []byte { return []byte(strings.Repeat("\x00\xfe", max(1, len(b)/2))) }},
	}
	before := edgeHosts(t, ns)
	start = time.Now()
	for _, a := range agents {
		file, d := files[r.rng.IntN(len(files))], damage[r.rng.IntN(len(damage))]
		if err := r.powerCycleDamaging(a, file, d.name, d.do); err != nil {
			t.Fatal(err)
		}
	}
	r.converge("restart with a damaged state file", start, all)
	if after := edgeHosts(t, ns); !maps.Equal(before, after) {
		t.Fatalf("EdgeHosts were %v before the damage, %v after: a host enrolled again", before, after)
	}

	start = time.Now()
	r.deleteMachines("w2")
	r.waitGone("w2")
	r.converge("deletion", start, all[:3])
	r.check(1)
}

// powerCycleDamaging cuts a's power, damages one of its state files with
// do, and boots it again.
func (r *run) powerCycleDamaging(a *agent, file, how string, do func([]byte) []byte) error {
	r.h.add("power-cut", "", a.name)
	r.count(1, 0)
	if err := a.powerCut(); err != nil {
		return err
	}
	p := filepath.Join(a.root, "var/lib/fleet-agent", file)
	b, err := os.ReadFile(p)
	if err != nil {
		return fmt.Errorf("reading %s's %s: %w", a.name, file, err)
	}
	if err := os.WriteFile(p, do(b), 0o600); err != nil {
		return err
	}
	r.h.add("fault", "", fmt.Sprintf("%s: %s %s", a.name, file, how))
	r.h.add("boot", "", a.name)
	return a.boot()
}

// edgeHosts maps the namespace's EdgeHosts to their uids.
func edgeHosts(t *testing.T, ns string) map[string]types.UID {
	t.Helper()
	list := &infrav1.EdgeHostList{}
	must(t, hub.Client.List(context.Background(), list, client.InNamespace(ns)))
	out := map[string]types.UID{}
	for _, h := range list.Items {
		out[h.Name] = h.UID
	}
	return out
}
