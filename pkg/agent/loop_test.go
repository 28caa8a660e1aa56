package agent_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/edgefleet/fleet/internal/testkit"
	"github.com/edgefleet/fleet/pkg/agent"
	"github.com/edgefleet/fleet/pkg/agent/agenttest"
	"github.com/edgefleet/fleet/pkg/agent/sdnotify"
	"github.com/edgefleet/fleet/pkg/agent/session"
	"github.com/edgefleet/fleet/pkg/contract/wire"
)

// watchdogPings counts the WATCHDOG=1 messages systemd's socket c gets
// within d.
func watchdogPings(c *net.UnixConn, d time.Duration) int {
	n := 0
	buf := make([]byte, 4096)
	for end := time.Now().Add(d); time.Now().Before(end); {
		_ = c.SetReadDeadline(end)
		m, err := c.Read(buf)
		if err != nil {
			break
		}
		if strings.Contains(string(buf[:m]), "WATCHDOG=1") {
			n++
		}
	}
	return n
}

// A worker stuck in one step (no progress for longer than a step may
// take) stops the watchdog's pings although the loop still goes round;
// once the worker is done (here a release interrupts it) they come back.
func TestStuckWorkerStopsTheWatchdog(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify.sock")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	t.Setenv("WATCHDOG_USEC", "400000") // 400 ms

	p := &blockingProvisioner{started: make(chan struct{})}
	a := agent.New(agent.Config{StateDir: t.TempDir(), RootDir: t.TempDir(), ResyncInterval: time.Hour, Hub: "https://127.0.0.1:1",
		MaxBackoff: time.Hour, KeepAlive: time.Second}, p, logr.Discard())
	a.SetLiveness(50*time.Millisecond, 300*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, func() { close(ready) }) }()
	<-ready
	go (sdnotify.Notifier{}).Watchdog(ctx, a.LastHealthy)

	if watchdogPings(c, time.Second) == 0 {
		t.Fatal("no watchdog ping while the agent was idle")
	}
	a.Updates() <- session.Update{Op: session.OpDesired, Desired: &wire.DesiredState{Generation: 2, Assignment: assignment("u1")}}
	<-p.started
	// Past the stall limit and one watchdog interval, then drain.
	time.Sleep(800 * time.Millisecond)
	watchdogPings(c, 10*time.Millisecond)
	if n := watchdogPings(c, time.Second); n != 0 {
		t.Fatalf("%d watchdog pings while the worker was stuck", n)
	}
	// The loop still goes round: the release reaches the interrupt.
	a.Updates() <- session.Update{Op: session.OpDesired, Desired: &wire.DesiredState{Generation: 3, Deprovision: true}}
	if watchdogPings(c, 2*time.Second) == 0 {
		t.Fatal("no watchdog ping after the worker finished")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// renewing is a provisioner whose host's certificates are renewed while
// it serves.
type renewing struct {
	agenttest.Recorder
	mu     sync.Mutex
	expiry time.Time
}

func (r *renewing) CertificatesExpiry() *time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.expiry
	return &t
}

func (r *renewing) renew(to time.Time) {
	r.mu.Lock()
	r.expiry = to
	r.mu.Unlock()
}

// The certificates' expiry of a provisioned host is read again at every
// check interval, so a renewal shows on the Machine; a host with nothing
// provisioned reports none.
func TestCertificatesExpiryIsReadAgain(t *testing.T) {
	first := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	prov := &renewing{expiry: first}
	a := agent.New(agent.Config{StateDir: t.TempDir(), RootDir: t.TempDir(), ResyncInterval: time.Hour, Hub: "https://127.0.0.1:1",
		MaxBackoff: time.Hour, KeepAlive: time.Second, CertificatesCheckInterval: 50 * time.Millisecond}, prov, logr.Discard())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, func() { close(ready) }) }()
	<-ready
	time.Sleep(200 * time.Millisecond)
	if got := a.Applied().CertificatesExpiryDate; got != nil {
		t.Fatalf("a host with nothing provisioned reports certificates expiring %v", got)
	}

	a.Apply(ctx, &wire.DesiredState{Generation: 1, Assignment: &wire.Assignment{ClaimUID: "u1", MachineName: "m", ProviderID: "edge://ns/h",
		BootstrapFormat: "cloud-config", BootstrapData: []byte("#cloud-config\n")}})
	renewed := first.AddDate(1, 0, 0)
	prov.renew(renewed)
	testkit.Eventually(t, 10*time.Second, 20*time.Millisecond, "the renewed expiry reported", func() error {
		if got := a.Applied().CertificatesExpiryDate; got == nil || !got.Time.Equal(renewed) {
			return fmt.Errorf("certificatesExpiryDate %v, want %s", got, renewed)
		}
		return nil
	})
	cancel()
	<-done
}
