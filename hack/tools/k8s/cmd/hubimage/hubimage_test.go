package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// repoRoot is fleet's checkout, which holds this tools module.
const repoRoot = "../../../../.."

// goBuild cross-compiles pkg (a package path, or a file) as a static binary.
func goBuild(t *testing.T, dir, pkg, arch, out string, ldflags string) {
	t.Helper()
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", ldflags, "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+arch, "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s for %s: %v\n%s", pkg, arch, err, b)
	}
}

// layerFiles reads a layer into name -> header and contents.
func layerFiles(t *testing.T, l v1.Layer) (map[string]*tar.Header, map[string][]byte) {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	hdrs, data := map[string]*tar.Header{}, map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return hdrs, data
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		hdrs[hdr.Name], data[hdr.Name] = hdr, b
	}
}

// The archive `make image` writes: an OCI layout holding one image index
// for linux/amd64 and linux/arm64, each image running the static binary as
// user 65532 with no shell; the amd64 image's fleet-hub, unpacked from its
// layer, runs. The arm64 image is built from a small static program, not
// fleet-hub: cross-compiling the hub for arm64 would cost `make test`
// minutes; `make image` builds the real one the same way.
func TestBuildHubImage(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	amd64 := filepath.Join(tmp, "amd64", "fleet-hub")
	goBuild(t, repoRoot, "./cmd/fleet-hub", "amd64", amd64, "-X github.com/edgefleet/fleet/internal/version.Version=v9.8.7-test")
	src := filepath.Join(tmp, "hello.go")
	if err := os.WriteFile(src, []byte("package main\n\nfunc main() { println(\"hello\") }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	arm64 := filepath.Join(tmp, "arm64", "fleet-hub")
	goBuild(t, tmp, src, "arm64", arm64, "")

	spec := buildSpec{name: "ghcr.io/edgefleet/fleet-hub:v9.8.7-test", out: filepath.Join(tmp, "fleet-hub.oci.tar"),
		caBundle: filepath.Join(tmp, "ca.crt"), version: "v9.8.7-test",
		binaries: platformBinaries{{"linux", "amd64", amd64}, {"linux", "arm64", arm64}}}
	if err := os.WriteFile(spec.caBundle, []byte("-----BEGIN CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	args := []string{"build", "--name", spec.name, "--out", spec.out, "--ca-bundle", spec.caBundle, "--version", spec.version,
		"--binary", "linux/amd64=" + amd64, "--binary", "linux/arm64=" + arm64}
	if err := run(args, &stdout, io.Discard); err != nil {
		t.Fatalf("hubimage build: %v", err)
	}

	// The layout's own index names the image, as importers read it.
	idx, cleanup, err := readArchive(spec.out)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	digest, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if want := spec.name + "@" + digest.String(); !strings.Contains(stdout.String(), want) {
		t.Errorf("build printed %q, want the digest %s", stdout.String(), want)
	}
	checkTopIndex(t, spec.out, digest)
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != types.OCIImageIndex || m.Annotations["org.opencontainers.image.version"] != "v9.8.7-test" {
		t.Errorf("index media type %s, annotations %v", m.MediaType, m.Annotations)
	}
	var platforms []string
	for _, d := range m.Manifests {
		platforms = append(platforms, d.Platform.String())
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		checkImage(t, img, d.Platform, tmp)
	}
	if want := []string{"linux/amd64", "linux/arm64/v8"}; !slices.Equal(platforms, want) {
		t.Errorf("platforms %v, want %v", platforms, want)
	}

	// push sends the index and both images to a registry (go-containerregistry's
	// own, in-process: no real registry is reachable here), which then serves
	// the same digest.
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	to := strings.TrimPrefix(reg.URL, "http://") + "/edgefleet/fleet-hub:v9.8.7-test"
	stdout.Reset()
	if err := run([]string{"push", "--archive", spec.out, "--to", to}, &stdout, io.Discard); err != nil {
		t.Fatalf("hubimage push: %v", err)
	}
	ref, err := name.ParseReference(to)
	if err != nil {
		t.Fatal(err)
	}
	pushed, err := remote.Index(ref)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := pushed.Digest(); err != nil || d != digest || !strings.Contains(stdout.String(), digest.String()) {
		t.Errorf("the registry serves %s (%v), pushed %s; push printed %q", d, err, digest, stdout.String())
	}
	if pm, err := pushed.IndexManifest(); err != nil || len(pm.Manifests) != 2 {
		t.Errorf("pushed index: %v, %v", pm, err)
	}

	// The same binaries give the same digest.
	again := spec
	again.out = filepath.Join(tmp, "again.oci.tar")
	if d, err := build(again); err != nil || d != digest {
		t.Errorf("second build: %s, %v; want %s", d, err, digest)
	}
}

// checkTopIndex reads index.json from the tarball: one entry, the image
// index, named with its tag for skopeo and containerd.
func checkTopIndex(t *testing.T, archive string, digest v1.Hash) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	var names []string
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, hdr.Name)
		if hdr.Name != "index.json" {
			continue
		}
		var top v1.IndexManifest
		if err := json.NewDecoder(tr).Decode(&top); err != nil {
			t.Fatal(err)
		}
		if len(top.Manifests) != 1 || top.Manifests[0].Digest != digest ||
			top.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "v9.8.7-test" ||
			top.Manifests[0].Annotations["io.containerd.image.name"] != "ghcr.io/edgefleet/fleet-hub:v9.8.7-test" {
			t.Errorf("index.json: %+v", top)
		}
	}
	if !slices.Contains(names, "oci-layout") || !slices.Contains(names, "index.json") {
		t.Errorf("not an OCI layout: %v", names)
	}
}

func checkImage(t *testing.T, img v1.Image, p *v1.Platform, tmp string) {
	t.Helper()
	mt, _ := img.MediaType()
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if mt != types.OCIManifestSchema1 || cfg.OS != p.OS || cfg.Architecture != p.Architecture {
		t.Errorf("%s: media type %s, config platform %s/%s", p, mt, cfg.OS, cfg.Architecture)
	}
	if cfg.Config.User != "65532:65532" || !slices.Equal(cfg.Config.Entrypoint, []string{"/fleet-hub"}) || len(cfg.Config.Cmd) != 0 {
		t.Errorf("%s: user %q, entrypoint %q, cmd %q", p, cfg.Config.User, cfg.Config.Entrypoint, cfg.Config.Cmd)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%s: %d layers, %v", p, len(layers), err)
	}
	hdrs, data := layerFiles(t, layers[0])
	var names []string
	for n := range hdrs {
		names = append(names, n)
	}
	slices.Sort(names)
	want := []string{"etc/", "etc/group", "etc/passwd", "etc/ssl/", "etc/ssl/certs/", "etc/ssl/certs/ca-certificates.crt", "fleet-hub", "tmp/"}
	if !slices.Equal(names, want) {
		t.Errorf("%s: layer holds %v, want %v (no shell, nothing else)", p, names, want)
	}
	if h := hdrs["fleet-hub"]; h == nil || h.Mode != 0o755 || h.Uid != 0 {
		t.Errorf("%s: fleet-hub entry %+v", p, h)
	}
	if !strings.Contains(string(data["etc/passwd"]), "nonroot:x:65532:65532:") {
		t.Errorf("%s: /etc/passwd %q has no user 65532", p, data["etc/passwd"])
	}
	if p.Architecture != "amd64" {
		return
	}
	bin := filepath.Join(tmp, "unpacked", "fleet-hub")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data["fleet-hub"], 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "v9.8.7-test" {
		t.Errorf("the image's fleet-hub version: %v, %q", err, out)
	}
}

// A dynamically linked binary (no libc in the image) or one for another
// architecture is refused before anything is written.
func TestBuildRefusesWrongBinaries(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "x.tar")
	err = run([]string{"build", "--name", "x/y:z", "--out", out, "--binary", "linux/arm64=" + self}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "not arm64") {
		t.Errorf("amd64 binary as arm64: %v", err)
	}
	err = run([]string{"build", "--name", "x/y:z", "--out", out, "--binary", "linux/amd64=/bin/ls"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Errorf("dynamic binary: %v", err)
	}
	if err := run([]string{"build", "--name", "x/y:z", "--out", out, "--binary", "amd64"}, io.Discard, io.Discard); err == nil {
		t.Error("--binary without OS/ARCH=FILE accepted")
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("an archive was written")
	}
}
