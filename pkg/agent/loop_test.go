package agent_test

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/edgefleet/fleet/pkg/agent"
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
