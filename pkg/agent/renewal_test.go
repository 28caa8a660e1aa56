package agent_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgefleet/fleet/pkg/agent"
	"github.com/edgefleet/fleet/pkg/agent/agenttest"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
)

// renewingUpgrader renews the certificates of the renewing provisioner's
// host: a year more, or a failure.
type renewingUpgrader struct {
	fakeUpgrader
	prov *renewing

	mu          sync.Mutex
	renewals    int
	fail        error
	interrupted error
}

func (u *renewingUpgrader) RenewCertificates(_ context.Context, node string, progress func(string)) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.renewals++
	progress("kubeadm certs renew all")
	if u.fail != nil {
		return u.fail
	}
	u.prov.renew(time.Now().AddDate(1, 0, 0).Truncate(time.Second))
	return nil
}

func (u *renewingUpgrader) InterruptedRenewal(context.Context, func(string)) (bool, error) {
	return u.interrupted != nil, u.interrupted
}

func (u *renewingUpgrader) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.renewals
}

func withRenewal(a *wire.Assignment, days int32) *wire.Assignment {
	a.CertificatesRenewBeforeDays = days
	return a
}

// The hub's window is a standing order: certificates expiring within it
// are renewed in place, reported, and their new expiry read; at most once
// a check interval whatever the outcome; never without a window; and the
// window holds across a restart, for a host cut off from the hub.
func TestCertificatesRenewedWhenDue(t *testing.T) {
	ctx := context.Background()
	prov := &renewing{expiry: time.Now().Add(10 * 24 * time.Hour).Truncate(time.Second)}
	up := &renewingUpgrader{fakeUpgrader: fakeUpgrader{running: "v1.36.3"}, prov: prov}
	dir := t.TempDir()
	a := newTestAgent(t, dir, prov)
	a.UseUpgrader(up)
	a.Apply(ctx, &wire.DesiredState{Generation: 1, Assignment: withVersion(assignment("u1"), "v1.36.3")})
	a.RefreshCertificates()
	a.RenewIfDue(ctx)
	if n := up.count(); n != 0 {
		t.Fatalf("renewed %d times without a window", n)
	}

	a.Apply(ctx, &wire.DesiredState{Generation: 2, Assignment: withRenewal(withVersion(assignment("u1"), "v1.36.3"), 5)})
	if n := up.count(); n != 0 {
		t.Fatalf("renewed %d times with 10 days left and a 5-day window", n)
	}
	a.Apply(ctx, &wire.DesiredState{Generation: 3, Assignment: withRenewal(withVersion(assignment("u1"), "v1.36.3"), 30)})
	st := a.CurrentStatus()
	if r := st.CertificatesRenewal; up.count() != 1 || r == nil || r.State != infrav1.RenewalSucceeded || r.StartTime.IsZero() {
		t.Fatalf("with 10 days left and a 30-day window: %d renewals, %+v", up.count(), r)
	}
	if got := st.CertificatesExpiryDate; got == nil || time.Until(got.Time) < 300*24*time.Hour {
		t.Errorf("the renewed expiry not read: %v", got)
	}

	// Due again (a window longer than the certificates live), but tried
	// within the check interval: not again, on the tick or an order.
	a.Apply(ctx, &wire.DesiredState{Generation: 4, Assignment: withRenewal(withVersion(assignment("u1"), "v1.36.3"), 400)})
	a.RenewIfDue(ctx)
	if n := up.count(); n != 1 {
		t.Fatalf("renewed %d times within one check interval", n)
	}

	// Once the interval has passed (a new agent with a short one), the
	// 400-day window is tried once: renewed, still due, held until the
	// window changes rather than renewed every day.
	short := newTestAgentWith(t, dir, prov, func(c *agent.Config) { c.CertificatesCheckInterval = time.Millisecond })
	short.UseUpgrader(up)
	time.Sleep(2 * time.Millisecond)
	short.RenewIfDue(ctx)
	time.Sleep(2 * time.Millisecond)
	short.RenewIfDue(ctx)
	if r := short.CurrentStatus().CertificatesRenewal; up.count() != 2 || r == nil || r.State != infrav1.RenewalSucceeded ||
		!strings.Contains(r.Message, "still expire within the 400-day window") {
		t.Fatalf("a window longer than the certificates live: %d renewals, %+v", up.count(), r)
	}

	// A restarted agent, cut off from the hub, keeps the order.
	restarted := newTestAgent(t, dir, prov)
	restarted.UseUpgrader(up)
	if got := restarted.Applied().CertificatesRenewBeforeDays; got != 400 {
		t.Errorf("after a restart the window is %d days, want 400", got)
	}
}

// A failed renewal is reported with its step and whether the previous
// certificates were put back, and is not tried again at once; one that a
// restart cut short is reported as such.
func TestCertificatesRenewalFailureReported(t *testing.T) {
	ctx := context.Background()
	prov := &renewing{expiry: time.Now().Add(24 * time.Hour)}
	up := &renewingUpgrader{fakeUpgrader: fakeUpgrader{running: "v1.36.3"}, prov: prov,
		fail: rolledBack{errors.New("restarting the kubelet: the API server did not come back")}}
	a := newTestAgent(t, t.TempDir(), prov)
	a.UseUpgrader(up)
	a.Apply(ctx, &wire.DesiredState{Generation: 1, Assignment: withVersion(assignment("u1"), "v1.36.3")})
	a.RefreshCertificates()
	a.Apply(ctx, &wire.DesiredState{Generation: 2, Assignment: withRenewal(withVersion(assignment("u1"), "v1.36.3"), 30)})
	r := a.CurrentStatus().CertificatesRenewal
	if r == nil || r.State != infrav1.RenewalRolledBack || r.Step != "restarting the kubelet" || r.Message == "" {
		t.Fatalf("a rolled-back renewal reported as %+v", r)
	}
	a.RenewIfDue(ctx)
	if n := up.count(); n != 1 {
		t.Errorf("a failed renewal tried %d times within one check interval", n)
	}

	other := newTestAgent(t, t.TempDir(), &agenttest.Recorder{})
	other.UseUpgrader(&renewingUpgrader{interrupted: rolledBack{errors.New("fleet-agent restarted during the certificates' renewal")}})
	other.FinishInterruptedRenewal(ctx)
	if r := other.CurrentStatus().CertificatesRenewal; r == nil || r.State != infrav1.RenewalRolledBack {
		t.Errorf("an interrupted renewal reported as %+v", r)
	}
}
