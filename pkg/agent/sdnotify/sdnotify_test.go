package sdnotify

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// listen binds a unixgram socket as systemd would and points NOTIFY_SOCKET
// at it (as go-systemd's own tests do).
func listen(t *testing.T) *net.UnixConn {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify.sock")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	return c
}

func recv(t *testing.T, c *net.UnixConn, d time.Duration) string {
	t.Helper()
	buf := make([]byte, 4096)
	_ = c.SetReadDeadline(time.Now().Add(d))
	n, err := c.Read(buf)
	if err != nil {
		return ""
	}
	return string(buf[:n])
}

func TestReadyAndStatus(t *testing.T) {
	c := listen(t)
	var n Notifier
	n.Ready()
	if got := recv(t, c, time.Second); got != "READY=1" {
		t.Errorf("got %q", got)
	}
	n.Status("connected to https://hub")
	if got := recv(t, c, time.Second); got != "STATUS=connected to https://hub" {
		t.Errorf("got %q", got)
	}
}

// The watchdog pings while the loop goes round, and stops when it is stuck.
func TestWatchdogFollowsTheLoop(t *testing.T) {
	c := listen(t)
	t.Setenv("WATCHDOG_USEC", "400000") // 400 ms
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go (Notifier{}).Watchdog(ctx, func() time.Time { return time.Unix(0, last.Load()) })
	// Alive: the loop "ticks" and pings come.
	alive := time.Now().Add(time.Second)
	pings := 0
	for time.Now().Before(alive) {
		last.Store(time.Now().UnixNano())
		if strings.Contains(recv(t, c, 100*time.Millisecond), "WATCHDOG=1") {
			pings++
		}
	}
	if pings == 0 {
		t.Fatal("no watchdog ping while the loop was alive")
	}
	// Stuck: the loop stops; after one interval no more pings.
	time.Sleep(500 * time.Millisecond)
	for drained := recv(t, c, 10*time.Millisecond); drained != ""; drained = recv(t, c, 10*time.Millisecond) {
	}
	if got := recv(t, c, 800*time.Millisecond); got != "" {
		t.Errorf("pinged %q while the loop was stuck", got)
	}
}

func TestNoWatchdogWithoutWatchdogSec(t *testing.T) {
	listen(t)
	t.Setenv("WATCHDOG_USEC", "")
	done := make(chan struct{})
	go func() { (Notifier{}).Watchdog(context.Background(), time.Now); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("Watchdog did not return without WatchdogSec")
	}
}
