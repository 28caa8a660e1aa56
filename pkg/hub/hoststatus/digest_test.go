package hoststatus

import (
	"testing"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
)

// A report's digests tell the comparisons recordStatus makes: the same
// report, a report that changed only its link health, and one that
// changed anything else.
func TestStatusDigests(t *testing.T) {
	report := func(hostname string, retransmits int64) *wire.Status {
		return &wire.Status{ObservedGeneration: 3, Facts: infrav1.HostFacts{Hostname: hostname, CPUs: 4},
			NodeName: hostname, Link: &infrav1.LinkHealth{Probe: infrav1.LinkProbeUnavailable, WindowSeconds: 60, TCPRetransmits: retransmits}}
	}
	digest := func(st *wire.Status) statusDigest {
		t.Helper()
		d, err := digestStatus(st)
		if err != nil {
			t.Fatal(err)
		}
		if !d.taken {
			t.Fatal("a digest not marked taken")
		}
		return d
	}
	base := digest(report("kiosk-1", 2))
	if again := digest(report("kiosk-1", 2)); again != base {
		t.Error("the same report digests differently")
	}
	linkOnly := digest(report("kiosk-1", 9))
	if linkOnly.all == base.all {
		t.Error("a changed link health left the whole digest the same")
	}
	if linkOnly.withoutLink != base.withoutLink {
		t.Error("a change of link health alone changed the digest without it")
	}
	other := digest(report("kiosk-2", 2))
	if other.all == base.all || other.withoutLink == base.withoutLink {
		t.Error("a changed hostname left a digest the same")
	}
	noLink := report("kiosk-1", 2)
	noLink.Link = nil
	if d := digest(noLink); d.withoutLink != base.withoutLink || d.all == base.all {
		t.Error("a report without link health is not the same report minus its link")
	}
}
