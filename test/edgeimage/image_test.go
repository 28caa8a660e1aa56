package edgeimage_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/fleet/internal/testkit/testhost"
)

const repo = "../.."

// requireBuilder skips where the image cannot be built (not root, tools
// missing), and fails instead in CI, which installs the tools.
func requireBuilder(t testing.TB) {
	t.Helper()
	var missing []string
	for _, tool := range []string{"mmdebstrap", "sfdisk", "mkfs.ext4", "e2fsck", "debugfs", "mkfs.vfat", "fsck.vfat", "mcopy", "mtype", "zstd", "losetup"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	why := ""
	switch {
	case os.Geteuid() != 0:
		why = "building the edge image needs root"
	case len(missing) > 0:
		why = "missing " + strings.Join(missing, ", ") + " (Debian: mmdebstrap fdisk e2fsprogs dosfstools mtools zstd)"
	default:
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal(why)
	}
	t.Skip(why)
}

func build(t testing.TB, out string) {
	t.Helper()
	cmd := exec.Command("make", "--no-print-directory", "-C", repo, "edge-image", "EDGE_IMAGE_OUT="+out)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make edge-image: %v\n%s", err, b)
	}
	t.Logf("make edge-image EDGE_IMAGE_OUT=%s:\n%s", out, lastLines(b, 8))
}

func TestEdgeImage(t *testing.T) {
	requireBuilder(t)
	a := testImage(t)

	t.Run("disk", func(t *testing.T) { checkDisk(t, filepath.Join(a, "out", "fleet-edge-amd64.img")) })
	t.Run("boot", func(t *testing.T) { checkBoot(t, rootFS(t, a)) })
}

// BenchmarkEdgeImageBuild times `make edge-image` and checks that it is
// reproducible: the build shares only the cache of downloaded packages
// with bin/edge-image's (same inputs: make test-image first), and the two
// root file system archives must match entry by entry. make bench runs it;
// it is too long for make test beside the real-node suites.
//
//	go test ./test/edgeimage -run '^$' -bench EdgeImageBuild -benchtime 1x -timeout 30m
func BenchmarkEdgeImageBuild(b *testing.B) {
	requireBuilder(b)
	a := testImage(b)
	for range b.N {
		out := b.TempDir()
		start := time.Now()
		build(b, out)
		b.ReportMetric(time.Since(start).Seconds(), "s-build")
		archive := filepath.Join(out, "fleet-edge-amd64.rootfs.tar.zst")
		if st, err := os.Stat(archive); err == nil {
			b.ReportMetric(float64(st.Size())/(1<<20), "MiB-archive")
		}
		checkSameRootFS(b, filepath.Join(a, "out", "fleet-edge-amd64.rootfs.tar.zst"), archive)
	}
}

// testImage brings bin/edge-image up to date with make test-image (the
// image the other real-node tests boot; built only when an input changed)
// and returns it: out/ holds the archive and the disk, rootfs/ the
// archive unpacked.
func testImage(t testing.TB) string {
	t.Helper()
	cmd := exec.Command("make", "--no-print-directory", "-C", repo, "test-image")
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make test-image: %v\n%s", err, b)
	}
	t.Logf("make test-image:\n%s", lastLines(b, 8))
	dir, err := filepath.Abs(filepath.Join(repo, "bin", "edge-image"))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// rootFS is the image's root file system as hosts boot it; the test fails
// where they cannot run, or skips.
func rootFS(t *testing.T, image string) string {
	t.Helper()
	rootfs := filepath.Join(image, "rootfs")
	testhost.Require(t, rootfs, "image hosts")
	return rootfs
}

type partition struct {
	Start, Size int64
	Type, UUID  string
	Name        string
}

// checkDisk reads the disk image the way a user's tools would.
func checkDisk(t *testing.T, disk string) {
	out := run(t, "sfdisk", "--json", disk)
	var pt struct {
		PartitionTable struct {
			Label      string
			SectorSize int64
			Partitions []partition
		}
	}
	if err := json.Unmarshal(out, &pt); err != nil {
		t.Fatalf("sfdisk --json: %v\n%s", err, out)
	}
	p := pt.PartitionTable
	if p.Label != "gpt" || len(p.Partitions) != 2 {
		t.Fatalf("partition table %+v, want GPT with an EFI system partition and a root partition", p)
	}
	esp, root := p.Partitions[0], p.Partitions[1]
	if esp.Type != "C12A7328-F81F-11D2-BA4B-00A0C93EC93B" || root.Type != "4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709" {
		t.Errorf("partition types %s, %s: want EFI System, Linux root (x86-64)", esp.Type, root.Type)
	}
	espDev := loop(t, disk, esp, p.SectorSize)
	rootDev := loop(t, disk, root, p.SectorSize)

	run(t, "fsck.vfat", "-n", espDev)
	run(t, "e2fsck", "-f", "-n", rootDev)

	// The ESP boots systemd-boot, which boots the kernel on this root.
	esps := string(run(t, "mdir", "-i", espDev, "-/", "-b", "::/"))
	for _, f := range []string{"::/EFI/BOOT/BOOTX64.EFI", "::/vmlinuz", "::/initrd.img", "::/loader/loader.conf", "::/loader/entries/fleet.conf"} {
		if !strings.Contains(esps, f) {
			t.Errorf("EFI system partition lacks %s:\n%s", f, esps)
		}
	}
	entry := string(run(t, "mtype", "-i", espDev, "::/loader/entries/fleet.conf"))
	if !strings.Contains(entry, "root=PARTUUID="+strings.ToLower(root.UUID)) {
		t.Errorf("boot entry does not name the root partition %s:\n%s", root.UUID, entry)
	}

	// What the root file system holds.
	for _, f := range []string{"/usr/bin/fleet-agent", "/usr/local/bin/kubelet", "/usr/local/bin/kubeadm", "/usr/local/bin/kubectl",
		"/usr/bin/containerd", "/usr/sbin/runc", "/usr/lib/cni/bridge", "/usr/lib/systemd/systemd", "/usr/lib/fleet/preload-images"} {
		if !debugfsExists(t, rootDev, f) {
			t.Errorf("root file system lacks %s", f)
		}
	}
	for _, unit := range []string{"fleet-agent.service", "fleet-agent-firstboot.service"} {
		shipped, err := os.ReadFile(filepath.Join(repo, "manifests/agent", unit))
		if err != nil {
			t.Fatal(err)
		}
		if got := debugfsCat(t, rootDev, "/lib/systemd/system/"+unit); got != string(shipped) {
			t.Errorf("the image's %s differs from manifests/agent's", unit)
		}
	}
	wants := debugfsLs(t, rootDev, "/etc/systemd/system/multi-user.target.wants")
	for _, unit := range []string{"fleet-agent.service", "fleet-agent-firstboot.service", "fleet-preload-images.service", "kubelet.service", "containerd.service", "systemd-networkd.service"} {
		if !wants[unit] {
			t.Errorf("%s is not enabled (multi-user.target.wants: %v)", unit, keys(wants))
		}
	}
	images := debugfsLs(t, rootDev, "/opt/fleet/kubernetes/v1.36.3/images")
	built, _ := filepath.Glob(filepath.Join(repo, "bin/k8s/images/*.tar"))
	if len(built) == 0 || len(images) != len(built) {
		t.Errorf("preloaded images %v, want the %d of bin/k8s/images", keys(images), len(built))
	}
	for _, b := range built {
		if !images[filepath.Base(b)] {
			t.Errorf("image %s not in the image", filepath.Base(b))
		}
	}
	if v := strings.TrimSpace(debugfsCat(t, rootDev, "/usr/lib/fleet/kubernetes-version")); v != "v1.36.3" {
		t.Errorf("kubernetes-version %q", v)
	}
	// Nothing that would make two boxes the same host.
	if id := debugfsCat(t, rootDev, "/etc/machine-id"); id != "" {
		t.Errorf("/etc/machine-id is %q, want empty (systemd makes one per box)", id)
	}
	for _, f := range []string{"/etc/hostname", "/etc/fleet-agent/config.yaml", "/var/lib/fleet-agent/identity.json", "/var/lib/dbus/machine-id"} {
		if debugfsExists(t, rootDev, f) {
			t.Errorf("the image holds %s, which must be each box's own", f)
		}
	}
	if c := debugfsCat(t, rootDev, "/etc/containerd/config.toml"); !strings.Contains(c, `sandbox_image = "registry.k8s.io/pause:`) {
		t.Errorf("containerd's sandbox image is not the preloaded pause:\n%s", c)
	}
}

// loop attaches a partition of the disk image read-only and returns the
// device; it is detached when the test ends.
func loop(t *testing.T, disk string, p partition, sector int64) string {
	t.Helper()
	dev := strings.TrimSpace(string(run(t, "losetup", "--find", "--show", "--read-only",
		"--offset", fmt.Sprint(p.Start*sector), "--sizelimit", fmt.Sprint(p.Size*sector), disk)))
	t.Cleanup(func() { _ = exec.Command("losetup", "-d", dev).Run() })
	return dev
}

// debugfsCat is a file's contents (debugfs prints its banner and errors on
// stderr).
func debugfsCat(t *testing.T, dev, path string) string {
	t.Helper()
	out, err := exec.Command("debugfs", "-R", "cat "+path, dev).Output()
	if err != nil {
		t.Fatalf("debugfs -R 'cat %s' %s: %v", path, dev, err)
	}
	return string(out)
}

func debugfsExists(t *testing.T, dev, path string) bool {
	t.Helper()
	out, _ := exec.Command("debugfs", "-R", "stat "+path, dev).CombinedOutput()
	return bytes.Contains(out, []byte("Inode:"))
}

// debugfsLs lists a directory's entries (without . and ..).
func debugfsLs(t *testing.T, dev, dir string) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(run(t, "debugfs", "-R", "ls -p "+dir, dev)))
	for sc.Scan() {
		// /inode/mode/uid/gid/name/size/
		f := strings.Split(sc.Text(), "/")
		if len(f) > 5 && f[5] != "." && f[5] != ".." && f[5] != "" {
			names[f[5]] = true
		}
	}
	return names
}

// checkSameRootFS compares two root file system archives entry by entry:
// names, types, modes, owners, times, link targets and contents.
func checkSameRootFS(t testing.TB, a, b string) {
	ma, mb := manifest(t, a), manifest(t, b)
	if len(ma) < 1000 {
		t.Fatalf("%s has %d entries: not a root file system", a, len(ma))
	}
	var diff []string
	for name, x := range ma {
		if y, ok := mb[name]; !ok {
			diff = append(diff, "only in the first: "+name)
		} else if x != y {
			diff = append(diff, fmt.Sprintf("%s: %s / %s", name, x, y))
		}
	}
	for name := range mb {
		if _, ok := ma[name]; !ok {
			diff = append(diff, "only in the second: "+name)
		}
	}
	sort.Strings(diff)
	if len(diff) > 0 {
		if len(diff) > 40 {
			diff = append(diff[:40], fmt.Sprintf("… and %d more", len(diff)-40))
		}
		t.Errorf("two builds from the same inputs differ:\n%s", strings.Join(diff, "\n"))
	}
}

// manifest is an archive's entries: type, mode, owner, time, link target,
// capabilities and the sha256 of the contents.
func manifest(t testing.TB, archive string) map[string]string {
	t.Helper()
	cmd := exec.Command("zstd", "-dc", archive)
	cmd.Stderr = os.Stderr
	r, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("reading %s: %v", archive, err)
		}
		sum := sha256.New()
		if _, err := io.Copy(sum, tr); err != nil {
			t.Fatalf("reading %s: %v", archive, err)
		}
		m[h.Name] = fmt.Sprintf("%c %o %d:%d %d %q %q %s", h.Typeflag, h.Mode, h.Uid, h.Gid, h.ModTime.Unix(), h.Linkname,
			h.PAXRecords["SCHILY.xattr.security.capability"], hex.EncodeToString(sum.Sum(nil)))
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("zstd -dc %s: %v", archive, err)
	}
	return m
}

func run(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

func keys(m map[string]bool) []string {
	var k []string
	for n := range m {
		k = append(k, n)
	}
	sort.Strings(k)
	return k
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
