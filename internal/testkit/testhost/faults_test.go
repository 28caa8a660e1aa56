package testhost

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// A power cut kills every process on the box at once, its /run goes and
// its disk stays; PowerOn boots it again, with the same name and address,
// and its services start as on any boot.
func TestPowerCutKeepsTheDiskAndBootsAgain(t *testing.T) {
	image := testImage(t)
	ctx := context.Background()
	s := newTestSite(t)
	h, err := s.NewHost(ctx, HostOptions{Name: fmt.Sprintf("tc%d", os.Getpid()%100000), Dir: t.TempDir(), Image: image})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	for p, c := range map[string]string{"var/lib/kept": "on disk", "run/lost": "in memory"} {
		if err := h.WriteFile(p, c, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A process no unit owns, as a container's would be, dies with the rest.
	stray := h.Command(ctx, "sleep", "infinity")
	if err := stray.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stray.Wait() }()
	before := h.PID()

	if err := h.PowerCut(); err != nil {
		t.Fatal(err)
	}
	if pids := cgroupPids(h.cgroup); len(pids) > 0 {
		t.Errorf("processes %v outlived the power cut", pids)
	}
	if err := h.PowerCut(); err == nil || !strings.Contains(err.Error(), "already off") {
		t.Errorf("a second PowerCut = %v, want already off", err)
	}
	if err := h.PowerOn(ctx); err != nil {
		t.Fatal(err)
	}
	if h.PID() == before || h.PID() == 0 {
		t.Errorf("the box's init is %d after booting again (was %d)", h.PID(), before)
	}
	if b, err := os.ReadFile(h.Root("var/lib/kept")); err != nil || string(b) != "on disk" {
		t.Errorf("/var/lib/kept after the power cut: %q, %v", b, err)
	}
	if _, err := os.Stat(h.Root("run/lost")); err == nil {
		t.Error("/run/lost survived the power cut")
	}
	out, err := h.Command(ctx, "sh", "-c", "hostname; ip -4 -o addr show eth0; systemctl is-active containerd; journalctl --list-boots --no-pager | wc -l").CombinedOutput()
	if err != nil {
		t.Fatalf("inside the host after booting again: %v\n%s", err, out)
	}
	if got := strings.Fields(string(out)); len(got) < 5 || got[0] != h.Name || !strings.Contains(string(out), " "+h.Addr+"/") || got[len(got)-2] != "active" {
		t.Errorf("after booting again: %q; want hostname %s, address %s, containerd active", out, h.Name, h.Addr)
	}
	if err := h.PowerOn(ctx); err == nil || !strings.Contains(err.Error(), "already on") {
		t.Errorf("PowerOn of a running box = %v, want already on", err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	assertGone(t, h)
}

// A cut uplink passes nothing either way and tells neither end; once it is
// restored, a connection that tried to pass during the cut is closed
// without what it sent, and new ones pass.
func TestCutUplinkDropsWithoutTelling(t *testing.T) {
	s := newTestSite(t)
	got := make(chan string, 16)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					got <- strings.TrimSpace(line)
					if _, err := io.WriteString(c, "ack "+line); err != nil {
						return
					}
				}
			}()
		}
	}()
	addr, err := s.Forward(s.Router+":0", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	dial := func() (net.Conn, *bufio.Reader) {
		var c net.Conn
		if err := s.Inside(func() (err error) { c, err = net.Dial("tcp", addr); return err }); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c, bufio.NewReader(c)
	}
	say := func(c net.Conn, r *bufio.Reader, line string) {
		t.Helper()
		if _, err := io.WriteString(c, line+"\n"); err != nil {
			t.Fatal(err)
		}
		if ack, err := r.ReadString('\n'); err != nil || ack != "ack "+line+"\n" {
			t.Fatalf("answer to %q: %q, %v", line, ack, err)
		}
		if g := <-got; g != line {
			t.Fatalf("the far end got %q, want %q", g, line)
		}
	}
	c, r := dial()
	say(c, r, "before")
	idle, idleR := dial()
	say(idle, idleR, "idle")

	s.CutUplink()
	if _, err := io.WriteString(c, "during\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.(*net.TCPConn).CloseWrite() // not even the end passes
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		s.mu.Lock()
		held := s.held
		s.mu.Unlock()
		if held == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections held at the cut, want 1", held)
		}
	}
	s.RestoreUplink()
	if rest, err := io.ReadAll(r); err != nil || len(rest) != 0 {
		t.Errorf("the connection cut while sending read %q, %v after the uplink came back; want it closed", rest, err)
	}
	// The idle one never tried during the cut: it carries on.
	say(idle, idleR, "after, idle")
	c2, r2 := dial()
	say(c2, r2, "after")
	select {
	case g := <-got:
		t.Errorf("the far end got %q, sent during the cut", g)
	default:
	}
}
