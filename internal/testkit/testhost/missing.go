package testhost

import (
	"os"
	"os/exec"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Missing lists what this machine lacks to boot hosts from image (the
// edge image's root file system, unpacked: make test-image's
// bin/edge-image/rootfs); empty when it can.
func Missing(image string) []string {
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
	if !present(filepath.Join(image, "sbin", "init")) {
		missing = append(missing, image)
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
	{"util-linux", "hosts boot in namespaces made with unshare and are entered with nsenter", []string{"nsenter", "unshare"}},
	{"iproute2", "the site and its hosts are network namespaces, links and routes made with ip", []string{"ip"}},
	{"mmdebstrap", "make test-image builds the hosts' edge image from Debian packages", []string{"mmdebstrap"}},
	{"fdisk", "make test-image partitions the edge image's disk", []string{"sfdisk"}},
	{"e2fsprogs", "make test-image makes the edge image's root file system", []string{"mkfs.ext4"}},
	{"dosfstools", "make test-image makes the edge image's EFI system partition", []string{"mkfs.vfat"}},
	{"mtools", "make test-image fills the EFI system partition", []string{"mcopy"}},
	{"zstd", "make test-image compresses and unpacks the root file system archive", []string{"zstd"}},
	{"iptables", "make k8s packs iptables (nft backend) and its extensions into the kube-proxy image every host runs", []string{"/usr/sbin/xtables-nft-multi"}},
	{"nftables", "make k8s packs nft into the kube-proxy image", []string{"/usr/sbin/nft"}},
}

// DebianPackage names the Debian package that gives what Missing reported
// missing, and why hosts need it; ok is false for what no package gives
// (root, cgroup v1, the image make test-image builds).
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
