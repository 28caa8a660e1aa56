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
	for _, p := range []string{"containerd", "runc", "ctr", "dbus-daemon", "nsenter", "unshare", "ip", "sysctl"} {
		if _, err := exec.LookPath(p); err != nil {
			missing = append(missing, p)
		}
	}
	for _, p := range []string{"/usr/lib/cni/bridge", "/usr/lib/cni/host-local", "/usr/lib/cni/loopback",
		filepath.Join(k8sDir, "kubelet"), filepath.Join(k8sDir, "kubeadm"), filepath.Join(k8sDir, "images", "kube-apiserver.tar"),
		// kubeadm's addons: kube-proxy and CoreDNS run on every cluster's hosts.
		filepath.Join(k8sDir, "images", "kube-proxy.tar"), filepath.Join(k8sDir, "images", "coredns.tar")} {
		if _, err := os.Stat(p); err != nil {
			missing = append(missing, p)
		}
	}
	return missing
}

// cgroupV1 tells whether the machine mounts cgroup v1 hierarchies (a tmpfs
// of them at /sys/fs/cgroup): hosts are cgroup parents in each, beside
// each other.
func cgroupV1() bool {
	var fs unix.Statfs_t
	return unix.Statfs(cgroupFS, &fs) == nil && fs.Type == unix.TMPFS_MAGIC
}
