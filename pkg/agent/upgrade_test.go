package agent_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"

	"github.com/edgefleet/fleet/pkg/agent/agenttest"
	"github.com/edgefleet/fleet/pkg/agent/kubestage"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
)

// fakeUpgrader runs the version it is told to, or fails as told.
type fakeUpgrader struct {
	mu       sync.Mutex
	running  string
	orders   []string
	installs []string
	// installFails makes Install fail.
	installFails error
	fail         error
	pending      [2]string // an interrupted upgrade: from, to
	rollback     error
	// stagingDir, when set, is where the staged versions are.
	stagingDir string
}

type rolledBack struct{ error }

func (rolledBack) HostRolledBack() bool { return true }
func (rolledBack) FailedStep() string   { return "restarting the kubelet" }

func (f *fakeUpgrader) Running(context.Context) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.running, nil
}

func (f *fakeUpgrader) Staged() []string {
	if f.stagingDir == "" {
		return []string{"v1.36.3"}
	}
	var out []string
	entries, _ := os.ReadDir(f.stagingDir)
	for _, e := range entries {
		if kubestage.Complete(f.stagingDir, e.Name()) == nil {
			out = append(out, e.Name())
		}
	}
	return out
}

func (f *fakeUpgrader) Upgrade(_ context.Context, to, _ string, _ []byte, progress func(string)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.orders = append(f.orders, to)
	progress("kubeadm upgrade apply " + to)
	if f.fail != nil {
		return f.fail
	}
	f.running = to
	return nil
}

func (f *fakeUpgrader) Interrupted(context.Context, func(string)) (string, string, error) {
	return f.pending[0], f.pending[1], f.rollback
}

func (f *fakeUpgrader) Install(_ context.Context, version string, progress func(string)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.installs = append(f.installs, version)
	progress("installing kubelet and kubeadm " + version)
	if f.installFails != nil {
		return f.installFails
	}
	f.running = version
	return nil
}

func (f *fakeUpgrader) installed() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.installs...)
}

func (f *fakeUpgrader) ordered() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.orders...)
}

func withVersion(a *wire.Assignment, v string) *wire.Assignment {
	a.KubernetesVersion = v
	return a
}

// A provisioned host whose assignment names another version upgrades once
// per order, reports its version, staged versions and the upgrade, and
// retries a failed one only on a new generation.
func TestAssignedVersionUpgradesTheHost(t *testing.T) {
	ctx := context.Background()
	up := &fakeUpgrader{running: "v1.35.4"}
	dir := t.TempDir()
	a := newTestAgent(t, dir, &agenttest.Recorder{})
	a.UseUpgrader(up)

	a.Apply(ctx, &wire.DesiredState{Generation: 1, Assignment: withVersion(assignment("u1"), "v1.35.4")})
	st := a.CurrentStatus()
	if st.KubernetesVersion != "v1.35.4" || len(st.Facts.KubernetesVersions) != 1 || len(up.ordered()) != 0 {
		t.Fatalf("after provisioning: version %q, staged %v, orders %v", st.KubernetesVersion, st.Facts.KubernetesVersions, up.ordered())
	}

	up.fail = rolledBack{errors.New("restarting the kubelet: it did not start")}
	a.Apply(ctx, &wire.DesiredState{Generation: 2, Assignment: withVersion(assignment("u1"), "v1.36.3")})
	st = a.CurrentStatus()
	if u := st.Upgrade; u == nil || u.State != infrav1.UpgradeRolledBack || u.Step != "restarting the kubelet" ||
		u.Message != "restarting the kubelet: it did not start" || st.KubernetesVersion != "v1.35.4" {
		t.Fatalf("after a rolled-back upgrade: %+v, version %q", st.Upgrade, st.KubernetesVersion)
	}
	// The same order again is not retried: on a new session, with a new
	// reach (a control-plane host came or went), or after a restart.
	a.Apply(ctx, &wire.DesiredState{Generation: 2, Assignment: withVersion(assignment("u1"), "v1.36.3")})
	a.Apply(ctx, &wire.DesiredState{Generation: 2, Assignment: withVersion(assignment("u1"), "v1.36.3"),
		Reach: &wire.Reach{Endpoint: "cp.example:6443", Addresses: []string{"10.0.0.9"}}})
	restarted := newTestAgent(t, dir, &agenttest.Recorder{})
	restarted.UseUpgrader(up)
	restarted.Apply(ctx, &wire.DesiredState{Generation: 2, Assignment: withVersion(assignment("u1"), "v1.36.3"),
		Reach: &wire.Reach{Endpoint: "cp.example:6443", Addresses: []string{"10.0.0.7"}}})
	if n := len(up.ordered()); n != 1 {
		t.Fatalf("upgraded %d times for one order", n)
	}
	up.fail = nil
	a.Apply(ctx, &wire.DesiredState{Generation: 3, Assignment: withVersion(assignment("u1"), "v1.36.3")})
	st = a.CurrentStatus()
	if u := st.Upgrade; u == nil || u.State != infrav1.UpgradeSucceeded || st.KubernetesVersion != "v1.36.3" || len(up.ordered()) != 2 {
		t.Fatalf("after the retry: %+v, version %q, orders %v", st.Upgrade, st.KubernetesVersion, up.ordered())
	}
	// Without a version the hub orders nothing; a reset forgets it.
	a.Apply(ctx, &wire.DesiredState{Generation: 4, Assignment: assignment("u1")})
	a.Apply(ctx, &wire.DesiredState{Generation: 5, Deprovision: true})
	if st = a.CurrentStatus(); st.KubernetesVersion != "" || st.Upgrade != nil || len(up.ordered()) != 2 {
		t.Fatalf("after a reset: version %q, upgrade %+v, orders %v", st.KubernetesVersion, st.Upgrade, up.ordered())
	}
}

// An agent restarted mid-upgrade reports how the upgrade it found ended.
func TestInterruptedUpgradeIsReported(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	a := newTestAgent(t, dir, &agenttest.Recorder{})
	a.UseUpgrader(&fakeUpgrader{running: "v1.35.4"})
	a.Apply(ctx, &wire.DesiredState{Generation: 1, Assignment: withVersion(assignment("u1"), "v1.35.4")})

	b := newTestAgent(t, dir, &agenttest.Recorder{})
	b.UseUpgrader(&fakeUpgrader{running: "v1.35.4", pending: [2]string{"v1.35.4", "v1.36.3"},
		rollback: rolledBack{errors.New("fleet-agent restarted during the upgrade, at step \"restarting the kubelet\"")}})
	b.FinishInterruptedUpgrade(ctx)
	st := b.CurrentStatus()
	if u := st.Upgrade; u == nil || u.State != infrav1.UpgradeRolledBack || u.From != "v1.35.4" || u.To != "v1.36.3" || st.KubernetesVersion != "v1.35.4" {
		t.Fatalf("after the restart: %+v, version %q", st.Upgrade, st.KubernetesVersion)
	}
}

// A host assigned a version it has staged but does not run installs it
// before the bootstrap, which then runs on it; one that runs it, or lacks
// it, installs nothing; a failed install fails the provisioning.
func TestAssignedVersionInstalledBeforeTheBootstrap(t *testing.T) {
	ctx := context.Background()
	up := &fakeUpgrader{running: "v1.35.4"}
	rec := &agenttest.Recorder{}
	a := newTestAgent(t, t.TempDir(), rec)
	a.UseUpgrader(up)
	a.Apply(ctx, &wire.DesiredState{Generation: 1, Assignment: withVersion(assignment("u1"), "v1.36.3")})
	st := a.CurrentStatus()
	if got := up.installed(); len(got) != 1 || got[0] != "v1.36.3" || st.KubernetesVersion != "v1.36.3" || len(up.ordered()) != 0 ||
		st.Provisioning == nil || st.Provisioning.State != infrav1.ProvisioningSucceeded {
		t.Fatalf("installs %v, version %q, upgrades %v, provisioning %+v", got, st.KubernetesVersion, up.ordered(), st.Provisioning)
	}

	b := newTestAgent(t, t.TempDir(), &agenttest.Recorder{})
	other := &fakeUpgrader{running: "v1.35.4"}
	b.UseUpgrader(other)
	b.Apply(ctx, &wire.DesiredState{Generation: 1, Assignment: withVersion(assignment("u2"), "v1.37.0")})
	if got := other.installed(); len(got) != 0 || b.CurrentStatus().KubernetesVersion != "v1.35.4" {
		t.Fatalf("an unstaged version: installs %v, version %q", got, b.CurrentStatus().KubernetesVersion)
	}

	c := newTestAgent(t, t.TempDir(), &agenttest.Recorder{})
	broken := &fakeUpgrader{running: "v1.35.4", installFails: errors.New("importing the images of v1.36.3: no space left on device")}
	c.UseUpgrader(broken)
	c.Apply(ctx, &wire.DesiredState{Generation: 1, Assignment: withVersion(assignment("u3"), "v1.36.3")})
	if p := c.CurrentStatus().Provisioning; p == nil || p.State != infrav1.ProvisioningFailed ||
		p.Message != "installing Kubernetes v1.36.3 before the bootstrap: importing the images of v1.36.3: no space left on device" {
		t.Fatalf("a failed install: %+v", p)
	}
}
