package testhost

import (
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// HostOptions says which box to boot from the edge image.
type HostOptions struct {
	// Name names the host, its network namespace and its cgroup parent
	// /fleet-<Name>; unique on the machine.
	Name string
	// Image is the edge image's root file system, unpacked (make
	// test-image's bin/edge-image/rootfs). Hosts share it read-only: each
	// boots an overlay of its own, as each box has its own copy.
	Image string
	// Dir is where the host's state goes (Dir/Name).
	Dir string
	// Agent, if set, is put over the image's /usr/bin/fleet-agent: the
	// binary under test.
	Agent string
	// Files are put into the host's root before it boots (path inside the
	// host → contents; mode 0600 under /etc/fleet-agent, else 0644), as a
	// user edits an image before flashing it.
	Files map[string]string
	// Without leaves parts out of the image: "containerd" (its unit, and
	// the image preload that needs it, masked) or "kubelet" (no kubelet
	// binary, not even staged; its unit masked).
	Without []string
	// WithoutImages are archives the image preloads that this host does
	// not (e.g. "etcd.tar").
	WithoutImages []string
	// Unnamed leaves /etc/hostname out, so that first boot names the box
	// from its machine-id, as it does an image flashed as it is; else the
	// box is named Name, as a site names its boxes.
	Unnamed bool
	// Staged are Kubernetes versions the host carries for an in-place
	// upgrade besides the image's own, each a directory like bin/k8s
	// (kubeadm, kubelet, images/) by its version ("v1.35.4"): they appear
	// under /opt/fleet/kubernetes/<version>, where fleet-agent looks.
	Staged map[string]string
}

// Host is a box booted from the edge image with systemd as PID 1 on a
// site's LAN: the image's own /usr, units and hardening, real D-Bus, real
// journald. The kit boots it the way kind boots a node container, with
// namespaces of its own (mount, PID, UTS, IPC, cgroup, the site's network)
// and the box's cgroup parent mounted writable as its cgroup root, so the
// box's systemd and kubelet make cgroups as on a machine.
type Host struct {
	// Name is its hostname (and Node name).
	Name string
	// Addr is the host's address on the site's LAN.
	Addr string
	// PodCIDR is the range its CNI gives pods; the site's other hosts
	// route it through Addr.
	PodCIDR string
	// Dir holds root/ (the host's file system, the overlay's merged view),
	// its upper and work directories, boot.log and console.log.
	Dir string

	netns, cgroup string
	site          *Site
	binds         map[string]string // what each boot mounts over the image
	boot          *exec.Cmd
	bootDone      chan struct{}
	console       *os.File
	init          int
}

// sysctls are the values the kubelet insists on; each is bind-mounted over
// its /proc/sys file inside the host so the kubelet finds it set and never
// writes the machine-wide value.
var sysctls = map[string]string{
	"kernel/panic":         "10",
	"kernel/panic_on_oops": "1",
	"vm/overcommit_memory": "1",
}

// NewHost boots a box from the edge image on the site's LAN, with a
// .network file giving it its LAN address, and the router as its gateway
// and DNS server (what a site's own image configuration would say; the
// box's systemd-networkd sets it up, and CoreDNS forwards to it), and
// waits until systemd says it is up and containerd holds the image's
// preloaded images. fleet-agent runs, waiting for a configuration
// (StartAgent, or o.Files).
func (s *Site) NewHost(ctx context.Context, o HostOptions) (*Host, error) {
	if err := checkName(o.Name); err != nil {
		return nil, err
	}
	if !cgroupV1() {
		return nil, fmt.Errorf("host %s: hosts need cgroup v1; this machine mounts cgroup v2 at %s", o.Name, cgroupFS)
	}
	containerd, err := os.ReadFile(filepath.Join(o.Image, "etc/containerd/config.toml"))
	if err != nil {
		return nil, fmt.Errorf("host %s: the image's containerd configuration: %w", o.Name, err)
	}
	// This machine withholds CAP_SYS_RESOURCE, so runc cannot lower a
	// pod's oom_score_adj below containerd's: containerd must clamp it.
	const cri = "[plugins.\"io.containerd.grpc.v1.cri\"]\n"
	if !bytes.Contains(containerd, []byte(cri)) {
		return nil, fmt.Errorf("host %s: the image's containerd configuration has no %s section", o.Name, strings.TrimSpace(cri))
	}
	addr, n, err := s.nextAddr()
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(filepath.Join(o.Dir, o.Name))
	if err != nil {
		return nil, err
	}
	h := &Host{Name: o.Name, Addr: addr, PodCIDR: podCIDR(n), Dir: dir, netns: "fleet-" + o.Name, cgroup: "/fleet-" + o.Name,
		bootDone: make(chan struct{})}
	if err := record(Record{Kind: "host", Name: o.Name, NetNS: h.netns, Cgroup: h.cgroup, Dir: h.Dir}); err != nil {
		return nil, err
	}
	files := map[string]string{
		"etc/systemd/network/10-lan.network": fmt.Sprintf(
			"[Match]\nName=eth0\n\n[Network]\nAddress=%s/24\nGateway=%s\nDNS=%s\nIPv6AcceptRA=no\nLinkLocalAddressing=no\n", addr, s.Router, s.Router),
		// What the cluster's CNI plugin would install.
		"etc/cni/net.d/10-fleet.conflist": cniConfig(h.PodCIDR),
		"etc/containerd/config.toml":      strings.Replace(string(containerd), cri, cri+"  restrict_oom_score_adj = true\n", 1),
	}
	if !o.Unnamed {
		files["etc/hostname"] = o.Name + "\n"
	}
	for p, c := range o.Files {
		files[strings.TrimPrefix(p, "/")] = c
	}
	if err := h.make(s, o, files); err != nil {
		_ = h.Close()
		return nil, fmt.Errorf("booting host %s: %w", o.Name, err)
	}
	if err := h.waitRunning(ctx, false); err != nil {
		err = fmt.Errorf("host %s: %w\n%s", o.Name, err, h.Console())
		_ = h.Close()
		return nil, err
	}
	// Pod routes go through the LAN address the box's networkd set, and
	// are added once it has.
	h.site = s
	if err := h.waitAddr(ctx); err != nil {
		_ = h.Close()
		return nil, fmt.Errorf("host %s: %w", o.Name, err)
	}
	if err := s.join(h.pods()); err != nil {
		_ = h.Close()
		return nil, fmt.Errorf("host %s: %w", o.Name, err)
	}
	return h, nil
}

// make lays out the host's overlay of the image with its own files and
// leaves, and starts its boot.
func (h *Host) make(s *Site, o HostOptions, files map[string]string) error {
	_ = os.RemoveAll(h.Dir)
	for _, d := range []string{"upper", "work", "root", "sysctl", "containerd"} {
		if err := os.MkdirAll(filepath.Join(h.Dir, d), 0o755); err != nil {
			return err
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", o.Image, filepath.Join(h.Dir, "upper"), filepath.Join(h.Dir, "work"))
	if out, err := exec.Command("mount", "-t", "overlay", "overlay", "-o", opts, h.Root("")).CombinedOutput(); err != nil {
		return fmt.Errorf("mounting the image's overlay: %w: %s", err, strings.TrimSpace(string(out)))
	}
	for p, c := range files {
		mode := os.FileMode(0o644)
		if strings.HasPrefix(p, "etc/fleet-agent/") {
			mode = 0o600
		}
		if err := h.WriteFile(p, c, mode); err != nil {
			return err
		}
	}
	if err := h.leaveOut(o); err != nil {
		return err
	}
	binds := map[string]string{}
	if o.Agent != "" {
		binds["usr/bin/fleet-agent"] = o.Agent
	}
	for version, dir := range o.Staged {
		for _, name := range []string{"kubeadm", "kubelet", "images"} {
			binds[filepath.Join("opt/fleet/kubernetes", version, name)] = filepath.Join(dir, name)
		}
	}
	if err := makeCgroup(h.cgroup); err != nil {
		return err
	}
	if err := s.plug(h.Name, h.netns); err != nil {
		return err
	}
	h.binds = binds
	return h.startBoot(binds)
}

// leaveOut takes out of the host's overlay what o says it is without.
func (h *Host) leaveOut(o HostOptions) error {
	b, err := os.ReadFile(h.Root("usr/lib/fleet/kubernetes-version"))
	if err != nil {
		return fmt.Errorf("the image's Kubernetes version: %w", err)
	}
	own := filepath.Join("opt/fleet/kubernetes", strings.TrimSpace(string(b)))
	var masked, removed []string
	for _, part := range o.Without {
		switch part {
		case "containerd":
			masked = append(masked, "containerd.service", "fleet-preload-images.service")
		case "kubelet":
			// The staged copy too, or the agent would put it back.
			masked = append(masked, "kubelet.service")
			removed = append(removed, "usr/local/bin/kubelet", filepath.Join(own, "kubelet"))
		default:
			return fmt.Errorf("without %q: want containerd or kubelet", part)
		}
	}
	for _, a := range o.WithoutImages {
		removed = append(removed, filepath.Join(own, "images", a))
	}
	for _, p := range removed {
		if err := os.Remove(h.Root(p)); err != nil {
			return fmt.Errorf("leaving /%s out: %w", p, err)
		}
	}
	for _, u := range masked {
		link := h.Root(filepath.Join("etc/systemd/system", u))
		_ = os.Remove(link)
		if err := os.Symlink("/dev/null", link); err != nil {
			return fmt.Errorf("masking %s: %w", u, err)
		}
	}
	return nil
}

// makeCgroup makes cg in every hierarchy.
func makeCgroup(cg string) error {
	for _, hier := range hierarchies() {
		p := filepath.Join(hier, cg)
		if err := os.MkdirAll(p, 0o755); err != nil {
			return fmt.Errorf("making cgroup %s: %w", p, err)
		}
		if filepath.Base(hier) != "cpuset" {
			continue
		}
		// A cpuset takes no process until it has CPUs and memory nodes.
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			b, err := os.ReadFile(filepath.Join(filepath.Dir(p), f))
			if err == nil {
				err = os.WriteFile(filepath.Join(p, f), b, 0o644)
			}
			if err != nil {
				return fmt.Errorf("setting %s of %s: %w", f, p, err)
			}
		}
	}
	return nil
}

// startBoot starts the box's first process in the host's cgroup parent
// (so Close can kill whatever is left) and network namespace, with
// namespaces of its own; boot.sh mounts the box's API file systems and
// hands over to the image's systemd.
func (h *Host) startBoot(binds map[string]string) error {
	master, slave, err := openConsole()
	if err != nil {
		return err
	}
	h.console = master
	go copyConsole(master, filepath.Join(h.Dir, "console.log"), h.bootDone)
	script := filepath.Join(h.Dir, "boot.sh")
	if err := os.WriteFile(script, []byte(h.bootScript(slave, binds)), 0o755); err != nil {
		return err
	}
	for k, v := range sysctls {
		if err := os.WriteFile(filepath.Join(h.Dir, "sysctl", strings.ReplaceAll(k, "/", ".")), []byte(v+"\n"), 0o444); err != nil {
			return err
		}
	}
	logf, err := os.OpenFile(filepath.Join(h.Dir, "boot.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	outer := fmt.Sprintf(`for hier in %s/*/; do [ -d "${hier}%s" ] && echo $$ > "${hier}%s/cgroup.procs"; done
exec nsenter --net=/run/netns/%s -- unshare --mount --uts --ipc --pid --cgroup --fork --propagation private -- /bin/sh %s`,
		cgroupFS, h.cgroup[1:], h.cgroup[1:], h.netns, script)
	h.boot = exec.Command("/bin/sh", "-c", outer)
	h.boot.Stdout, h.boot.Stderr = logf, logf
	if err := h.boot.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("starting the box: %w", err)
	}
	go func() {
		_ = h.boot.Wait()
		logf.Close()
		close(h.bootDone)
	}()
	return nil
}

// waitRunning waits for the box's systemd, then for `systemctl
// is-system-running` to say running; degraded (a unit failed) is an error
// unless degradedOK: a box booted again after a power cut may well have a
// unit fail, as its agent stops the kubelet to reset the host.
func (h *Host) waitRunning(ctx context.Context, degradedOK bool) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	state := ""
	for {
		select {
		case <-h.bootDone:
			boot, _ := os.ReadFile(filepath.Join(h.Dir, "boot.log"))
			return fmt.Errorf("the box's first process exited: %s", tail(string(boot), 2000))
		case <-ctx.Done():
			return fmt.Errorf("not running after 3 minutes (is-system-running: %q; failed units: %s)", state, h.failedUnits())
		case <-time.After(500 * time.Millisecond):
		}
		if h.init == 0 {
			h.init = childOf(h.boot.Process.Pid)
			continue
		}
		out, _ := h.Command(ctx, "systemctl", "is-system-running").Output()
		state = strings.TrimSpace(string(out))
		switch state {
		case "running":
			return nil
		case "degraded":
			if degradedOK {
				return nil
			}
			warnings, _ := h.Command(ctx, "journalctl", "-b", "-p", "warning", "--no-pager", "-n", "30").CombinedOutput()
			return fmt.Errorf("degraded: failed units: %s\nwarnings:\n%s", h.failedUnits(), warnings)
		}
	}
}

// waitAddr waits for the box's eth0 to hold its LAN address.
func (h *Host) waitAddr(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		out, _ := exec.CommandContext(ctx, "ip", "-n", h.netns, "-o", "-4", "addr", "show", "dev", "eth0").Output()
		if strings.Contains(string(out), " "+h.Addr+"/") {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("eth0 has no %s a minute after boot: %s", h.Addr, strings.TrimSpace(string(out)))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (h *Host) failedUnits() string {
	out, _ := h.Command(context.Background(), "systemctl", "--failed", "--no-legend", "--plain").Output()
	return strings.TrimSpace(string(out))
}

// childOf is the first child of pid (the box's PID 1 under unshare), 0
// if none.
func childOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(f[0])
	return n
}

func (h *Host) pods() podRange { return podRange{netns: h.netns, addr: h.Addr, cidr: h.PodCIDR} }

// Root maps a path inside the host to where the machine sees it: through
// the box's own root while it runs (its /run, its containerd's data), the
// overlay before.
func (h *Host) Root(p string) string {
	if h.init != 0 {
		return filepath.Join("/proc", strconv.Itoa(h.init), "root", p)
	}
	return filepath.Join(h.Dir, "root", p)
}

// PID is the box's first process (its systemd) as the machine numbers
// it, for nsenter -t; 0 before it boots.
func (h *Host) PID() int { return h.init }

// PowerCut kills everything on the box at once, as pulling its plug does:
// its init is SIGKILLed, which takes every process of its PID namespace
// with it (containers too), then whatever else is left in its cgroup. Its
// disk (the overlay's upper directory, containerd's directory) keeps what
// was written; its mounts, /run and /tmp go. PowerOn boots it again.
func (h *Host) PowerCut() error {
	if h.boot == nil || h.boot.Process == nil {
		return fmt.Errorf("host %s: not booted", h.Name)
	}
	select {
	case <-h.bootDone:
		return fmt.Errorf("host %s: already off", h.Name)
	default:
	}
	if h.init == 0 {
		h.init = childOf(h.boot.Process.Pid)
	}
	if h.init != 0 {
		_ = syscall.Kill(h.init, syscall.SIGKILL)
	}
	_ = h.boot.Process.Kill()
	select {
	case <-h.bootDone:
	case <-time.After(30 * time.Second):
		return fmt.Errorf("host %s: its first process outlived SIGKILL by 30 s", h.Name)
	}
	h.init = 0
	if h.console != nil {
		h.console.Close()
		h.console = nil
	}
	// A machine boots with fresh cgroups: the ones its systemd and kubelet
	// made go with their processes.
	if err := removeCgroup(h.cgroup); err != nil {
		return fmt.Errorf("host %s: %w", h.Name, err)
	}
	return nil
}

// PowerOn boots a box whose power was cut from what its disk holds, and
// waits until its systemd has finished booting (running or degraded) and
// its LAN address is set.
func (h *Host) PowerOn(ctx context.Context) error {
	select {
	case <-h.bootDone:
	default:
		return fmt.Errorf("host %s: already on", h.Name)
	}
	h.bootDone = make(chan struct{})
	if err := makeCgroup(h.cgroup); err != nil {
		return fmt.Errorf("host %s: %w", h.Name, err)
	}
	if err := h.startBoot(h.binds); err != nil {
		return fmt.Errorf("host %s: %w", h.Name, err)
	}
	if err := h.waitRunning(ctx, true); err != nil {
		return fmt.Errorf("host %s: booting again: %w\n%s", h.Name, err, h.Console())
	}
	if err := h.waitAddr(ctx); err != nil {
		return fmt.Errorf("host %s: booting again: %w", h.Name, err)
	}
	return nil
}

// WriteFile writes a file inside the host, its directories made as
// needed.
func (h *Host) WriteFile(p, contents string, mode os.FileMode) error {
	full := h.Root(p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		return err
	}
	return os.WriteFile(full, []byte(contents), mode)
}

// Command runs a command inside the host, in all of its namespaces, as an
// operator logged in on the box would.
func (h *Host) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "nsenter", append([]string{"-t", strconv.Itoa(h.init), "-a", "--", name}, args...)...)
}

// Inside runs fn on a thread in the host's network namespace; sockets fn
// makes stay there.
func (h *Host) Inside(fn func() error) error { return insideNetNS("/run/netns/"+h.netns, fn) }

// Console is what the host printed on its console (systemd's boot).
func (h *Host) Console() string {
	b, _ := os.ReadFile(filepath.Join(h.Dir, "console.log"))
	return tail(string(b), 4000)
}

// Logs is the tail of the host's console and of its main units' journals,
// for a failed test.
func (h *Host) Logs() string {
	var b strings.Builder
	fmt.Fprintf(&b, "--- host %s: console ---\n%s", h.Name, h.Console())
	if h.init == 0 {
		return b.String()
	}
	for _, u := range []string{"fleet-agent.service", "kubelet.service", "containerd.service"} {
		fmt.Fprintf(&b, "--- host %s: %s ---\n%s", h.Name, u, tail(h.Journal(u), 3000))
	}
	return b.String()
}

// sigPowerOff is SIGRTMIN+4 as the C library numbers it, which systemd
// as a container's init takes for poweroff.
const sigPowerOff = syscall.Signal(38)

// Close powers the box off, kills whatever is left in its cgroup, and
// removes its namespace and state.
func (h *Host) Close() error {
	if h.site != nil {
		h.site.leave(h.pods())
	}
	if h.boot != nil && h.boot.Process != nil {
		select {
		case <-h.bootDone:
		default:
			if h.init == 0 {
				h.init = childOf(h.boot.Process.Pid)
			}
			if h.init != 0 {
				_ = syscall.Kill(h.init, sigPowerOff)
			}
			select {
			case <-h.bootDone:
			case <-time.After(30 * time.Second):
			}
		}
	}
	h.init = 0
	err := Record{Kind: "host", Name: h.Name, NetNS: h.netns, Cgroup: h.cgroup, Dir: h.Dir}.remove()
	if h.console != nil {
		h.console.Close()
	}
	return err
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func fnv64(s string) uint64 {
	f := fnv.New64a()
	_, _ = f.Write([]byte(s))
	return f.Sum64()
}

// shortHash names a host's link on the site side (15 characters at most).
func shortHash(s string) string { return fmt.Sprintf("%08x", uint32(fnv64(s))) }
