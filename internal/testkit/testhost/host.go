package testhost

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// Binaries are what a host's image carries besides the machine's own
// /usr (containerd, runc, the CNI plugins, dbus-daemon).
type Binaries struct {
	// K8s holds kubelet and kubeadm (bin/k8s).
	K8s string
	// Images holds image archives every host imports at boot, as a real
	// edge image would have them preloaded (bin/k8s/images).
	Images string
	// Agent is the fleet-agent binary; Unitd the service manager
	// (test/unitd).
	Agent, Unitd string
}

// HostOptions says which host to make.
type HostOptions struct {
	// Name is the host's hostname, unique on the machine: it also names
	// its namespace and its cgroup parent /fleet-<Name>.
	Name string
	// Dir is where the host's state lives on the machine (Dir/<Name>).
	Dir string
	// Bin is what its image carries.
	Bin Binaries
	// Without leaves parts out of the host's image: "containerd" (no
	// containerd unit) or "kubelet" (no kubelet binary or unit).
	Without []string
	// WithoutImages are archives of Bin.Images the host does not import
	// (e.g. "etcd.tar").
	WithoutImages []string
	// Staged are Kubernetes versions the host's image carries for an
	// in-place upgrade, each a directory like bin/k8s (kubeadm, kubelet,
	// images/) by its version ("v1.36.3"): they appear under
	// /opt/fleet/kubernetes/<version>, where fleet-agent looks.
	Staged map[string]string
}

// Host is a running edge host.
type Host struct {
	// Name is its hostname (and Node name).
	Name string
	// Addr is the host's address on the site's LAN.
	Addr string
	// PodCIDR is the range its CNI gives pods; the site's other hosts
	// route it through Addr.
	PodCIDR string
	// Dir is the host's state on the machine; Root(p) maps a path inside
	// the host to it for the directories the host has of its own.
	Dir string

	netns, cgroup string
	site          *Site
	boot          *exec.Cmd
	bootDone      chan struct{}
	bootErr       error
}

// bound are the host's own directories, bind-mounted over the machine's;
// everything else (/usr, /lib, /sys, /tmp) is the machine's.
var bound = []string{
	"etc/kubernetes", "etc/cni/net.d", "etc/containerd", "etc/systemd/system", "etc/fleet-agent",
	"var/lib/kubelet", "var/lib/etcd", "var/lib/containerd", "var/lib/cni", "var/lib/fleet-agent",
	"var/log", "run", "usr/local/bin", "opt/fleet",
}

// ownFiles are files of the host's own, bind-mounted over the machine's.
var ownFiles = []string{"etc/hosts", "etc/hostname", "etc/machine-id"}

// sysctls are the values the kubelet insists on; each is bind-mounted over
// its /proc/sys file inside the host so the kubelet finds it set and never
// writes the machine-wide value.
var sysctls = map[string]string{
	"kernel/panic":         "10",
	"kernel/panic_on_oops": "1",
	"vm/overcommit_memory": "1",
}

// NewHost makes a host on the site's LAN and boots it: its service
// manager starts containerd and the kubelet's unit (which waits, like on a
// fresh machine, for kubeadm to configure it), and the images are
// imported. fleet-agent is installed but not started: StartAgent does.
func (s *Site) NewHost(ctx context.Context, o HostOptions) (*Host, error) {
	if err := checkName(o.Name); err != nil {
		return nil, err
	}
	if !cgroupV1() {
		return nil, fmt.Errorf("host %s: hosts need cgroup v1; this machine mounts cgroup v2 at %s", o.Name, cgroupFS)
	}
	addr, n, err := s.nextAddr()
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(filepath.Join(o.Dir, o.Name))
	if err != nil {
		return nil, fmt.Errorf("host %s: %w", o.Name, err)
	}
	h := &Host{Name: o.Name, Addr: addr, PodCIDR: podCIDR(n),
		Dir: dir, netns: "fleet-" + o.Name, cgroup: "/fleet-" + o.Name, bootDone: make(chan struct{})}
	if err := record(Record{Kind: "host", Name: o.Name, NetNS: h.netns, Cgroup: h.cgroup, Dir: h.Dir}); err != nil {
		return nil, err
	}
	if err := h.make(s, o); err != nil {
		_ = h.Close()
		return nil, fmt.Errorf("making host %s: %w", o.Name, err)
	}
	h.site = s
	if err := s.join(h.pods()); err != nil {
		_ = h.Close()
		return nil, fmt.Errorf("host %s: %w", o.Name, err)
	}
	if err := h.waitReady(ctx, !slices.Contains(o.Without, "containerd")); err != nil {
		err = fmt.Errorf("host %s: %w\n%s", o.Name, err, h.Logs())
		_ = h.Close()
		return nil, err
	}
	if o.Bin.Images != "" && !slices.Contains(o.Without, "containerd") {
		archives, _ := filepath.Glob(filepath.Join(o.Bin.Images, "*.tar"))
		archives = slices.DeleteFunc(archives, func(a string) bool { return slices.Contains(o.WithoutImages, filepath.Base(a)) })
		if err := h.ImportImages(ctx, archives...); err != nil {
			_ = h.Close()
			return nil, err
		}
	}
	return h, nil
}

func (h *Host) make(s *Site, o HostOptions) error {
	_ = os.RemoveAll(h.Dir)
	if err := h.writeImage(o); err != nil {
		return err
	}
	if err := h.makeCgroup(); err != nil {
		return err
	}
	if err := h.plug(s); err != nil {
		return err
	}
	return h.startBoot(o)
}

// plug makes the host's network namespace and links it to the site's LAN,
// with the site's router as its default gateway.
func (h *Host) plug(s *Site) error {
	if err := s.plug(h.Name, h.netns); err != nil {
		return err
	}
	return ipAll(
		[]string{"-n", h.netns, "addr", "add", h.Addr + "/24", "dev", "eth0"},
		[]string{"-n", h.netns, "link", "set", "eth0", "up"},
		[]string{"-n", h.netns, "route", "add", "default", "via", s.Router},
		// A node forwards its pods' traffic; this is the host's own
		// namespace, the machine's setting is untouched.
		[]string{"netns", "exec", h.netns, "sysctl", "-qw", "net.ipv4.ip_forward=1"},
	)
}

// plug makes a host's network namespace with an eth0 on the site's LAN,
// left for the host to configure.
func (s *Site) plug(name, netns string) error {
	_ = exec.Command("ip", "netns", "del", netns).Run()
	outer := "v" + shortHash(name)
	return ipAll(
		[]string{"netns", "add", netns},
		[]string{"-n", netns, "link", "set", "lo", "up"},
		[]string{"link", "add", outer, "type", "veth", "peer", "name", "eth0", "netns", netns},
		[]string{"link", "set", outer, "netns", s.Name},
		[]string{"-n", s.Name, "link", "set", outer, "master", "lan0", "up"},
	)
}

// makeCgroup makes the host's cgroup parent in every hierarchy, with a
// "system" child for its services (the kubelet puts pods beside it).
func (h *Host) makeCgroup() error { return makeCgroup(h.cgroup) }

// makeCgroup makes cg and its "system" child in every hierarchy.
func makeCgroup(cg string) error {
	for _, hier := range hierarchies() {
		for _, dir := range []string{cg, cg + "/system"} {
			p := filepath.Join(hier, dir)
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
	}
	return nil
}

// startBoot enters the host's network namespace, makes its mount and UTS
// namespaces, mounts its own directories and hands over to the service
// manager, which stays its first process.
func (h *Host) startBoot(o HostOptions) error {
	script := filepath.Join(h.Dir, "boot.sh")
	if err := os.WriteFile(script, []byte(h.bootScript()), 0o755); err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(h.Dir, "boot.log"))
	if err != nil {
		return err
	}
	h.boot = exec.Command("nsenter", "--net=/run/netns/"+h.netns, "--",
		"unshare", "--mount", "--uts", "--propagation", "slave", "--", "/bin/sh", script)
	h.boot.Stdout, h.boot.Stderr = logf, logf
	if err := h.boot.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("starting the host: %w", err)
	}
	go func() {
		h.bootErr = h.boot.Wait()
		logf.Close()
		close(h.bootDone)
	}()
	return nil
}

func (h *Host) bootScript() string {
	var b strings.Builder
	root := filepath.Join(h.Dir, "root")
	fmt.Fprintf(&b, "set -eu\nexport PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n# Services live in the host's own cgroup, like systemd's system.slice.\n")
	fmt.Fprintf(&b, "for hier in %s/*/; do [ -d \"${hier}%s/system\" ] && echo $$ > \"${hier}%s/system/cgroup.procs\"; done\n", cgroupFS, h.cgroup[1:], h.cgroup[1:])
	for _, d := range bound {
		fmt.Fprintf(&b, "mkdir -p /%s && mount --bind %s/%s /%s\n", d, root, d, d)
	}
	for _, f := range ownFiles {
		fmt.Fprintf(&b, "mount --bind %s/%s /%s\n", root, f, f)
	}
	for _, k := range sortedKeys(sysctls) {
		fmt.Fprintf(&b, "mount --bind %s/sysctl/%s /proc/sys/%s\n", h.Dir, strings.ReplaceAll(k, "/", "."), k)
	}
	fmt.Fprintf(&b, "hostname %s\nmkdir -p /run/dbus /var/log/unitd\n", h.Name)
	fmt.Fprintf(&b, "dbus-daemon --config-file=%s/dbus.conf --fork\n", h.Dir)
	fmt.Fprintf(&b, "exec /usr/local/bin/unitd --bus unix:path=/run/dbus/system_bus_socket --log-dir /var/log/unitd --unit-path /etc/systemd/system --start containerd.service,kubelet.service\n")
	return b.String()
}

func (h *Host) pods() podRange { return podRange{netns: h.netns, addr: h.Addr, cidr: h.PodCIDR} }

// Root maps a path inside the host to where it is on the machine, for
// paths under the host's own directories.
func (h *Host) Root(p string) string { return filepath.Join(h.Dir, "root", p) }

// waitReady waits for the host's service manager to answer on its bus
// and, when the host has one, for its containerd.
func (h *Host) waitReady(ctx context.Context, containerd bool) error {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	probe := func() error {
		conn, err := h.systemd(ctx)
		if err == nil {
			// The bus may be up before the service manager owns its name.
			_, err = conn.ListUnitsByNamesContext(ctx, []string{"fleet-agent.service"})
			conn.Close()
		}
		if err != nil {
			return fmt.Errorf("the service manager does not answer: %w", err)
		}
		if !containerd {
			return nil
		}
		if out, err := h.ctr(ctx, "version").CombinedOutput(); err != nil {
			return fmt.Errorf("containerd does not answer: %w: %s", err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	for {
		err := probe()
		if err == nil {
			return nil
		}
		select {
		case <-h.bootDone:
			return fmt.Errorf("the host's service manager exited (%v) before it was ready", h.bootErr)
		case <-ctx.Done():
			return err
		case <-time.After(300 * time.Millisecond):
		}
	}
}

func (h *Host) ctr(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ctr", append([]string{"--address", h.Root("run/containerd/containerd.sock"), "-n", "k8s.io"}, args...)...)
}

// ImportImages loads image archives into the host's containerd, as an
// image's preloaded images or `ctr images import` on a machine would.
func (h *Host) ImportImages(ctx context.Context, archives ...string) error {
	for _, a := range archives {
		if out, err := h.ctr(ctx, "images", "import", "--no-unpack", a).CombinedOutput(); err != nil {
			return fmt.Errorf("host %s: importing %s: %w: %s", h.Name, filepath.Base(a), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// Command runs a command inside the host (its network, mount and UTS
// namespaces), as an operator logged in there would.
func (h *Host) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "nsenter", append([]string{"-t", fmt.Sprint(h.boot.Process.Pid), "-n", "-m", "-u", "--", name}, args...)...)
}

// Inside runs fn on a thread in the host's network namespace; sockets fn
// makes stay there.
func (h *Host) Inside(fn func() error) error { return insideNetNS("/run/netns/"+h.netns, fn) }

// systemd dials the host's service manager through its system bus, as
// systemctl on the host would.
func (h *Host) systemd(ctx context.Context) (*sddbus.Conn, error) {
	return sddbus.NewConnection(func() (*dbus.Conn, error) {
		c, err := dbus.Dial("unix:path="+h.Root("run/dbus/system_bus_socket"), dbus.WithContext(ctx))
		if err != nil {
			return nil, err
		}
		if err := c.Auth(nil); err != nil {
			c.Close()
			return nil, err
		}
		if err := c.Hello(); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	})
}

// Unit starts, stops or restarts a unit of the host ("start", "stop",
// "restart") and waits for the job, like systemctl.
func (h *Host) Unit(ctx context.Context, verb, unit string) error {
	conn, err := h.systemd(ctx)
	if err != nil {
		return fmt.Errorf("host %s: reaching its service manager: %w", h.Name, err)
	}
	defer conn.Close()
	done := make(chan string, 1)
	switch verb {
	case "start":
		_, err = conn.StartUnitContext(ctx, unit, "replace", done)
	case "stop":
		_, err = conn.StopUnitContext(ctx, unit, "replace", done)
	case "restart":
		_, err = conn.RestartUnitContext(ctx, unit, "replace", done)
	default:
		return fmt.Errorf("unit verb %q: want start, stop or restart", verb)
	}
	if err != nil {
		return fmt.Errorf("host %s: %s %s: %w", h.Name, verb, unit, err)
	}
	select {
	case res := <-done:
		if res != "done" {
			return fmt.Errorf("host %s: %s %s: job %s", h.Name, verb, unit, res)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// UnitLog is what a unit of the host has printed (its journal).
func (h *Host) UnitLog(unit string) string {
	b, _ := os.ReadFile(h.Root("var/log/unitd/" + unit + ".log"))
	return string(b)
}

// Logs is the tail of the host's boot and unit logs, for a failed test.
func (h *Host) Logs() string {
	var b strings.Builder
	boot, _ := os.ReadFile(filepath.Join(h.Dir, "boot.log"))
	fmt.Fprintf(&b, "--- host %s: boot ---\n%s", h.Name, tail(string(boot), 2000))
	logs, _ := filepath.Glob(h.Root("var/log/unitd/*.log"))
	for _, l := range logs {
		c, _ := os.ReadFile(l)
		fmt.Fprintf(&b, "--- host %s: %s ---\n%s", h.Name, filepath.Base(l), tail(string(c), 3000))
	}
	return b.String()
}

// Close stops the host's services, kills whatever is left in its cgroup
// (pods included), and removes its namespaces, cgroups and state.
func (h *Host) Close() error {
	if h.site != nil {
		h.site.leave(h.pods())
	}
	if h.boot != nil && h.boot.Process != nil {
		select {
		case <-h.bootDone:
		default:
			_ = h.boot.Process.Signal(os.Interrupt)
			select {
			case <-h.bootDone:
			case <-time.After(30 * time.Second):
			}
		}
	}
	return Record{Kind: "host", Name: h.Name, NetNS: h.netns, Cgroup: h.cgroup, Dir: h.Dir}.remove()
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
