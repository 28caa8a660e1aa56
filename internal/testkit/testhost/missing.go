package testhost

import (
	"os"
	"os/exec"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Missing lists what this machine lacks to run hosts whose kubelet and
// kubeadm come from k8sDir (bin/k8s, with the images `make k8s` packs);
// empty when it can.
func Missing(k8sDir string) []string {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	if !cgroupV1() {
		missing = append(missing, "cgroup v1 (this machine mounts cgroup v2 at "+cgroupFS+")")
	}
	for _, p := range debianPackages {
		for _, what := range p.gives {
			if !present(what) {
				missing = append(missing, what)
			}
		}
	}
	for _, p := range []string{filepath.Join(k8sDir, "kubelet"), filepath.Join(k8sDir, "kubeadm"), filepath.Join(k8sDir, "images", "kube-apiserver.tar"),
		// kubeadm's addons: kube-proxy and CoreDNS run on every cluster's hosts.
		filepath.Join(k8sDir, "images", "kube-proxy.tar"), filepath.Join(k8sDir, "images", "coredns.tar")} {
		if !present(p) {
			missing = append(missing, p)
		}
	}
	return missing
}

// present tells whether a command is on PATH, or a file (an absolute
// path) exists.
func present(what string) bool {
	if filepath.IsAbs(what) {
		_, err := os.Stat(what)
		return err == nil
	}
	_, err := exec.LookPath(what)
	return err == nil
}

// debianPackages are the Debian packages hosts need from the machine, with
// the commands and files Missing looks for in each, and why.
var debianPackages = []struct {
	name, why string
	gives     []string
}{
	{"containerd", "each host runs its own containerd, and ctr imports the control-plane images into it", []string{"containerd", "ctr"}},
	{"runc", "containerd starts the hosts' containers with runc", []string{"runc"}},
	{"containernetworking-plugins", "pods get their addresses from the bridge and host-local CNI plugins",
		[]string{"/usr/lib/cni/bridge", "/usr/lib/cni/host-local", "/usr/lib/cni/loopback"}},
	{"dbus", "each host's service manager answers systemd's D-Bus API on a dbus-daemon of its own", []string{"dbus-daemon"}},
	{"util-linux", "hosts are entered with nsenter and unshare", []string{"nsenter", "unshare"}},
	{"iproute2", "the site and its hosts are network namespaces, links and routes made with ip", []string{"ip"}},
	{"procps", "each host sets its own ip_forward with sysctl", []string{"sysctl"}},
	{"iptables", "make k8s packs iptables (nft backend) and its extensions into the kube-proxy image every host runs", []string{"/usr/sbin/xtables-nft-multi"}},
	{"nftables", "make k8s packs nft into the kube-proxy image", []string{"/usr/sbin/nft"}},
}

// DebianPackage names the Debian package that gives what Missing reported
// missing, and why hosts need it; ok is false for what no package gives
// (root, cgroup v1, what `make k8s` builds).
func DebianPackage(missing string) (name, why string, ok bool) {
	for _, p := range debianPackages {
		for _, what := range p.gives {
			if what == missing {
				return p.name, p.why, true
			}
		}
	}
	return "", "", false
}

// cgroupV1 tells whether the machine mounts cgroup v1 hierarchies (a tmpfs
// of them at /sys/fs/cgroup): hosts are cgroup parents in each, beside
// each other.
func cgroupV1() bool {
	var fs unix.Statfs_t
	return unix.Statfs(cgroupFS, &fs) == nil && fs.Type == unix.TMPFS_MAGIC
}
