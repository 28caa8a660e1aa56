package testhost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// testImage is make test-image's root file system, or the test stops
// where this machine cannot boot hosts (failing under CI).
func testImage(t *testing.T) string {
	t.Helper()
	image, err := filepath.Abs(filepath.Join("..", "..", "..", "bin", "edge-image", "rootfs"))
	if err != nil {
		t.Fatal(err)
	}
	Require(t, image, "test hosts")
	return image
}

func newTestSite(t *testing.T) *Site {
	t.Helper()
	s, err := NewSite(fmt.Sprintf("fts-t%d", os.Getpid()%100000), "10.96.77")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// A host has its own hostname, address, directories and cgroup; its
// services run under its systemd; Close leaves nothing behind.
func TestHostIsIsolatedAndCleansUp(t *testing.T) {
	image := testImage(t)
	ctx := context.Background()
	s := newTestSite(t)
	name := fmt.Sprintf("th%d-a", os.Getpid()%100000)
	h, err := s.NewHost(ctx, HostOptions{Name: name, Dir: t.TempDir(), Image: image})
	if err != nil {
		t.Fatal(err)
	}
	out, err := h.Command(ctx, "sh", "-c", "hostname; cat /etc/hostname; ip -4 -o addr show eth0; ls -A /etc/kubernetes/pki 2>/dev/null | wc -l").CombinedOutput()
	if err != nil {
		t.Fatalf("inside the host: %v\n%s", err, out)
	}
	got := strings.Fields(string(out))
	if len(got) < 6 || got[0] != name || got[1] != name || !strings.HasPrefix(got[5], h.Addr+"/") || got[len(got)-1] != "0" {
		t.Errorf("inside the host: %q; want hostname %s, address %s, no cluster PKI", out, name, h.Addr)
	}
	if b, _ := os.ReadFile("/etc/hostname"); strings.TrimSpace(string(b)) == name {
		t.Error("the host's hostname leaked into the machine's /etc/hostname")
	}
	// The site's router is reachable from the host, and only it.
	got0, err := h.Command(ctx, "ip", "route", "get", "1.1.1.1").CombinedOutput()
	if err != nil || !strings.Contains(string(got0), "via "+s.Router) {
		t.Errorf("the host's way out: %v %s; want via %s", err, got0, s.Router)
	}
	// containerd runs as a unit of the host's systemd, in the host's
	// cgroup.
	pids := cgroupPids(h.cgroup)
	var containerd bool
	for _, pid := range pids {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(b)) == "containerd" {
			containerd = true
		}
	}
	if !containerd {
		t.Errorf("no containerd among the host's processes %v", pids)
	}
	if err := h.Unit(ctx, "restart", "containerd.service"); err != nil {
		t.Errorf("restarting containerd with the host's systemctl: %v", err)
	}
	if out, err := h.Command(ctx, "systemctl", "is-active", "containerd").CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "active" {
		t.Errorf("systemctl is-active containerd in the host: %v %q", err, out)
	}
	if out, err := h.Command(ctx, "systemctl", "status", "nothere").CombinedOutput(); err == nil || !strings.Contains(string(out), "could not be found") {
		t.Errorf("systemctl status of a missing unit: %v %q", err, out)
	}

	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	assertGone(t, h)
}

// A host whose maker was killed is removed by the next Sweep.
func TestSweepRemovesWhatAKilledRunLeft(t *testing.T) {
	image := testImage(t)
	ctx := context.Background()
	s := newTestSite(t)
	name := fmt.Sprintf("th%d-b", os.Getpid()%100000)
	h, err := s.NewHost(ctx, HostOptions{Name: name, Dir: t.TempDir(), Image: image})
	if err != nil {
		t.Fatal(err)
	}
	// Pretend the maker died: its record names a pid that no longer runs.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(recordPath("host", name))
	if err != nil {
		t.Fatal(err)
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	r.Owner = dead.Process.Pid
	b, _ = json.Marshal(r)
	if err := os.WriteFile(recordPath("host", name), b, 0o600); err != nil {
		t.Fatal(err)
	}
	swept, err := Sweep()
	if err != nil {
		t.Fatal(err)
	}
	// Other killed runs' leftovers may be swept too.
	if !slices.ContainsFunc(swept, func(s string) bool { return strings.Contains(s, "host "+name+" ") }) {
		t.Errorf("Sweep = %q, want the host %s among them", swept, name)
	}
	assertGone(t, h)
	// The live site was not touched.
	if _, err := os.Stat(s.Path()); err != nil {
		t.Errorf("Sweep removed a live site: %v", err)
	}
}

func assertGone(t *testing.T, h *Host) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, p := range []string{"/run/netns/" + h.netns, h.Dir, recordPath("host", h.Name)} {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s is left after the host was removed (%v)", p, err)
		}
	}
	for _, hier := range hierarchies() {
		if _, err := os.Stat(filepath.Join(hier, h.cgroup)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("cgroup %s is left in %s", h.cgroup, hier)
		}
	}
	for time.Now().Before(deadline) && len(cgroupPids(h.cgroup)) > 0 {
		time.Sleep(100 * time.Millisecond)
	}
	if pids := cgroupPids(h.cgroup); len(pids) > 0 {
		t.Errorf("processes %v outlived the host", pids)
	}
}

// A site or host a live run holds is not taken over, and Sweep leaves a
// record alone that names anything but what a host of its name makes.
func TestRecordsGuardWhatTheyName(t *testing.T) {
	// Records of its own: other packages' real-node tests sweep the
	// machine's at the same time.
	recordDir = t.TempDir()
	t.Cleanup(func() { recordDir = RecordDir })
	name := fmt.Sprintf("tr%d", os.Getpid()%100000)
	// Held by a live process (this test's parent) that is not this one.
	live := Record{Kind: "host", Name: name, Owner: os.Getppid(), OwnerStart: startTime(os.Getppid()),
		NetNS: "fleet-" + name, Cgroup: "/fleet-" + name, Dir: "/nonexistent/" + name}
	b, _ := json.Marshal(live)
	if err := os.WriteFile(recordPath("host", name), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := record(Record{Kind: "host", Name: name}); err == nil || !strings.Contains(err.Error(), "still going") {
		t.Errorf("record over a live run's host = %v, want a refusal", err)
	}
	if got := Owner("host", name); got != os.Getppid() {
		t.Errorf("Owner = %d, want %d", got, os.Getppid())
	}
	// The same pid with another start time is another process: not alive.
	live.OwnerStart++
	if live.alive() {
		t.Error("a reused pid counts as the record's maker")
	}
	// A dead maker's record that names the whole cgroup tree is refused.
	bad := Record{Kind: "host", Name: name, Owner: 0, NetNS: "fleet-" + name, Cgroup: "/", Dir: "/nonexistent/" + name}
	b, _ = json.Marshal(bad)
	if err := os.WriteFile(recordPath("host", name), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Sweep(); err == nil || !strings.Contains(err.Error(), "left alone") {
		t.Errorf("Sweep of a record naming cgroup / = %v, want it left alone", err)
	}
	if _, err := os.Stat(recordPath("host", name)); err != nil {
		t.Errorf("the bad record was removed: %v", err)
	}
}

// Each host's pod range is routed through it on the site's other hosts:
// an address of host a's range answers a connection from host b, and the
// route goes when a does.
func TestPodRangesRoutedBetweenHosts(t *testing.T) {
	image := testImage(t)
	ctx := context.Background()
	s := newTestSite(t)
	var hosts []*Host
	for _, suffix := range []string{"a", "b"} {
		h, err := s.NewHost(ctx, HostOptions{Name: fmt.Sprintf("tp%d-%s", os.Getpid()%100000, suffix), Dir: t.TempDir(), Image: image})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.Close() })
		hosts = append(hosts, h)
	}
	a, b := hosts[0], hosts[1]
	if a.PodCIDR == b.PodCIDR {
		t.Fatalf("both hosts give pods %s", a.PodCIDR)
	}
	// A pod's address on a, as the bridge CNI would give one.
	prefix, err := netip.ParsePrefix(a.PodCIDR)
	if err != nil {
		t.Fatal(err)
	}
	podIP := prefix.Addr().Next().Next().String()
	if out, err := exec.Command("ip", "-n", a.netns, "addr", "add", podIP+"/32", "dev", "lo").CombinedOutput(); err != nil {
		t.Fatalf("adding %s on %s: %v: %s", podIP, a.Name, err, out)
	}
	var ln net.Listener
	if err := a.Inside(func() (err error) { ln, err = net.Listen("tcp", net.JoinHostPort(podIP, "0")); return err }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte(a.Name))
			_ = c.Close()
		}
	}()
	var answer []byte
	if err := b.Inside(func() error {
		c, err := net.DialTimeout("tcp", ln.Addr().String(), 10*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		answer, err = io.ReadAll(c)
		return err
	}); err != nil || string(answer) != a.Name {
		t.Fatalf("from %s to a pod address of %s: %v %q", b.Name, a.Name, err, answer)
	}

	routeOnB := func() string {
		out, _ := exec.Command("ip", "-n", b.netns, "route", "show", a.PodCIDR).CombinedOutput()
		return strings.TrimSpace(string(out))
	}
	if got := routeOnB(); !strings.Contains(got, "via "+a.Addr) {
		t.Errorf("%s's route to %s: %q, want via %s", b.Name, a.PodCIDR, got, a.Addr)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if got := routeOnB(); got != "" {
		t.Errorf("%s still routes %s after %s is gone: %q", b.Name, a.PodCIDR, a.Name, got)
	}
}
