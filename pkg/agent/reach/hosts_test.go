package reach

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"

	"github.com/edgefleet/fleet/pkg/contract/wire"
)

// The endpoint's name resolves at the site through a block of /etc/hosts
// the agent owns; the rest of the file is never touched.
func TestHostsEntryFollowsReach(t *testing.T) {
	root := t.TempDir()
	hosts := filepath.Join(root, "etc", "hosts")
	if err := os.MkdirAll(filepath.Dir(hosts), 0o755); err != nil {
		t.Fatal(err)
	}
	orig := "127.0.0.1 localhost\n10.1.2.3 printer # the shop's"
	if err := os.WriteFile(hosts, []byte(orig), 0o644); err != nil {
		t.Fatal(err)
	}
	a := NewOwner(root, logr.Discard())
	read := func() string {
		b, err := os.ReadFile(hosts)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	a.Set(assigned(&wire.Reach{Endpoint: "edge.ns.fleet.internal:6443", Addresses: []string{"10.0.0.5", "10.0.0.6"}}))
	want := orig + "\n" + hostsBegin + "10.0.0.5 edge.ns.fleet.internal\n10.0.0.6 edge.ns.fleet.internal\n" + hostsEnd
	if got := read(); got != want {
		t.Fatalf("hosts:\n%s\nwant:\n%s", got, want)
	}
	// The control plane moved: the entry follows, still once.
	a.Set(assigned(&wire.Reach{Endpoint: "edge.ns.fleet.internal:6443", Addresses: []string{"10.0.0.7"}}))
	want = orig + "\n" + hostsBegin + "10.0.0.7 edge.ns.fleet.internal\n" + hostsEnd
	if got := read(); got != want {
		t.Fatalf("after a move:\n%s\nwant:\n%s", got, want)
	}
	// Released: the block goes, the rest stays.
	a.Set(assigned(nil))
	if got := read(); got != orig+"\n" {
		t.Fatalf("after release:\n%q\nwant:\n%q", got, orig+"\n")
	}
	// An address, or a name outside fleet's zone (a load balancer's, in
	// the site's DNS), gets no entry.
	for _, ep := range []string{"192.0.2.10:6443", "api.store-17.example.com:6443"} {
		a.Set(assigned(&wire.Reach{Endpoint: ep, Addresses: []string{"10.0.0.7"}}))
		if got := read(); strings.Contains(got, hostsBegin) {
			t.Fatalf("entry for %s:\n%s", ep, got)
		}
	}
	// Someone deleted our END line: nothing of theirs is lost.
	if err := os.WriteFile(hosts, []byte("127.0.0.1 localhost\n"+hostsBegin+"10.0.0.7 edge.ns.fleet.internal\n10.1.2.3 printer\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a.Set(assigned(&wire.Reach{Endpoint: "edge.ns.fleet.internal:6443", Addresses: []string{"10.0.0.8"}}))
	if got := read(); !strings.Contains(got, "10.1.2.3 printer\n") || !strings.HasSuffix(got, hostsBegin+"10.0.0.8 edge.ns.fleet.internal\n"+hostsEnd) {
		t.Fatalf("after a damaged block:\n%s", got)
	}
}

// assigned is a desired state carrying r for an assignment of its own per
// endpoint (nil: no assignment): the agent holds an assignment to the
// endpoint it was first given with it.
func assigned(r *wire.Reach) *wire.DesiredState {
	if r == nil {
		return &wire.DesiredState{}
	}
	return &wire.DesiredState{Reach: r, Assignment: &wire.Assignment{ClaimUID: types.UID("claim-" + r.Endpoint),
		MachineName: "m", BootstrapData: []byte("#cloud-config\n")}}
}
