package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/edgefleet/fleet/hack/tools/k8s/ocilayout"
)

// buildSpec is what build makes.
type buildSpec struct {
	name     string // name:tag recorded in the archive
	binaries platformBinaries
	out      string
	caBundle string
	version  string
}

// The image's user: distroless' "nonroot", which Pod Security's restricted
// profile and runAsNonRoot accept without a runAsUser in the pod.
const (
	userID     = 65532
	entrypoint = "/fleet-hub"
)

// fixedTime is every file's mtime and the image's creation time, so the
// digest depends only on the contents.
var fixedTime = time.Unix(0, 0).UTC()

var elfMachines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// build writes spec.out and returns the digest of the image index.
func build(spec buildSpec) (v1.Hash, error) {
	tag, err := name.NewTag(spec.name)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("image name %q: %w", spec.name, err)
	}
	var caBundle []byte
	if spec.caBundle != "" {
		if caBundle, err = os.ReadFile(spec.caBundle); err != nil {
			return v1.Hash{}, fmt.Errorf("CA bundle: %w", err)
		}
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, b := range spec.binaries {
		img, err := platformImage(b, caBundle, spec.version)
		if err != nil {
			return v1.Hash{}, fmt.Errorf("%s/%s: %w", b.os, b.arch, err)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			return v1.Hash{}, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: cfg.Platform()}})
	}
	annotations := map[string]string{"org.opencontainers.image.title": "fleet-hub", "org.opencontainers.image.source": "https://github.com/edgefleet/fleet"}
	if spec.version != "" {
		annotations["org.opencontainers.image.version"] = spec.version
	}
	idx = mutate.Annotations(idx, annotations).(v1.ImageIndex)
	digest, err := idx.Digest()
	if err != nil {
		return v1.Hash{}, err
	}

	if err := ocilayout.WriteIndex(spec.out, tag, idx); err != nil {
		return v1.Hash{}, err
	}
	return digest, nil
}

// platformImage is one platform's image: a single layer holding the binary
// and the files it needs.
func platformImage(b platformBinary, caBundle []byte, version string) (v1.Image, error) {
	if err := checkStatic(b); err != nil {
		return nil, err
	}
	bin, err := os.ReadFile(b.file)
	if err != nil {
		return nil, err
	}
	layerData, err := layerTarGz(bin, caBundle)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerData)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{Created: v1.Time{Time: fixedTime}, CreatedBy: "hubimage build"}})
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = b.os, b.arch
	if b.arch == "arm64" {
		cfg.Variant = "v8"
	}
	cfg.Created = v1.Time{Time: fixedTime}
	cfg.Config.User = fmt.Sprintf("%d:%d", userID, userID)
	cfg.Config.Entrypoint = []string{entrypoint}
	cfg.Config.WorkingDir = "/"
	cfg.Config.Labels = map[string]string{"org.opencontainers.image.title": "fleet-hub", "org.opencontainers.image.source": "https://github.com/edgefleet/fleet"}
	if version != "" {
		cfg.Config.Labels["org.opencontainers.image.version"] = version
	}
	return mutate.ConfigFile(img, cfg)
}

// checkStatic refuses a binary for another platform, or one that needs a
// loader and libc the image does not have.
func checkStatic(b platformBinary) error {
	want, ok := elfMachines[b.arch]
	if b.os != "linux" || !ok {
		return fmt.Errorf("unsupported platform %s/%s (want linux/amd64 or linux/arm64)", b.os, b.arch)
	}
	f, err := elf.Open(b.file)
	if err != nil {
		return fmt.Errorf("reading %s as ELF: %w", b.file, err)
	}
	defer f.Close()
	if f.Machine != want {
		return fmt.Errorf("%s is for %s, not %s", b.file, f.Machine, b.arch)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked; build it with CGO_ENABLED=0: the image has no libc", b.file)
		}
	}
	return nil
}

// layerTarGz is the layer: /fleet-hub, /etc/passwd, /etc/group, the CA
// bundle when there is one, and /tmp, in a fixed order.
func layerTarGz(bin, caBundle []byte) ([]byte, error) {
	type file struct {
		mode int64
		data []byte
		dir  bool
	}
	files := map[string]file{
		"etc":        {mode: 0o755, dir: true},
		"etc/passwd": {mode: 0o644, data: fmt.Appendf(nil, "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", userID, userID)},
		"etc/group":  {mode: 0o644, data: fmt.Appendf(nil, "root:x:0:\nnonroot:x:%d:\n", userID)},
		"fleet-hub":  {mode: 0o755, data: bin},
		"tmp":        {mode: 0o1777, dir: true},
	}
	if caBundle != nil {
		files["etc/ssl"] = file{mode: 0o755, dir: true}
		files["etc/ssl/certs"] = file{mode: 0o755, dir: true}
		files["etc/ssl/certs/ca-certificates.crt"] = file{mode: 0o644, data: caBundle}
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, n := range names {
		f := files[n]
		hdr := &tar.Header{Name: n, Mode: f.mode, ModTime: fixedTime, Typeflag: tar.TypeReg, Size: int64(len(f.data)), Format: tar.FormatPAX}
		if f.dir {
			hdr.Name, hdr.Typeflag, hdr.Size = n+"/", tar.TypeDir, 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
