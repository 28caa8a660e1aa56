package testhost

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ImageHostOptions says how to boot a box from the edge image.
type ImageHostOptions struct {
	// Name names the host, its network namespace and its cgroup parent.
	Name string
	// RootFS is the edge image's root file system, unpacked (make
	// edge-image's archive). Hosts share it read-only: each boots an
	// overlay of its own, as each box has its own copy of the image.
	RootFS string
	// Dir is where the host's state goes (Dir/Name).
	Dir string
	// Files are put into the host's root before it boots (path inside the
	// host → contents; mode 0600 under /etc/fleet-agent, else 0644), as a
	// user edits an image before flashing it.
	Files map[string]string
}

// ImageHost is a box booted from the edge image with systemd as PID 1 on
// a site's LAN: the image's own /usr, units and hardening, real D-Bus,
// real journald. The kit boots it the way kind boots a node container,
// with namespaces of its own (mount, PID, UTS, IPC, cgroup, the site's
// network) and the box's cgroup parent mounted writable as its cgroup
// root, so the box's systemd and kubelet make cgroups as on a machine.
type ImageHost struct {
	Name string
	// Addr is the host's address on the site's LAN.
	Addr string
	// PodCIDR is the range its CNI gives pods; the site's other hosts
	// route it through Addr.
	PodCIDR string
	// Dir holds root/ (the host's file system, the overlay's merged view),
	// its upper and work directories and console.log.
	Dir string

	netns, cgroup string
	site          *Site
	boot          *exec.Cmd
	bootDone      chan struct{}
	console       *os.File
	init          int
}

// BootImage boots a box from the edge image on the site's LAN, with a
// .network file giving it its LAN address, and the router as its gateway
// and DNS server (what a site's own image configuration would say; the
// box's systemd-networkd sets it up, and CoreDNS forwards to it), and
// waits until systemd says it is up.
func (s *Site) BootImage(ctx context.Context, o ImageHostOptions) (*ImageHost, error) {
	if err := checkName(o.Name); err != nil {
		return nil, err
	}
	if !cgroupV1() {
		return nil, fmt.Errorf("image host %s: hosts need cgroup v1; this machine mounts cgroup v2 at %s", o.Name, cgroupFS)
	}
	containerd, err := os.ReadFile(filepath.Join(o.RootFS, "etc/containerd/config.toml"))
	if err != nil {
		return nil, fmt.Errorf("image host %s: the image's containerd configuration: %w", o.Name, err)
	}
	// This machine withholds CAP_SYS_RESOURCE, so runc cannot lower a
	// pod's oom_score_adj below containerd's: containerd must clamp it.
	const cri = "[plugins.\"io.containerd.grpc.v1.cri\"]\n"
	if !bytes.Contains(containerd, []byte(cri)) {
		return nil, fmt.Errorf("image host %s: the image's containerd configuration has no %s section", o.Name, strings.TrimSpace(cri))
	}
	addr, n, err := s.nextAddr()
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(filepath.Join(o.Dir, o.Name))
	if err != nil {
		return nil, err
	}
	h := &ImageHost{Name: o.Name, Addr: addr, PodCIDR: podCIDR(n), Dir: dir, netns: "fleet-" + o.Name, cgroup: "/fleet-" + o.Name,
		bootDone: make(chan struct{})}
	if err := record(Record{Kind: "host", Name: o.Name, NetNS: h.netns, Cgroup: h.cgroup, Dir: h.Dir}); err != nil {
		return nil, err
	}
	files := map[string]string{
		"etc/systemd/network/10-lan.network": fmt.Sprintf(
			"[Match]\nName=eth0\n\n[Network]\nAddress=%s/24\nGateway=%s\nDNS=%s\nIPv6AcceptRA=no\nLinkLocalAddressing=no\n", addr, s.Router, s.Router),
		// What the cluster's CNI plugin would install, as on the kit's hosts.
		"etc/cni/net.d/10-fleet.conflist": cniConfig(h.PodCIDR),
		"etc/containerd/config.toml":      strings.Replace(string(containerd), cri, cri+"  restrict_oom_score_adj = true\n", 1),
	}
	for p, c := range o.Files {
		files[strings.TrimPrefix(p, "/")] = c
	}
	if err := h.make(s, o.RootFS, files); err != nil {
		_ = h.Close()
		return nil, fmt.Errorf("booting image host %s: %w", o.Name, err)
	}
	if err := h.waitRunning(ctx); err != nil {
		err = fmt.Errorf("image host %s: %w\n%s", o.Name, err, h.Console())
		_ = h.Close()
		return nil, err
	}
	// Pod routes go through the LAN address the box's networkd set, and
	// are added once it has.
	h.site = s
	if err := h.waitAddr(ctx); err != nil {
		_ = h.Close()
		return nil, fmt.Errorf("image host %s: %w", o.Name, err)
	}
	if err := s.join(h.pods()); err != nil {
		_ = h.Close()
		return nil, fmt.Errorf("image host %s: %w", o.Name, err)
	}
	return h, nil
}

func (h *ImageHost) make(s *Site, rootfs string, files map[string]string) error {
	_ = os.RemoveAll(h.Dir)
	for _, d := range []string{"upper", "work", "root", "sysctl", "containerd"} {
		if err := os.MkdirAll(filepath.Join(h.Dir, d), 0o755); err != nil {
			return err
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", rootfs, filepath.Join(h.Dir, "upper"), filepath.Join(h.Dir, "work"))
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
	if err := makeCgroup(h.cgroup); err != nil {
		return err
	}
	if err := s.plug(h.Name, h.netns); err != nil {
		return err
	}
	return h.startBoot()
}

// startBoot starts the box's first process in the host's cgroup parent
// (so Close can kill whatever is left) and network namespace, with
// namespaces of its own; boot.sh mounts the box's API file systems and
// hands over to the image's systemd.
func (h *ImageHost) startBoot() error {
	master, slave, err := openConsole()
	if err != nil {
		return err
	}
	h.console = master
	go h.copyConsole()
	script := filepath.Join(h.Dir, "boot.sh")
	if err := os.WriteFile(script, []byte(h.bootScript(slave)), 0o755); err != nil {
		return err
	}
	for k, v := range sysctls {
		if err := os.WriteFile(filepath.Join(h.Dir, "sysctl", strings.ReplaceAll(k, "/", ".")), []byte(v+"\n"), 0o444); err != nil {
			return err
		}
	}
	logf, err := os.Create(filepath.Join(h.Dir, "boot.log"))
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

// bootScript runs as the box's PID 1 until it execs systemd. It mounts
// what a container manager gives a booted OS: /proc with /proc/sys
// read-only but for the network namespace's own settings; /sys read-only
// (so the box's udev stays out of the machine's devices) with every cgroup
// v1 hierarchy mounted writable at the box's cgroup namespace root; a /dev
// of its own with the console on a pseudo-terminal, and /dev/kmsg, which
// the kubelet's OOM watcher reads.
func (h *ImageHost) bootScript(console string) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	w("set -eu\nexport PATH=/usr/sbin:/usr/bin:/sbin:/bin\nR=%s", h.Root(""))
	w("mount -t proc -o nosuid,nodev,noexec proc $R/proc")
	w("mount --bind $R/proc/sys $R/proc/sys && mount --bind $R/proc/sys/net $R/proc/sys/net")
	w("mount -o remount,bind,ro,nosuid,nodev,noexec $R/proc/sys")
	w("mount --bind $R/proc/sysrq-trigger $R/proc/sysrq-trigger && mount -o remount,bind,ro $R/proc/sysrq-trigger")
	// The kubelet insists on these machine-wide values: it finds them set.
	for _, k := range sortedKeys(sysctls) {
		w("mount --bind %s $R/proc/sys/%s", filepath.Join(h.Dir, "sysctl", strings.ReplaceAll(k, "/", ".")), k)
	}
	w("mount -t sysfs -o nosuid,nodev,noexec sysfs $R/sys")
	w("mount -t tmpfs -o nosuid,nodev,noexec,mode=755 tmpfs $R/sys/fs/cgroup")
	for _, m := range cgroupMounts() {
		if m.link != "" {
			w("ln -s %s $R/sys/fs/cgroup/%s", m.link, m.name)
			continue
		}
		w("mkdir $R/sys/fs/cgroup/%s && mount -t cgroup -o nosuid,nodev,noexec,%s cgroup $R/sys/fs/cgroup/%s", m.name, m.options, m.name)
	}
	w("mount -o remount,bind,ro,nosuid,nodev,noexec $R/sys")
	w("mount -t tmpfs -o nosuid,mode=755 tmpfs $R/dev")
	w("for d in null zero full random urandom tty kmsg; do touch $R/dev/$d && mount --bind /dev/$d $R/dev/$d; done")
	w("touch $R/dev/console && mount --bind %s $R/dev/console", console)
	w("mkdir $R/dev/pts $R/dev/shm && mount -t devpts -o newinstance,ptmxmode=0666,mode=620,gid=5 devpts $R/dev/pts")
	w("mount -t tmpfs -o nosuid,nodev,mode=1777 tmpfs $R/dev/shm")
	w("ln -s pts/ptmx $R/dev/ptmx && ln -s /proc/self/fd $R/dev/fd")
	w("ln -s /proc/self/fd/0 $R/dev/stdin && ln -s /proc/self/fd/1 $R/dev/stdout && ln -s /proc/self/fd/2 $R/dev/stderr")
	// containerd's snapshots are overlays, which cannot stack on the box's
	// overlay root: they get a directory of the machine's, as a data
	// partition would be.
	w("mkdir -p $R/var/lib/containerd && mount --bind %s $R/var/lib/containerd", filepath.Join(h.Dir, "containerd"))
	w("hostname %s", h.Name)
	// pivot_root . . stacks the old root under the new one; detaching it
	// leaves the box nothing of the machine's file system.
	w("cd $R && pivot_root . . && umount -l . && cd /")
	w("exec env -i container=fleet-testhost /sbin/init </dev/console >/dev/console 2>&1")
	return b.String()
}

// A cgroupMount is one of the machine's cgroup v1 hierarchies (or a
// symlink to one, like cpu -> cpu,cpuacct), as the box mounts it.
type cgroupMount struct{ name, options, link string }

// cgroupMounts reads the machine's cgroup v1 mounts under /sys/fs/cgroup.
func cgroupMounts() []cgroupMount {
	var out []cgroupMount
	entries, _ := os.ReadDir(cgroupFS)
	for _, e := range entries {
		p := filepath.Join(cgroupFS, e.Name())
		if link, err := os.Readlink(p); err == nil {
			out = append(out, cgroupMount{name: e.Name(), link: link})
			continue
		}
		var st unix.Statfs_t
		if unix.Statfs(p, &st) != nil || st.Type != unix.CGROUP_SUPER_MAGIC {
			continue
		}
		opts := e.Name()
		if opts == "systemd" || strings.HasPrefix(opts, "name=") {
			opts = "none,name=" + strings.TrimPrefix(opts, "name=")
		}
		out = append(out, cgroupMount{name: e.Name(), options: opts})
	}
	return out
}

// openConsole makes the pseudo-terminal that is the box's /dev/console.
func openConsole() (*os.File, string, error) {
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, "", fmt.Errorf("opening a pseudo-terminal for the console: %w", err)
	}
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		unix.Close(fd)
		return nil, "", fmt.Errorf("unlocking the console's pseudo-terminal: %w", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		unix.Close(fd)
		return nil, "", fmt.Errorf("naming the console's pseudo-terminal: %w", err)
	}
	return os.NewFile(uintptr(fd), "console"), fmt.Sprintf("/dev/pts/%d", n), nil
}

// copyConsole writes what the box prints on its console to console.log.
// A getty hanging up the terminal makes reads fail until it reopens it,
// so errors other than the master being closed are waited out.
func (h *ImageHost) copyConsole() {
	logf, err := os.Create(filepath.Join(h.Dir, "console.log"))
	if err != nil {
		return
	}
	defer logf.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := h.console.Read(buf)
		if n > 0 {
			_, _ = logf.Write(bytes.ReplaceAll(buf[:n], []byte("\r"), nil))
		}
		if errors.Is(err, os.ErrClosed) {
			return
		}
		if err != nil {
			select {
			case <-h.bootDone:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

// waitRunning waits for the container's systemd, then for
// `systemctl is-system-running` to say running.
func (h *ImageHost) waitRunning(ctx context.Context) error {
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
			warnings, _ := h.Command(ctx, "journalctl", "-b", "-p", "warning", "--no-pager", "-n", "30").CombinedOutput()
			return fmt.Errorf("degraded: failed units: %s\nwarnings:\n%s", h.failedUnits(), warnings)
		}
	}
}

// waitAddr waits for the box's eth0 to hold its LAN address.
func (h *ImageHost) waitAddr(ctx context.Context) error {
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

func (h *ImageHost) failedUnits() string {
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

func (h *ImageHost) pods() podRange { return podRange{netns: h.netns, addr: h.Addr, cidr: h.PodCIDR} }

// Root maps a path inside the host to where it is on the machine.
func (h *ImageHost) Root(p string) string { return filepath.Join(h.Dir, "root", p) }

// WriteFile writes a file inside the host, its directories made as
// needed.
func (h *ImageHost) WriteFile(p, contents string, mode os.FileMode) error {
	full := h.Root(p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		return err
	}
	return os.WriteFile(full, []byte(contents), mode)
}

// Command runs a command inside the host, in all of its namespaces, as an
// operator logged in on the box would.
func (h *ImageHost) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "nsenter", append([]string{"-t", strconv.Itoa(h.init), "-a", "--", name}, args...)...)
}

// Show returns properties of a unit, as systemctl show reports them.
func (h *ImageHost) Show(ctx context.Context, unit string, props ...string) (map[string]string, error) {
	args := []string{"show", unit}
	for _, p := range props {
		args = append(args, "-p", p)
	}
	out, err := h.Command(ctx, "systemctl", args...).Output()
	if err != nil {
		return nil, fmt.Errorf("systemctl show %s on %s: %w", unit, h.Name, err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			m[k] = v
		}
	}
	return m, nil
}

// Journal is what a unit logged this boot.
func (h *ImageHost) Journal(unit string) string {
	out, _ := h.Command(context.Background(), "journalctl", "--no-pager", "-o", "short", "-u", unit).CombinedOutput()
	return string(out)
}

// Console is what the host printed on its console (systemd's boot).
func (h *ImageHost) Console() string {
	b, _ := os.ReadFile(filepath.Join(h.Dir, "console.log"))
	return tail(string(b), 4000)
}

// sigPowerOff is SIGRTMIN+4 as the C library numbers it, which systemd
// as a container's init takes for poweroff.
const sigPowerOff = syscall.Signal(38)

// Close powers the box off, kills whatever is left in its cgroup, and
// removes its namespace and state.
func (h *ImageHost) Close() error {
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
	err := Record{Kind: "host", Name: h.Name, NetNS: h.netns, Cgroup: h.cgroup, Dir: h.Dir}.remove()
	if h.console != nil {
		h.console.Close()
	}
	return err
}
