package facts

import (
	"bufio"
	"crypto/x509"
	"encoding/pem"
	"io/fs"
	"net"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgefleet/fleet/pkg/contract/wire"
)

// Kernel is the running kernel's release.
func Kernel() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// BootTime is when the host booted, nil if unknown.
func BootTime() *metav1.Time {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return nil
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "btime "); ok {
			s, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return nil
			}
			return &metav1.Time{Time: time.Unix(s, 0).UTC()}
		}
	}
	return nil
}

// Interfaces lists the network interfaces and their addresses.
func Interfaces() []wire.Interface {
	ifaces, _ := net.Interfaces()
	var out []wire.Interface
	for _, iface := range ifaces {
		if len(out) == wire.MaxFactInterfaces {
			break
		}
		i := wire.Interface{Name: iface.Name, Up: iface.Flags&net.FlagUp != 0, MAC: iface.HardwareAddr.String()}
		addrs, _ := iface.Addrs()
		for _, a := range addrs {
			if len(i.Addresses) == 16 {
				break
			}
			i.Addresses = append(i.Addresses, a.String())
		}
		out = append(out, i)
	}
	return out
}

// dataFS are the file system types that hold data; the rest of a host's
// mounts (proc, cgroup, overlay of containers …) say nothing of its disks.
var dataFS = map[string]bool{"ext2": true, "ext3": true, "ext4": true, "xfs": true, "btrfs": true, "vfat": true,
	"f2fs": true, "zfs": true}

// Disks lists the mounted file systems that hold data, with their size.
func Disks() []wire.Disk {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return nil
	}
	seen := map[string]bool{}
	var out []wire.Disk
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || !dataFS[f[2]] || seen[f[0]] || len(out) == wire.MaxFactDisks {
			continue
		}
		seen[f[0]] = true
		d := wire.Disk{Device: f[0], Mount: f[1], Type: f[2]}
		var st syscall.Statfs_t
		if syscall.Statfs(f[1], &st) == nil {
			d.SizeBytes = int64(st.Blocks) * st.Bsize
			d.AvailBytes = int64(st.Bavail) * st.Bsize
		}
		out = append(out, d)
	}
	return out
}

// CertificateDirs are where kubeadm and the kubelet keep certificates.
var CertificateDirs = []string{"/etc/kubernetes/pki", "/var/lib/kubelet/pki"}

// Certificates lists the certificate files (*.crt, *.pem) under dirs of
// fsys (a host's root), each with the soonest end among the certificates
// it holds, soonest first; at most wire.MaxFactCertificates.
func Certificates(fsys fs.FS, dirs []string) []wire.CertificateDate {
	var out []wire.CertificateDate
	for _, dir := range dirs {
		_ = fs.WalkDir(fsys, strings.TrimPrefix(path.Clean(dir), "/"), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !(strings.HasSuffix(p, ".crt") || strings.HasSuffix(p, ".pem")) {
				return nil
			}
			b, err := fs.ReadFile(fsys, p)
			if err != nil {
				return nil
			}
			var soonest *x509.Certificate
			for {
				var block *pem.Block
				if block, b = pem.Decode(b); block == nil {
					break
				}
				if block.Type != "CERTIFICATE" {
					continue
				}
				if c, err := x509.ParseCertificate(block.Bytes); err == nil && (soonest == nil || c.NotAfter.Before(soonest.NotAfter)) {
					soonest = c
				}
			}
			if soonest != nil {
				out = append(out, wire.CertificateDate{Path: "/" + p, Subject: soonest.Subject.CommonName,
					NotAfter: metav1.Time{Time: soonest.NotAfter.UTC()}})
			}
			return nil
		})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].NotAfter.Before(&out[j].NotAfter) })
	if len(out) > wire.MaxFactCertificates {
		out = out[:wire.MaxFactCertificates]
	}
	return out
}
