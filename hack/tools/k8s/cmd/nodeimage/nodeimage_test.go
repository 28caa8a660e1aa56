package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/edgefleet/fleet/hack/tools/k8s/ocilayout"
)

// The x86-64 psABI's loader path, and where Debian and Ubuntu keep libc.
const (
	loaderPath = "lib64/ld-linux-x86-64.so.2"
	libcPath   = "lib/x86_64-linux-gnu/libc.so.6"
)

// layerEntry is what the test reads back of one layer entry.
type layerEntry struct {
	hdr  *tar.Header
	data []byte
}

// readArchive returns the image of a single-image, single-layer OCI
// layout archive, the names the archive gives it (containerd's and OCI's
// ref.name), and its layer's entries.
func readArchive(t *testing.T, file string) (v1.Image, []string, map[string]layerEntry) {
	t.Helper()
	dir := t.TempDir()
	if err := ocilayout.Extract(file, dir); err != nil {
		t.Fatal(err)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("%s is not an OCI layout: %v", file, err)
	}
	top, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(top.Manifests) != 1 || top.Manifests[0].MediaType != types.OCIManifestSchema1 {
		t.Fatalf("want one OCI image manifest in %s, got %+v", file, top.Manifests)
	}
	names := []string{top.Manifests[0].Annotations["io.containerd.image.name"], top.Manifests[0].Annotations["org.opencontainers.image.ref.name"]}
	img, err := idx.Image(top.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("want one layer in %s, got %d", file, len(layers))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	entries := map[string]layerEntry{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		entries[hdr.Name] = layerEntry{hdr: hdr, data: data}
	}
	return img, names, entries
}

func fileDigest(t *testing.T, file string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// An image of a cgo-linked binary carries its loader at PT_INTERP's path and
// libc where the loader looks, the real files and not host symlinks, and the
// name it was given; a second build is the same archive byte for byte.
func TestBuildDynamicBinary(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "true.tar")
	var stdout bytes.Buffer
	args := []string{"build", "--name", "registry.example/tools/true:v1", "--binary", "/bin/true", "--out", out}
	if err := run(args, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "registry.example/tools/true:v1, image ID sha256:") {
		t.Errorf("build printed %q", stdout.String())
	}
	img, names, entries := readArchive(t, out)
	if !slices.Equal(names, []string{"registry.example/tools/true:v1", "v1"}) {
		t.Errorf("the archive names its image %q", names)
	}

	hostLoader, err := filepath.EvalSymlinks("/" + loaderPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct{ path, host string }{
		{"usr/local/bin/true", "/bin/true"},
		{loaderPath, hostLoader},
		{libcPath, "/" + libcPath},
	} {
		e, ok := entries[want.path]
		if !ok {
			t.Errorf("the layer has no %s", want.path)
			continue
		}
		hostData, err := os.ReadFile(want.host)
		if err != nil {
			t.Fatal(err)
		}
		if e.hdr.Typeflag != tar.TypeReg || !bytes.Equal(e.data, hostData) {
			t.Errorf("%s is not a regular file with the contents of %s (type %c, %d bytes)", want.path, want.host, e.hdr.Typeflag, len(e.data))
		}
		if e.hdr.Mode&0o111 == 0 {
			t.Errorf("%s is not executable: %o", want.path, e.hdr.Mode)
		}
	}
	// libc names the loader as a DT_NEEDED too: one copy, one symlink.
	if e := entries["lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"]; e.hdr == nil || e.hdr.Typeflag != tar.TypeSymlink || e.hdr.Linkname != "/"+loaderPath {
		t.Errorf("the loader's second path is not a symlink to /%s: %+v", loaderPath, e.hdr)
	}
	if e := entries["true"]; e.hdr == nil || e.hdr.Typeflag != tar.TypeSymlink || e.hdr.Linkname != "/usr/local/bin/true" {
		t.Errorf("/true is not a symlink to /usr/local/bin/true: %+v", e.hdr)
	}
	if e := entries["tmp/"]; e.hdr == nil || e.hdr.Typeflag != tar.TypeDir || e.hdr.Mode != 0o1777 {
		t.Errorf("/tmp is not a 1777 directory: %+v", e.hdr)
	}
	for file, want := range map[string][]string{"etc/passwd": {"root:x:0:0:", "nobody:x:65534:65534:"}, "etc/group": {"root:x:0:", "nobody:x:65534:"}} {
		for _, line := range want {
			if !strings.Contains(string(entries[file].data), line) {
				t.Errorf("%s has no %q line: %q", file, line, entries[file].data)
			}
		}
	}
	for name, e := range entries {
		if !e.hdr.ModTime.Equal(time.Unix(0, 0)) || e.hdr.Uid != 0 || e.hdr.Gid != 0 {
			t.Errorf("%s has mtime %v and owner %d:%d, want the fixed ones", name, e.hdr.ModTime, e.hdr.Uid, e.hdr.Gid)
		}
	}

	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || cfg.Architecture != "amd64" {
		t.Errorf("platform %s/%s, want linux/amd64", cfg.OS, cfg.Architecture)
	}
	if !slices.Equal(cfg.Config.Entrypoint, []string{"/usr/local/bin/true"}) {
		t.Errorf("entrypoint %q", cfg.Config.Entrypoint)
	}
	if !slices.ContainsFunc(cfg.Config.Env, func(e string) bool { return strings.HasPrefix(e, "PATH=/usr/local/bin:") }) {
		t.Errorf("env %q has no PATH starting with /usr/local/bin", cfg.Config.Env)
	}

	again := filepath.Join(dir, "again.tar")
	if err := run([]string{"build", "--name", "registry.example/tools/true:v1", "--binary", "/bin/true", "--out", again}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	if fileDigest(t, out) != fileDigest(t, again) {
		t.Error("two builds of the same image differ")
	}
}

// buildPause builds the pause command, static, into dir.
func buildPause(t *testing.T, dir string) string {
	t.Helper()
	out := filepath.Join(dir, "pause")
	cmd := exec.Command("go", "build", "-o", out, "../pause")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building pause: %v\n%s", err, b)
	}
	return out
}

// fakeKubeadm writes a kubeadm that prints the version and image list of
// kubeadm v1.36.3, with extra images appended to the list.
func fakeKubeadm(t *testing.T, dir string, extra ...string) string {
	t.Helper()
	images := append([]string{
		"registry.k8s.io/kube-apiserver:v1.36.3",
		"registry.k8s.io/kube-controller-manager:v1.36.3",
		"registry.k8s.io/kube-scheduler:v1.36.3",
		"registry.k8s.io/kube-proxy:v1.36.3",
		"registry.k8s.io/coredns/coredns:v1.14.2",
		"registry.k8s.io/pause:3.10.2",
		"registry.k8s.io/etcd:3.6.8-0",
	}, extra...)
	script := `#!/bin/sh
case "$*" in
"version -o short") echo v1.36.3 ;;
"config images list --kubernetes-version v1.36.3") printf '%s\n' ` + strings.Join(images, " ") + ` ;;
*) echo "unexpected arguments: $*" >&2; exit 1 ;;
esac
`
	file := filepath.Join(dir, "kubeadm")
	if err := os.WriteFile(file, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return file
}

// kubeadm mode builds every image kubeadm lists, the kube-proxy image with
// the nft flavour of iptables, its extensions and nft from the machine's
// Debian packages, and does nothing on a second run until a binary is newer
// than its archive.
func TestKubeadmImages(t *testing.T) {
	binDir, outDir := t.TempDir(), filepath.Join(t.TempDir(), "images")
	buildPause(t, binDir)
	trueData, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	for _, name := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy", "coredns", "etcd", "pause"} {
		file := filepath.Join(binDir, name)
		if name != "pause" {
			if err := os.WriteFile(file, trueData, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chtimes(file, old, old); err != nil {
			t.Fatal(err)
		}
	}
	kubeadm := fakeKubeadm(t, binDir)
	if err := os.Chtimes(kubeadm, old, old); err != nil {
		t.Fatal(err)
	}
	args := []string{"kubeadm", "--kubeadm", kubeadm, "--bin-dir", binDir, "--out-dir", outDir}

	var stdout bytes.Buffer
	if err := run(args, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 7 || strings.Count(stdout.String(), "built:") != 7 {
		t.Fatalf("want a built line per image, got:\n%s", stdout.String())
	}
	want := map[string]string{
		"kube-apiserver.tar":          "registry.k8s.io/kube-apiserver:v1.36.3",
		"kube-controller-manager.tar": "registry.k8s.io/kube-controller-manager:v1.36.3",
		"kube-scheduler.tar":          "registry.k8s.io/kube-scheduler:v1.36.3",
		"kube-proxy.tar":              "registry.k8s.io/kube-proxy:v1.36.3",
		"coredns.tar":                 "registry.k8s.io/coredns/coredns:v1.14.2",
		"etcd.tar":                    "registry.k8s.io/etcd:3.6.8-0",
		"pause.tar":                   "registry.k8s.io/pause:3.10.2",
	}
	got, err := filepath.Glob(filepath.Join(outDir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Errorf("out dir holds %q, want only %d archives", got, len(want))
	}
	for file, image := range want {
		img, names, entries := readArchive(t, filepath.Join(outDir, file))
		if names[0] != image {
			t.Errorf("%s names its image %q, want %s", file, names, image)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		switch file {
		case "pause.tar":
			if entries["pause"].hdr == nil || entries["pause"].hdr.Linkname != "/usr/local/bin/pause" {
				t.Errorf("pause.tar has no /pause")
			}
			// pause is static: no loader, no library.
			if _, ok := entries[loaderPath]; ok {
				t.Errorf("pause.tar has a loader, but pause is static")
			}
			if !slices.Equal(cfg.Config.Entrypoint, []string{"/pause"}) {
				t.Errorf("pause's entrypoint is %q, want /pause", cfg.Config.Entrypoint)
			}
		case "coredns.tar":
			// kubeadm's Deployment gives only args.
			if !slices.Equal(cfg.Config.Entrypoint, []string{"/coredns"}) || entries["coredns"].hdr == nil {
				t.Errorf("coredns's entrypoint is %q, want /coredns, a link to the binary", cfg.Config.Entrypoint)
			}
		case "kube-proxy.tar":
			checkKubeProxyTools(t, entries)
		}
	}

	apiserver := filepath.Join(outDir, "kube-apiserver.tar")
	before, err := os.Stat(apiserver)
	if err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	if err := run(args, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(stdout.String(), "up to date"); n != 7 {
		t.Errorf("second run: %d images up to date, want 7:\n%s", n, stdout.String())
	}
	if after, _ := os.Stat(apiserver); !after.ModTime().Equal(before.ModTime()) {
		t.Error("second run rewrote kube-apiserver.tar")
	}

	// A binary newer than its archive rebuilds that image only.
	future := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(binDir, "etcd"), future, future); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	if err := run(args, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(stdout.String(), "built:"); n != 1 || !strings.Contains(stdout.String(), "etcd.tar") {
		t.Errorf("after etcd changed, want only etcd rebuilt:\n%s", stdout.String())
	}
}

// checkKubeProxyTools checks that a kube-proxy image carries every
// iptables name kube-proxy calls, on the nft backend, with the extensions
// and libraries the tools load, as the machine's Debian packages have them.
func checkKubeProxyTools(t *testing.T, entries map[string]layerEntry) {
	t.Helper()
	for _, name := range []string{"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore"} {
		if e := entries["usr/sbin/"+name]; e.hdr == nil || e.hdr.Typeflag != tar.TypeSymlink || e.hdr.Linkname != "xtables-nft-multi" {
			t.Errorf("kube-proxy.tar: /usr/sbin/%s is not a link to xtables-nft-multi: %+v", name, e.hdr)
		}
	}
	for _, file := range []string{"usr/sbin/xtables-nft-multi", "usr/sbin/nft", "usr/lib/x86_64-linux-gnu/xtables/libxt_comment.so",
		"usr/lib/x86_64-linux-gnu/xtables/libxt_statistic.so", loaderPath, libcPath} {
		if e := entries[file]; e.hdr == nil || e.hdr.Typeflag != tar.TypeReg {
			t.Errorf("kube-proxy.tar has no file %s", file)
		}
	}
	// The libraries only the tools link (libnftnl from xtables-nft-multi,
	// libnftables from nft), wherever the machine keeps them.
	for _, lib := range []string{"libnftnl.so.11", "libxtables.so.12", "libnftables.so.1"} {
		if !slices.ContainsFunc(slices.Collect(maps.Keys(entries)), func(p string) bool { return path.Base(p) == lib }) {
			t.Errorf("kube-proxy.tar has no %s", lib)
		}
	}
}

// An image kubeadm lists that nodeimage has no rule for fails the run before
// anything is built, and so does a missing binary, naming what is missing.
func TestKubeadmImagesErrors(t *testing.T) {
	binDir, outDir := t.TempDir(), filepath.Join(t.TempDir(), "images")
	kubeadm := fakeKubeadm(t, binDir, "registry.k8s.io/kube-newthing:v1.36.3")
	err := run([]string{"kubeadm", "--kubeadm", kubeadm, "--bin-dir", binDir, "--out-dir", outDir}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "registry.k8s.io/kube-newthing:v1.36.3") {
		t.Errorf("an unknown image gave %v, want an error naming it", err)
	}
	if _, err := os.Stat(outDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the out dir was made before the image list was checked: %v", err)
	}

	kubeadm = fakeKubeadm(t, binDir)
	err = run([]string{"kubeadm", "--kubeadm", kubeadm, "--bin-dir", binDir, "--out-dir", outDir}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(binDir, "kube-apiserver")) {
		t.Errorf("a missing binary gave %v, want an error naming it", err)
	}

	err = run([]string{"build", "--name", "x:y", "--binary", "/bin/true"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--out") {
		t.Errorf("build without --out gave %v", err)
	}
}

// The archive imports into a real containerd under its name, and the
// binary in it runs there with the loader and libc it carries; so does the
// kube-proxy image's iptables, loading the extensions kube-proxy's rules use.
func TestImportAndRun(t *testing.T) {
	var missing []string
	for _, tool := range []string{"containerd", "ctr", "runc"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if os.Geteuid() != 0 || len(missing) > 0 {
		if os.Getenv("CI") == "true" {
			t.Fatalf("importing needs root and containerd, ctr and runc (missing: %q)", missing)
		}
		t.Skipf("importing needs root and containerd, ctr and runc (missing: %q)", missing)
	}
	dir := t.TempDir()
	archive := filepath.Join(dir, "echo.tar")
	if err := run([]string{"build", "--name", "registry.example/echo:v1", "--binary", "/bin/echo", "--out", archive}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}

	// A containerd of its own, without CRI, so nothing on the machine is used.
	socket := filepath.Join(dir, "containerd.sock")
	config := "version = 2\n" +
		"root = \"" + filepath.Join(dir, "root") + "\"\n" +
		"state = \"" + filepath.Join(dir, "state") + "\"\n" +
		"disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n" +
		"[grpc]\n  address = \"" + socket + "\"\n"
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	containerd := exec.Command("containerd", "--config", filepath.Join(dir, "config.toml"))
	containerd.Stdout, containerd.Stderr = &log, &log
	if err := containerd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = containerd.Process.Kill()
		_ = containerd.Wait()
		if t.Failed() {
			t.Logf("containerd's log:\n%s", log.String())
		}
	})
	ctr := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("ctr", append([]string{"--address", socket, "-n", "k8s.io"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("ctr %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if err := exec.Command("ctr", "--address", socket, "version").Run(); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("containerd did not answer within 20s")
		}
		time.Sleep(100 * time.Millisecond)
	}

	ctr("images", "import", archive)
	if names := ctr("images", "ls", "-q"); !strings.Contains(names, "registry.example/echo:v1") {
		t.Fatalf("after import, the images are %q", names)
	}
	if out := ctr("run", "--rm", "registry.example/echo:v1", "nodeimage-test", "/echo", "hello from the image"); strings.TrimSpace(out) != "hello from the image" {
		t.Errorf("running /echo printed %q", out)
	}

	tools, err := kubeProxyTools()
	if err != nil {
		t.Fatal(err)
	}
	proxy := filepath.Join(dir, "kube-proxy.tar")
	if _, err := buildArchive(imageSpec{name: "registry.example/kube-proxy:v1", binaries: []string{"/bin/true"}, hostFiles: tools, symlinks: kubeProxyLinks}, proxy); err != nil {
		t.Fatal(err)
	}
	ctr("images", "import", proxy)
	if out := ctr("run", "--rm", "registry.example/kube-proxy:v1", "nodeimage-iptables", "/usr/sbin/iptables", "--version"); !strings.Contains(out, "(nf_tables)") {
		t.Errorf("iptables --version in the kube-proxy image printed %q, want the nf_tables backend", out)
	}
	// In the container's own network namespace: a rule with two extension
	// matches fails unless their plugins load.
	ctr("run", "--rm", "--privileged", "registry.example/kube-proxy:v1", "nodeimage-rule", "/usr/sbin/iptables", "-A", "INPUT",
		"-m", "comment", "--comment", "fleet", "-m", "statistic", "--mode", "random", "--probability", "0.5", "-j", "ACCEPT")
	if out := ctr("run", "--rm", "--privileged", "registry.example/kube-proxy:v1", "nodeimage-nft", "/usr/sbin/nft", "list", "ruleset"); strings.TrimSpace(out) != "" {
		t.Errorf("nft in a fresh network namespace listed %q, want nothing", out)
	}
}

// An image is tagged only with the version of the module its binary is
// built from: a kubeadm asking for another CoreDNS fails the build.
func TestCheckModuleVersion(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	info, ok := debug.ReadBuildInfo()
	if !ok || len(info.Deps) == 0 {
		t.Fatal("the test binary carries no module information")
	}
	bi, err := buildinfo.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	dep := info.Deps[0]
	if err := checkModuleVersion(bi, self, dep.Path, "registry.example/x:"+dep.Version); err != nil {
		t.Errorf("the right version refused: %v", err)
	}
	if err := checkModuleVersion(bi, self, dep.Path, "registry.example/x:v0.0.0-other"); err == nil || !strings.Contains(err.Error(), "pin v0.0.0-other in hack/tools/k8s/go.mod") {
		t.Errorf("another version: %v", err)
	}
	if err := checkModuleVersion(bi, self, "example.com/not/linked", "registry.example/x:v1"); err == nil {
		t.Error("a module the binary is not built from: no error")
	}
}
