package agent

import (
	"context"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"

	"github.com/edgefleet/fleet/pkg/agent/session"
	"github.com/edgefleet/fleet/pkg/agent/state"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
)

type noProvisioner struct{}

func (noProvisioner) Provision(context.Context, *wire.Assignment, func(string)) (Result, error) {
	return Result{}, nil
}
func (noProvisioner) Reset(context.Context, types.UID, func(string)) error { return nil }

// A hub (or whoever holds its identity) that assigns a made-up second
// claim without releasing the one the host holds cannot aim the host's
// tunnels elsewhere: the worker keeps the workload, and the endpoint stays
// the held claim's. An older desired state moves nothing either.
func TestReachFollowsOnlyTheClaimTheHostHolds(t *testing.T) {
	cfg := Config{Hub: "https://hub.example:7443", StateDir: t.TempDir(), RootDir: t.TempDir()}
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	a := New(cfg, noProvisioner{}, logr.Discard())
	a.applied = state.Applied{HostUID: "host-1", Generation: 3,
		Workload: &infrav1.HostProvisioningStatus{ClaimUID: "held", State: infrav1.ProvisioningSucceeded}}
	desired := func(gen int64, claim types.UID, endpoint string) {
		a.handleUpdate(session.Update{Op: session.OpDesired, Desired: &wire.DesiredState{Generation: gen, HostUID: "host-1",
			Assignment: &wire.Assignment{ClaimUID: claim, MachineName: "m", BootstrapFormat: "cloud-config", BootstrapData: []byte("#cloud-config\n")},
			Reach:      &wire.Reach{Endpoint: endpoint, Tunnels: true}}})
		<-a.desired // the worker's hand-over; no worker runs here
	}
	desired(3, "held", "shop.default.fleet.internal:6443")
	if r := a.reach.Current(); r == nil || r.Endpoint != "shop.default.fleet.internal:6443" {
		t.Fatalf("the held claim's endpoint: %+v", r)
	}
	desired(4, "made-up", "10.0.0.9:22")
	if _, err := a.reach.DialTargets("10.0.0.9:22"); err == nil {
		t.Fatal("tunnels follow an endpoint given with a claim the host does not hold")
	}
	if r := a.reach.Current(); r == nil || r.Endpoint != "shop.default.fleet.internal:6443" {
		t.Fatalf("the endpoint moved to %+v", r)
	}
	desired(2, "held", "10.0.0.9:22")
	if _, err := a.reach.DialTargets("10.0.0.9:22"); err == nil {
		t.Fatal("an older desired state moved the endpoint")
	}
}
