//go:build linux

package linkprobe

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// How retransmissions are provoked: this kernel has no sch_netem (and no
// module support, iptables or nft binaries), so the tests drop packets with
// their own BPF program on the TCX ingress hook of lo inside a private
// network namespace. Dropping on ingress matters: a drop on egress is
// reported back to TCP as a local transmit failure and the segment is simply
// sent again later, mostly not as a retransmission (tried: ~20 egress drops
// gave 0-3 tcp_retransmit_skb events). TCX needs Linux 6.6.

// requireRoot skips unprivileged runs, except in CI where they must not
// silently pass.
func requireRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		tb.Fatal("CI=true but not root: this test needs root (CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN, CAP_SYS_ADMIN)")
	}
	tb.Skip("needs root")
}

func TestProbeCountsRetransmissions(t *testing.T) {
	requireRoot(t)
	ns := newNetns(t)
	hub, other := ns.listen(t), ns.listen(t)
	hubPort, otherPort := port(hub), port(other)
	loss := ns.lossy(t)

	p, err := Start(Options{HubPort: hubPort})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	t.Logf("attached: %v", p.Attached())
	hasDrops := slices.Contains(p.Attached(), "skb:kfree_skb")

	// lo's MTU is 64 KiB, so 16 MiB is ~256 segments; 10% loss drops ~25.
	const size, lossPct, minRetrans = 16 << 20, 10, 5
	c0 := read(t, p)
	loss.set(t, hubPort, lossPct)
	ns.transfer(t, hub, size)
	c1 := read(t, p)
	dropped1 := loss.set(t, otherPort, lossPct)
	ns.transfer(t, other, size)
	c2 := read(t, p)
	dropped2 := loss.set(t, 0, 0)
	t.Logf("to hub port %d: %d packets dropped, %+v -> %+v", hubPort, dropped1, c0, c1)
	t.Logf("to other port %d: %d packets dropped, %+v -> %+v", otherPort, dropped2, c1, c2)

	if d := c1.RetransmitsToHub - c0.RetransmitsToHub; d < minRetrans {
		t.Errorf("RetransmitsToHub rose by %d while sending %d bytes to the hub port with %d%% loss, want >= %d", d, size, lossPct, minRetrans)
	}
	// Tracepoints are global: other traffic on the machine may add to
	// Retransmits, so only lower bounds are asserted for it.
	if d := c1.Retransmits - c0.Retransmits; d < c1.RetransmitsToHub-c0.RetransmitsToHub {
		t.Errorf("Retransmits rose by %d, less than RetransmitsToHub (%d)", d, c1.RetransmitsToHub-c0.RetransmitsToHub)
	}
	if d := c2.Retransmits - c1.Retransmits; d < minRetrans {
		t.Errorf("Retransmits rose by %d while sending to another port with %d%% loss, want >= %d", d, lossPct, minRetrans)
	}
	// Nothing but this test's client sends to the hub port, and its
	// connection was fully closed (its FIN acknowledged) before phase two.
	if c2.RetransmitsToHub != c1.RetransmitsToHub {
		t.Errorf("RetransmitsToHub moved from %d to %d while only the other port saw loss", c1.RetransmitsToHub, c2.RetransmitsToHub)
	}
	if hasDrops {
		// Every packet the lossy program dropped went through kfree_skb
		// with reason TC_INGRESS.
		if d := c2.Drops - c0.Drops; d < dropped1+dropped2 {
			t.Errorf("Drops rose by %d, want >= %d (the packets dropped on purpose)", d, dropped1+dropped2)
		}
	} else {
		t.Log("skb:kfree_skb not attached; Drops not checked")
	}

	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := p.Read(); err == nil {
		t.Error("Read after Close succeeded")
	}
}

// TestStartCloseReleasesEverything checks that Close (and a failed Start)
// leave no file descriptor behind: links, programs and the map are all FDs.
func TestStartCloseReleasesEverything(t *testing.T) {
	requireRoot(t)
	countFDs := func() int {
		fds, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(fds)
	}
	cycle := func() {
		p, err := Start(Options{HubPort: 443})
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
		if err := p.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := p.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if _, err := Start(Options{TracefsDir: "/nonexistent"}); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Start with a bad TracefsDir: %v", err)
		}
	}
	cycle() // cilium/ebpf keeps some feature-probe results for the process
	before := countFDs()
	for range 5 {
		cycle()
	}
	if after := countFDs(); after != before {
		t.Errorf("open FDs went from %d to %d over 5 Start/Close cycles", before, after)
	}
}

// TestStartTracefsDir checks that Start mounts tracefs where it is told to,
// and says so plainly when it cannot.
func TestStartTracefsDir(t *testing.T) {
	requireRoot(t)
	// Mount the default one first: cilium/ebpf picks the first tracefs in
	// mountinfo for the whole process, and this test's mount goes away.
	if _, err := tracefsDir(""); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p, err := Start(Options{TracefsDir: dir})
	if isTracefs(dir) {
		t.Cleanup(func() {
			if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
				t.Errorf("unmounting %s: %v", dir, err)
			}
		})
	}
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if !isTracefs(dir) {
		t.Errorf("Start did not mount tracefs at %s", dir)
	}

	_, err = Start(Options{TracefsDir: filepath.Join(dir, "missing")})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "mounting it failed") {
		t.Errorf("Start with a missing TracefsDir: error = %v, want ErrUnavailable saying the mount failed", err)
	}
	t.Logf("missing TracefsDir: %v", err)
}

// TestProbeUnavailableWhenBPFDenied runs Start in child processes that may
// not use BPF. The assertions do not depend on
// kernel.unprivileged_bpf_disabled (2 on the machine this was written on):
// even with 0, tracepoint programs need CAP_BPF and CAP_PERFMON in the
// initial user namespace.
func TestProbeUnavailableWhenBPFDenied(t *testing.T) {
	if os.Geteuid() != 0 {
		// Already unprivileged: no child process needed.
		if checkCapabilities() == nil {
			t.Skip("not root, but has CAP_BPF and CAP_PERFMON or CAP_SYS_ADMIN")
		}
		p, err := Start(Options{})
		if err == nil {
			p.Close()
			t.Fatal("Start succeeded without privileges")
		}
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "needs CAP_BPF and CAP_PERFMON") {
			t.Fatalf("Start: %v, want ErrUnavailable naming the missing capabilities", err)
		}
		return
	}
	// So the children reach the BPF syscalls rather than failing to mount.
	if _, err := tracefsDir(""); err != nil {
		t.Fatalf("tracefs: %v", err)
	}
	bin := worldExecutableCopy(t)

	helperArgs := []string{bin, "-test.run=^TestHelperDeniedProbe$", "-test.v"}

	t.Run("nobody", func(t *testing.T) {
		cmd := exec.Command(bin, helperArgs[1:]...)
		cmd.SysProcAttr = &syscall.SysProcAttr{
			// Switching from uid 0 to another uid clears all capabilities.
			Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}},
		}
		msg := runHelper(t, cmd)
		if !strings.Contains(msg, "needs CAP_BPF and CAP_PERFMON") {
			t.Errorf("error %q does not name the missing capabilities", msg)
		}
	})

	t.Run("root without capabilities", func(t *testing.T) {
		setpriv, err := exec.LookPath("setpriv")
		if err != nil {
			t.Skip("setpriv (util-linux) not installed")
		}
		// uid 0 (so tracefs stays readable) but no capability at all, as
		// with a systemd unit that sets CapabilityBoundingSet= too tight.
		cmd := exec.Command(setpriv, append([]string{"--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all",
			"--securebits=+noroot,+noroot_locked,+no_setuid_fixup,+no_setuid_fixup_locked", "--"}, helperArgs...)...)
		msg := runHelper(t, cmd)
		if !strings.Contains(msg, "needs CAP_BPF and CAP_PERFMON") {
			t.Errorf("error %q does not name the missing capabilities", msg)
		}
	})

	t.Run("user namespace", func(t *testing.T) {
		// Full capabilities, but only in a new user namespace (as in a
		// rootless container): the capability check passes and it is the
		// bpf() syscall that refuses.
		cmd := exec.Command(bin, helperArgs[1:]...)
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
		}
		msg := runHelper(t, cmd)
		if !strings.Contains(msg, "operation not permitted") || !strings.Contains(msg, "needs CAP_BPF and CAP_PERFMON") {
			t.Errorf("error %q does not say the bpf() syscall was refused for lack of capabilities", msg)
		}
	})
}

// TestHelperDeniedProbe is the child half of TestProbeUnavailableWhenBPFDenied.
func TestHelperDeniedProbe(t *testing.T) {
	if os.Getenv("LINKPROBE_HELPER") != "denied" {
		t.Skip("helper process for TestProbeUnavailableWhenBPFDenied")
	}
	p, err := Start(Options{HubPort: 443})
	if err == nil {
		p.Close()
		fmt.Println("RESULT started")
		return
	}
	fmt.Printf("RESULT unavailable=%t\nERROR %v\n", errors.Is(err, ErrUnavailable), err)
}

func runHelper(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	cmd.Dir = "/" // the test's working directory may not be readable by the child
	cmd.Env = append(os.Environ(), "LINKPROBE_HELPER=denied")
	out, err := cmd.CombinedOutput()
	var exitErr *exec.ExitError
	switch {
	case err != nil && !errors.As(err, &exitErr) && cmd.SysProcAttr != nil && cmd.SysProcAttr.Cloneflags != 0:
		t.Skipf("cannot create a user namespace here: %v", err) // e.g. inside a container
	case err != nil:
		t.Fatalf("helper: %v\n%s", err, out)
	}
	var msg string
	switch {
	case bytes.Contains(out, []byte("RESULT started")):
		t.Fatalf("Start succeeded without privileges:\n%s", out)
	case !bytes.Contains(out, []byte("RESULT unavailable=true")):
		t.Fatalf("error does not wrap ErrUnavailable (or helper did not run):\n%s", out)
	}
	for line := range strings.Lines(string(out)) {
		if m, ok := strings.CutPrefix(line, "ERROR "); ok {
			msg = strings.TrimSpace(m)
		}
	}
	t.Logf("Start: %s", msg)
	if !strings.HasPrefix(msg, ErrUnavailable.Error()+": ") {
		t.Errorf("error %q does not start with %q", msg, ErrUnavailable.Error())
	}
	return msg
}

// worldExecutableCopy copies the test binary where an unprivileged user can
// execute it: go test builds it in a 0700 directory.
func worldExecutableCopy(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "linkprobe-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	bin := filepath.Join(dir, "linkprobe.test")
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return bin
}

// BenchmarkProbeOverhead measures what the probe costs the traffic it
// watches, with and without it attached, in a private network namespace:
//
//   - tcp_rr: 1-byte TCP request/response over lo, reported per packet
//     (round trip / 2). No packet is dropped or retransmitted, so the
//     tracepoints do not fire: this is what ordinary traffic pays.
//   - udp_drop: UDP datagrams that a TCX ingress program drops, so every
//     packet fires skb:kfree_skb and runs the probe's program: the worst
//     case, the per-drop cost.
//   - bpf_runtime: the kernel's own accounting (BPF_ENABLE_STATS) of the
//     probe programs' run time per event during a lossy TCP transfer.
func BenchmarkProbeOverhead(b *testing.B) {
	requireRoot(b)
	ns := newNetns(b)

	b.Run("tcp_rr", func(b *testing.B) {
		ln := ns.listen(b)
		go echo(ln)
		var c net.Conn
		ns.run(b, func() (err error) { c, err = net.Dial("tcp4", ln.Addr().String()); return err })
		defer c.Close()
		buf := make([]byte, 1)
		compare(b, 2, func(n int) error {
			for range n {
				if _, err := c.Write(buf); err != nil {
					return err
				}
				if _, err := io.ReadFull(c, buf); err != nil {
					return err
				}
			}
			return nil
		})
	})

	b.Run("udp_drop", func(b *testing.B) {
		const dport = 9
		loss := ns.lossy(b)
		loss.set(b, dport, 100)
		var c net.Conn
		ns.run(b, func() (err error) { c, err = net.Dial("udp4", fmt.Sprintf("127.0.0.1:%d", dport)); return err })
		defer c.Close()
		buf := make([]byte, 64)
		compare(b, 1, func(n int) error {
			for range n {
				if _, err := c.Write(buf); err != nil {
					return err
				}
			}
			return nil
		})
	})

	b.Run("bpf_runtime", func(b *testing.B) {
		ln := ns.listen(b)
		loss := ns.lossy(b)
		stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
		if err != nil {
			b.Skipf("BPF stats: %v", err)
		}
		defer stats.Close()
		p, err := Start(Options{HubPort: port(ln)})
		if err != nil {
			b.Fatal(err)
		}
		defer p.Close()
		for b.Loop() {
			loss.set(b, port(ln), 10)
			ns.transfer(b, ln, 4<<20)
			loss.set(b, 0, 0)
		}
		for i, name := range p.Attached() {
			st, err := p.progs[i].Stats()
			if err != nil {
				b.Fatal(err)
			}
			if st.RunCount > 0 {
				unit := "ns/event-" + strings.TrimPrefix(name[strings.Index(name, ":")+1:], "tcp_")
				b.ReportMetric(float64(st.Runtime.Nanoseconds())/float64(st.RunCount), unit)
			}
		}
	})
}

// compare times batches of send with the probe detached and attached,
// alternating which goes first so that drift and warm-up affect both alike.
func compare(b *testing.B, pktsPerCall int, send func(n int) error) {
	const batch = 20000
	var without, with time.Duration
	timed := func(d *time.Duration) {
		start := time.Now()
		if err := send(batch); err != nil {
			b.Fatal(err)
		}
		*d += time.Since(start)
	}
	runs := 0
	for b.Loop() {
		if runs%2 == 0 {
			timed(&without)
		}
		p, err := Start(Options{HubPort: 443})
		if err != nil {
			b.Fatal(err)
		}
		timed(&with)
		if err := p.Close(); err != nil {
			b.Fatal(err)
		}
		if runs%2 == 1 {
			timed(&without)
		}
		runs++
	}
	pkts := float64(runs * batch * pktsPerCall)
	b.ReportMetric(float64(without.Nanoseconds())/pkts, "ns/pkt-without")
	b.ReportMetric(float64(with.Nanoseconds())/pkts, "ns/pkt-with")
	b.ReportMetric(float64((with-without).Nanoseconds())/pkts, "ns/pkt-delta")
}

// BenchmarkRead measures Read, which the agent calls every few seconds.
func BenchmarkRead(b *testing.B) {
	requireRoot(b)
	p, err := Start(Options{HubPort: 443})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	for b.Loop() {
		if _, err := p.Read(); err != nil {
			b.Fatal(err)
		}
	}
}

func read(t testing.TB, p *Probe) Counters {
	t.Helper()
	c, err := p.Read()
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if c.RetransmitsToHub > c.Retransmits {
		t.Errorf("RetransmitsToHub %d > Retransmits %d", c.RetransmitsToHub, c.Retransmits)
	}
	return c
}

func port(ln net.Listener) uint16 { return uint16(ln.Addr().(*net.TCPAddr).Port) }

func echo(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			_, _ = io.Copy(c, c)
		}()
	}
}

// netns is a private network namespace, held open by fd, with lo up.
type netns struct{ fd int }

func newNetns(tb testing.TB) *netns {
	tb.Helper()
	ns := &netns{fd: -1}
	err := onLockedThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare: %w", err)
		}
		fd, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		ns.fd = fd
		return setUp("lo")
	})
	if ns.fd >= 0 {
		tb.Cleanup(func() { unix.Close(ns.fd) })
	}
	if err != nil {
		tb.Fatalf("creating network namespace: %v", err)
	}
	return ns
}

// run calls fn on a thread inside the namespace. Sockets keep the namespace
// they were created in, so they can be used from anywhere afterwards.
func (ns *netns) run(tb testing.TB, fn func() error) {
	tb.Helper()
	err := onLockedThread(func() error {
		if err := unix.Setns(ns.fd, unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("setns: %w", err)
		}
		return fn()
	})
	if err != nil {
		tb.Fatal(err)
	}
}

// onLockedThread runs fn on a dedicated OS thread and puts the thread back
// in the original network namespace afterwards; if that fails the thread is
// left locked, and the Go runtime destroys it when the goroutine exits.
func onLockedThread(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer unix.Close(orig)
		err = fn()
		if unix.Setns(orig, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

func setUp(ifname string) error {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(s)
	ifr, err := unix.NewIfreq(ifname)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(s, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("SIOCGIFFLAGS %s: %w", ifname, err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(s, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("SIOCSIFFLAGS %s: %w", ifname, err)
	}
	return nil
}

func (ns *netns) listen(tb testing.TB) net.Listener {
	tb.Helper()
	var ln net.Listener
	ns.run(tb, func() (err error) { ln, err = net.Listen("tcp4", "127.0.0.1:0"); return err })
	tb.Cleanup(func() { ln.Close() })
	return ln
}

// transfer sends size bytes to ln from a new connection and returns once
// the server has read them all and both sides have closed: the client's
// FIN has been received, so nothing of this connection is left to
// retransmit.
func (ns *netns) transfer(tb testing.TB, ln net.Listener, size int) {
	tb.Helper()
	got := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- err
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(time.Minute))
		n, err := io.Copy(io.Discard, c)
		if err == nil && n != int64(size) {
			err = fmt.Errorf("server read %d bytes, want %d", n, size)
		}
		got <- err
	}()
	var c net.Conn
	ns.run(tb, func() (err error) { c, err = net.Dial("tcp4", ln.Addr().String()); return err })
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	if _, err := c.Write(make([]byte, size)); err != nil {
		tb.Fatalf("client write: %v", err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		tb.Fatalf("client close: %v", err)
	}
	if err := <-got; err != nil {
		tb.Fatalf("server: %v", err)
	}
	if _, err := io.Copy(io.Discard, c); err != nil { // until the server's FIN
		tb.Fatalf("client read: %v", err)
	}
}

// lossyDropper is a TCX ingress program on the namespace's lo that drops a
// percentage of IPv4 TCP/UDP packets to one destination port.
type lossyDropper struct{ cfg *ebpf.Map }

// Slots of the dropper's config array.
const (
	cfgPort = iota
	cfgPercent
	cfgDropped
)

func (ns *netns) lossy(tb testing.TB) *lossyDropper {
	tb.Helper()
	cfg, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 3})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cfg.Close() })
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "lp_test_lossy",
		Type:         ebpf.SchedCLS,
		AttachType:   ebpf.AttachTCXIngress,
		License:      progLicense,
		Instructions: lossyProgram(cfg),
	})
	if err != nil {
		tb.Fatalf("loading lossy program: %v", err)
	}
	tb.Cleanup(func() { prog.Close() })
	ns.run(tb, func() error {
		lo, err := net.InterfaceByName("lo")
		if err != nil {
			return err
		}
		l, err := link.AttachTCX(link.TCXOptions{Interface: lo.Index, Program: prog, Attach: ebpf.AttachTCXIngress})
		if err != nil {
			return fmt.Errorf("attaching TCX ingress to lo (needs Linux 6.6): %w", err)
		}
		tb.Cleanup(func() { l.Close() })
		return nil
	})
	return &lossyDropper{cfg: cfg}
}

// set starts dropping percent% of packets to dport and returns how many
// packets were dropped since the previous call.
func (d *lossyDropper) set(tb testing.TB, dport uint16, percent uint64) uint64 {
	tb.Helper()
	var dropped uint64
	if err := d.cfg.Lookup(uint32(cfgDropped), &dropped); err != nil {
		tb.Fatal(err)
	}
	for k, v := range map[uint32]uint64{cfgPort: uint64(dport), cfgPercent: percent, cfgDropped: 0} {
		if err := d.cfg.Put(k, v); err != nil {
			tb.Fatal(err)
		}
	}
	return dropped
}

func lossyProgram(cfg *ebpf.Map) asm.Instructions {
	const (
		buf      = -40 // eth(14) + IPv4 without options(20) + ports(4) on the stack
		key      = -44
		skbProto = 16 // offsetof(struct __sk_buff, protocol)
	)
	lookup := func(slot int64) asm.Instructions {
		return asm.Instructions{
			asm.StoreImm(asm.RFP, key, slot, asm.Word),
			asm.LoadMapPtr(asm.R1, cfg.FD()),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, key),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "pass"),
		}
	}
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R1, asm.R6, skbProto, asm.Word),
		asm.JNE.Imm(asm.R1, int32(htons(ethPIP)), "pass"),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Imm(asm.R2, 0),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, buf),
		asm.Mov.Imm(asm.R4, 38),
		asm.FnSkbLoadBytes.Call(),
		asm.JNE.Imm(asm.R0, 0, "pass"),
		asm.LoadMem(asm.R1, asm.RFP, buf+14, asm.Byte),
		asm.JNE.Imm(asm.R1, 0x45, "pass"), // IPv4, no options
		asm.LoadMem(asm.R1, asm.RFP, buf+23, asm.Byte),
		asm.JEq.Imm(asm.R1, unix.IPPROTO_TCP, "ports"),
		asm.JNE.Imm(asm.R1, unix.IPPROTO_UDP, "pass"),
		asm.LoadMem(asm.R7, asm.RFP, buf+36, asm.Half).WithSymbol("ports"),
		asm.HostTo(asm.BE, asm.R7, asm.Half),
	}
	insns = append(insns, lookup(cfgPort)...)
	insns = append(insns,
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		asm.JNE.Reg(asm.R7, asm.R1, "pass"),
	)
	insns = append(insns, lookup(cfgPercent)...)
	insns = append(insns,
		asm.LoadMem(asm.R8, asm.R0, 0, asm.DWord),
		asm.FnGetPrandomU32.Call(),
		asm.Mod.Imm(asm.R0, 100),
		asm.JGE.Reg(asm.R0, asm.R8, "pass"),
	)
	insns = append(insns, lookup(cfgDropped)...)
	return append(insns,
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R0, 2), // TC_ACT_SHOT
		asm.Return(),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("pass"), // TC_ACT_OK
		asm.Return(),
	)
}

func htons(v uint16) uint16 {
	return binary.NativeEndian.Uint16(binary.BigEndian.AppendUint16(nil, v))
}
