package testhost

import (
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

// ImageHost is a box booted from the edge image with systemd as PID 1
// (systemd-nspawn --boot) on a site's LAN: the image's own /usr, units and
// hardening, real D-Bus, real journald.
//
// nspawn mounts the cgroup v1 controllers read-only inside, so the kubelet
// cannot run on an ImageHost (docs/REAL-NODES.md): Hosts run the nodes.
type ImageHost struct {
	Name string
	// Addr is the host's address on the site's LAN.
	Addr string
	// Dir holds root/ (the host's file system, the overlay's merged view),
	// its upper and work directories and console.log.
	Dir string

	netns, cgroup string
	boot          *exec.Cmd
	bootDone      chan struct{}
	init          int
}

// BootImage boots a box from the edge image on the site's LAN, with a
// .network file giving it its LAN address (what a site's own image
// configuration would say; the box's systemd-networkd sets it up), and
// waits until systemd says it is up.
func (s *Site) BootImage(ctx context.Context, o ImageHostOptions) (*ImageHost, error) {
	if err := checkName(o.Name); err != nil {
		return nil, err
	}
	if _, err := exec.LookPath("systemd-nspawn"); err != nil {
		return nil, errors.New("booting the edge image needs systemd-nspawn (Debian package systemd-container)")
	}
	addr, _, err := s.nextAddr()
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(filepath.Join(o.Dir, o.Name))
	if err != nil {
		return nil, err
	}
	h := &ImageHost{Name: o.Name, Addr: addr, Dir: dir, netns: "fleet-" + o.Name, cgroup: "/fleet-" + o.Name,
		bootDone: make(chan struct{})}
	if err := record(Record{Kind: "host", Name: o.Name, NetNS: h.netns, Cgroup: h.cgroup, Dir: h.Dir}); err != nil {
		return nil, err
	}
	files := map[string]string{"etc/systemd/network/10-lan.network": fmt.Sprintf(
		"[Match]\nName=eth0\n\n[Network]\nAddress=%s/24\nGateway=%s\nIPv6AcceptRA=no\nLinkLocalAddressing=no\n", addr, s.Router)}
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
	return h, nil
}

func (h *ImageHost) make(s *Site, rootfs string, files map[string]string) error {
	_ = os.RemoveAll(h.Dir)
	for _, d := range []string{"upper", "work", "root"} {
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

// startBoot runs systemd-nspawn in the host's cgroup parent (so Close can
// kill whatever is left) and its network namespace. --register=no and
// --keep-unit: this machine's own systemd is not running.
func (h *ImageHost) startBoot() error {
	console, err := os.Create(filepath.Join(h.Dir, "console.log"))
	if err != nil {
		return err
	}
	script := fmt.Sprintf(`for hier in %s/*/; do [ -d "${hier}%s" ] && echo $$ > "${hier}%s/cgroup.procs"; done
exec systemd-nspawn --quiet --boot --directory=%s --machine=%s --network-namespace-path=/run/netns/%s \
  --register=no --keep-unit --capability=all`, cgroupFS, h.cgroup[1:], h.cgroup[1:], h.Root(""), h.Name, h.netns)
	h.boot = exec.Command("/bin/sh", "-c", script)
	h.boot.Stdout, h.boot.Stderr = console, console
	if err := h.boot.Start(); err != nil {
		console.Close()
		return fmt.Errorf("starting systemd-nspawn: %w", err)
	}
	go func() {
		_ = h.boot.Wait()
		console.Close()
		close(h.bootDone)
	}()
	return nil
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
			return errors.New("systemd-nspawn exited")
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

func (h *ImageHost) failedUnits() string {
	out, _ := h.Command(context.Background(), "systemctl", "--failed", "--no-legend", "--plain").Output()
	return strings.TrimSpace(string(out))
}

// childOf is the first child of pid (nspawn's container init), 0 if none.
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

// Close shuts the box down (nspawn turns SIGTERM into a clean poweroff),
// kills whatever is left in its cgroup, and removes its namespace and
// state.
func (h *ImageHost) Close() error {
	if h.boot != nil && h.boot.Process != nil {
		select {
		case <-h.bootDone:
		default:
			_ = h.boot.Process.Signal(syscall.SIGTERM)
			select {
			case <-h.bootDone:
			case <-time.After(30 * time.Second):
			}
		}
	}
	return Record{Kind: "host", Name: h.Name, NetNS: h.netns, Cgroup: h.cgroup, Dir: h.Dir}.remove()
}
