package agent_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"

	"github.com/edgefleet/fleet/pkg/agent"
	"github.com/edgefleet/fleet/pkg/agent/agenttest"
	"github.com/edgefleet/fleet/pkg/agent/state"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
)

func newTestAgent(t *testing.T, dir string, rec agent.Provisioner) *agent.Agent {
	t.Helper()
	return newTestAgentWith(t, dir, rec, func(*agent.Config) {})
}

// newTestAgentWith is newTestAgent with its configuration changed by set.
func newTestAgentWith(t *testing.T, dir string, rec agent.Provisioner, set func(*agent.Config)) *agent.Agent {
	t.Helper()
	cfg := agent.Config{Hub: "https://hub.invalid", CACertHash: "sha256:" + string(make([]byte, 0)), StateDir: dir, RootDir: t.TempDir()}
	set(&cfg)
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	a := agent.New(cfg, rec, logr.Discard())
	if err := a.Restore(); err != nil {
		t.Fatal(err)
	}
	return a
}

func assignment(uid string) *wire.Assignment {
	return &wire.Assignment{ClaimUID: types.UID(uid), MachineName: "m-" + uid, ProviderID: "edge://ns/h",
		BootstrapFormat: "cloud-config", BootstrapData: []byte("#cloud-config\n")}
}

// The agent never acts on an older generation after a newer one, never
// runs a completed bootstrap twice, and remembers both across restarts.
func TestApplyIsOrderedAndIdempotent(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	rec := &agenttest.Recorder{}
	a := newTestAgent(t, dir, rec)

	a.Apply(ctx, &wire.DesiredState{Generation: 3, Assignment: assignment("u1")})
	if n := len(rec.Provisions()); n != 1 {
		t.Fatalf("provisions %d", n)
	}
	if w := a.Applied().Workload; w == nil || w.State != infrav1.ProvisioningSucceeded || a.Applied().Generation != 3 {
		t.Fatalf("applied %+v", a.Applied())
	}
	// An older deprovision order arriving late is ignored.
	a.Apply(ctx, &wire.DesiredState{Generation: 2, Deprovision: true})
	if len(rec.Resets()) != 0 || a.Applied().Workload == nil {
		t.Fatalf("an older generation was applied: resets %v", rec.Resets())
	}
	// The same state again (a resync after reconnect) changes nothing.
	a.Apply(ctx, &wire.DesiredState{Generation: 3, Assignment: assignment("u1")})
	if n := len(rec.Provisions()); n != 1 {
		t.Fatalf("bootstrap ran %d times", n)
	}

	// A restart: state comes back from disk.
	b := newTestAgent(t, dir, rec)
	if b.Applied().Generation != 3 || b.Applied().Workload == nil || b.Applied().Workload.ClaimUID != "u1" {
		t.Fatalf("state after restart %+v", b.Applied())
	}
	b.Apply(ctx, &wire.DesiredState{Generation: 3, Assignment: assignment("u1")})
	if n := len(rec.Provisions()); n != 1 {
		t.Fatalf("bootstrap ran again after restart: %d", n)
	}
	// A newer release resets; a newer claim for another machine provisions.
	b.Apply(ctx, &wire.DesiredState{Generation: 4, Deprovision: true})
	if r := rec.Resets(); len(r) != 1 || r[0] != "u1" || b.Applied().Workload != nil {
		t.Fatalf("resets %v applied %+v", r, b.Applied())
	}
	b.Apply(ctx, &wire.DesiredState{Generation: 5, Assignment: assignment("u2")})
	if p := rec.Provisions(); len(p) != 2 || p[1].ClaimUID != "u2" {
		t.Fatalf("provisions %+v", p)
	}
}

// A desired state the agent has acted on, sent again (every new session
// sends it; after an outage the whole fleet reconnects at once), costs no
// state-file write, also after a restart; one that differs at the same
// generation (a new Reach) is recorded.
func TestSameDesiredStateWritesNothing(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	rec := &agenttest.Recorder{}
	desired := func(endpoint string) *wire.DesiredState {
		return &wire.DesiredState{Generation: 3, Assignment: assignment("u1"),
			Reach: &wire.Reach{Endpoint: endpoint, Addresses: []string{"10.0.0.1"}, Tunnels: true}}
	}
	files := func() []os.FileInfo {
		t.Helper()
		var out []os.FileInfo
		for _, name := range []string{state.FileDesired, state.FileApplied} {
			fi, err := os.Stat(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, fi)
		}
		return out
	}
	// The store replaces a file by renaming a new one over it.
	same := func(a, b []os.FileInfo) bool { return os.SameFile(a[0], b[0]) && os.SameFile(a[1], b[1]) }

	a := newTestAgent(t, dir, rec)
	a.Apply(ctx, desired("c1.example:6443"))
	first := files()
	a.Apply(ctx, desired("c1.example:6443"))
	if !same(first, files()) {
		t.Fatal("the same desired state again rewrote the state files")
	}
	b := newTestAgent(t, dir, rec)
	b.Apply(ctx, desired("c1.example:6443"))
	if !same(first, files()) {
		t.Fatal("after a restart, the same desired state rewrote the state files")
	}
	b.Apply(ctx, desired("c2.example:6443"))
	if os.SameFile(first[0], files()[0]) {
		t.Fatal("a desired state that changed at the same generation was not recorded")
	}
	if n := len(rec.Provisions()); n != 1 {
		t.Fatalf("bootstrap ran %d times", n)
	}
}

// A failing provisioner is reported, not retried in a loop, and its message
// reaches the status.
func TestProvisionFailureIsReported(t *testing.T) {
	a := agent.New(agent.Config{StateDir: t.TempDir(), RootDir: t.TempDir()}, agent.Unavailable{}, logr.Discard())
	a.Apply(context.Background(), &wire.DesiredState{Generation: 2, Assignment: assignment("u1")})
	w := a.Applied().Workload
	if w == nil || w.State != infrav1.ProvisioningFailed || w.Message != agent.ErrNoProvisioner.Error() {
		t.Fatalf("workload %+v", w)
	}
	st := a.CurrentStatus()
	if st == nil || st.Provisioning == nil || st.Provisioning.State != infrav1.ProvisioningFailed || st.ObservedGeneration != 2 {
		t.Fatalf("status %+v", st)
	}
}

func TestConfigValidation(t *testing.T) {
	c := agent.Config{Hub: "http://hub:80", CACertHash: "md5:abc"}
	if err := c.Complete(); err != nil {
		t.Fatal(err)
	}
	err := c.Validate()
	if err == nil {
		t.Fatal("accepted an http hub and a bad pin")
	}
	for _, want := range []string{"must be an https:// URL", "--ca-cert-hash is required"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// An agent that restarts in the middle of a bootstrap reports it as failed
// at the step it reached and does not run it again.
func TestRestartMidBootstrapIsReportedNotRerun(t *testing.T) {
	dir := t.TempDir()
	store := state.Store{Dir: dir}
	if err := store.SaveApplied(state.Applied{Generation: 2, Workload: &infrav1.HostProvisioningStatus{
		ClaimUID: "u1", State: infrav1.ProvisioningRunning, Step: "runcmd 2/5"}}); err != nil {
		t.Fatal(err)
	}
	rec := &agenttest.Recorder{}
	a := agent.New(agent.Config{StateDir: dir, RootDir: t.TempDir(), ResyncInterval: time.Hour, Hub: "https://127.0.0.1:1",
		MaxBackoff: time.Hour, KeepAlive: time.Second}, rec, logr.Discard())
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, func() { close(ready) }) }()
	<-ready
	w := a.Applied().Workload
	if w == nil || w.State != infrav1.ProvisioningFailed || !strings.Contains(w.Message, "at step runcmd 2/5") {
		t.Fatalf("workload after restart %+v", w)
	}
	a.Apply(ctx, &wire.DesiredState{Generation: 2, Assignment: assignment("u1")})
	if n := len(rec.Provisions()); n != 0 {
		t.Fatalf("interrupted bootstrap ran again (%d)", n)
	}
	cancel()
	<-done
}

var errResetBroken = errors.New("kubeadm reset: exit status 1")

// flakyReset fails its first reset.
type flakyReset struct {
	agenttest.Recorder
	fails int
}

func (f *flakyReset) Reset(ctx context.Context, uid types.UID, progress func(string)) error {
	if f.fails > 0 {
		f.fails--
		return errResetBroken
	}
	return f.Recorder.Reset(ctx, uid, progress)
}

// A failed reset leaves the host reporting ResetFailed (the hub shows
// NeedsAttention and never claims it); the same deprovision order on a new
// session (after an operator fixed the machine and restarted the agent)
// retries it.
func TestFailedResetIsReportedAndRetried(t *testing.T) {
	ctx := context.Background()
	p := &flakyReset{fails: 1}
	a := agent.New(agent.Config{StateDir: t.TempDir(), RootDir: t.TempDir()}, p, logr.Discard())
	a.Apply(ctx, &wire.DesiredState{Generation: 2, Assignment: assignment("u1")})
	a.Apply(ctx, &wire.DesiredState{Generation: 3, Deprovision: true})
	w := a.Applied().Workload
	if w == nil || w.State != infrav1.ProvisioningResetFailed || w.Message != errResetBroken.Error() || a.Applied().Generation != 2 {
		t.Fatalf("after failed reset: %+v gen %d", w, a.Applied().Generation)
	}
	a.Apply(ctx, &wire.DesiredState{Generation: 3, Deprovision: true})
	if a.Applied().Workload != nil || a.Applied().Generation != 3 {
		t.Fatalf("after retried reset: %+v", a.Applied())
	}
}

// blockingProvisioner runs until its context ends.
type blockingProvisioner struct {
	agenttest.Recorder
	started chan struct{}
}

func (b *blockingProvisioner) Provision(ctx context.Context, _ *wire.Assignment, progress func(string)) (agent.Result, error) {
	progress("runcmd 1/1")
	close(b.started)
	<-ctx.Done()
	return agent.Result{}, ctx.Err()
}

// A release arriving while a bootstrap runs interrupts it; the host is then
// reset rather than left busy for a deleted Machine.
func TestReleaseInterruptsBootstrap(t *testing.T) {
	ctx := context.Background()
	p := &blockingProvisioner{started: make(chan struct{})}
	a := agent.New(agent.Config{StateDir: t.TempDir(), RootDir: t.TempDir()}, p, logr.Discard())
	a.SetAppliedGeneration(1)
	done := make(chan struct{})
	go func() { a.Apply(ctx, &wire.DesiredState{Generation: 2, Assignment: assignment("u1")}); close(done) }()
	<-p.started
	a.InterruptIfReleased(&wire.DesiredState{Generation: 3, Deprovision: true})
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the release did not interrupt the bootstrap")
	}
	w := a.Applied().Workload
	if w == nil || w.State != infrav1.ProvisioningFailed || !strings.Contains(w.Message, "interrupted") {
		t.Fatalf("workload %+v", w)
	}
	a.Apply(ctx, &wire.DesiredState{Generation: 3, Deprovision: true})
	if a.Applied().Workload != nil || len(p.Resets()) != 1 {
		t.Fatalf("not reset after the interruption: %+v resets %v", a.Applied(), p.Resets())
	}
}

// The edge promise: only an explicit order resets a host. A desired state
// that says nothing of the workload (a fresh EdgeHost, a hub restored without
// the claim) and an assignment for another claim that was never released
// leave it running and reported; a Deprovision resets it.
func TestOnlyADeprovisionOrderResets(t *testing.T) {
	ctx := context.Background()
	rec := &agenttest.Recorder{}
	a := newTestAgent(t, t.TempDir(), rec)
	a.Apply(ctx, &wire.DesiredState{Generation: 2, Assignment: assignment("u1")})

	a.Apply(ctx, &wire.DesiredState{Generation: 3})
	a.Apply(ctx, &wire.DesiredState{Generation: 4, Assignment: assignment("u2")})
	if r := rec.Resets(); len(r) != 0 {
		t.Fatalf("reset without an order: %v", r)
	}
	if w := a.Applied().Workload; w == nil || w.ClaimUID != "u1" || w.State != infrav1.ProvisioningSucceeded {
		t.Fatalf("workload %+v, want u1 kept", w)
	}
	if st := a.CurrentStatus(); st == nil || st.Provisioning == nil || st.Provisioning.ClaimUID != "u1" || st.ObservedGeneration != 4 {
		t.Fatalf("status %+v, want the kept workload reported at generation 4", st)
	}
	if n := len(rec.Provisions()); n != 1 {
		t.Fatalf("provisions %d: another claim was run over the workload", n)
	}

	a.Apply(ctx, &wire.DesiredState{Generation: 5, Deprovision: true})
	if r := rec.Resets(); len(r) != 1 || r[0] != "u1" || a.Applied().Workload != nil {
		t.Fatalf("after the deprovision order: resets %v applied %+v", r, a.Applied())
	}
	a.Apply(ctx, &wire.DesiredState{Generation: 6, Assignment: assignment("u2")})
	if p := rec.Provisions(); len(p) != 2 || p[1].ClaimUID != "u2" {
		t.Fatalf("provisions %+v", p)
	}
}

// A hub restored from a backup re-creates the EdgeHost under a new uid with
// generations from 1 again: the agent follows it (a newer order is not
// mistaken for an old one) and keeps its workload.
func TestANewHostIncarnationRestartsGenerations(t *testing.T) {
	ctx := context.Background()
	rec := &agenttest.Recorder{}
	dir := t.TempDir()
	a := newTestAgent(t, dir, rec)
	a.Apply(ctx, &wire.DesiredState{Generation: 7, HostUID: "old", Assignment: assignment("u1")})

	a.Apply(ctx, &wire.DesiredState{Generation: 1, HostUID: "restored", Assignment: assignment("u1")})
	if g := a.Applied().Generation; g != 1 || a.Applied().HostUID != "restored" {
		t.Fatalf("applied %+v, want generation 1 of the restored host", a.Applied())
	}
	if len(rec.Resets()) != 0 || len(rec.Provisions()) != 1 {
		t.Fatalf("resets %v provisions %d", rec.Resets(), len(rec.Provisions()))
	}
	// Orders of the restored host count from there, across a restart.
	b := newTestAgent(t, dir, rec)
	b.Apply(ctx, &wire.DesiredState{Generation: 2, HostUID: "restored", Deprovision: true})
	if r := rec.Resets(); len(r) != 1 || b.Applied().Workload != nil {
		t.Fatalf("a deprovision order of the restored host was not carried out: resets %v", r)
	}
}
