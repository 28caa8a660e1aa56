package main

import (
	"compress/gzip"
	"fmt"
	"os"
	"path"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/edgefleet/fleet/hack/tools/k8s/ocilayout"
)

// imageSpec says what goes into one image.
type imageSpec struct {
	name       string   // name and tag, e.g. registry.k8s.io/pause:3.10.2
	binaries   []string // host files, put at binDir/<base name>
	entrypoint string   // empty: the binary when there is one, none otherwise
	// hostFiles are host files (a binary from a Debian package, a plugin it
	// dlopens) put at the same path in the image, with the libraries they link.
	hostFiles []string
	// symlinks are extra links, path in the image -> target.
	symlinks map[string]string
}

// searchPath is the image's PATH.
const searchPath = "PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"

// buildArchive writes the image spec describes to out as an OCI layout
// tarball named for it, and returns the image's ID (its config's
// digest, which importing keeps). out is replaced only once it is complete.
func buildArchive(spec imageSpec, out string) (v1.Hash, error) {
	tag, err := name.NewTag(spec.name)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("image name %q: %w", spec.name, err)
	}
	files, err := layerFiles(spec.binaries, spec.hostFiles)
	if err != nil {
		return v1.Hash{}, err
	}
	// The layer is compressed once, into a file next to out, instead of on
	// every read go-containerregistry makes of an uncompressed one.
	layerFile, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".layer-*")
	if err != nil {
		return v1.Hash{}, fmt.Errorf("creating the layer: %w", err)
	}
	defer os.Remove(layerFile.Name())
	zw, err := gzip.NewWriterLevel(layerFile, gzip.BestSpeed)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := writeLayerTar(zw, files, spec.symlinks); err != nil {
		layerFile.Close()
		return v1.Hash{}, err
	}
	if err := zw.Close(); err != nil {
		layerFile.Close()
		return v1.Hash{}, fmt.Errorf("writing the layer: %w", err)
	}
	if err := layerFile.Close(); err != nil {
		return v1.Hash{}, fmt.Errorf("writing the layer: %w", err)
	}
	layer, err := tarball.LayerFromFile(layerFile.Name(), tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return v1.Hash{}, fmt.Errorf("reading back the layer: %w", err)
	}

	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: fixedModTime}, CreatedBy: "nodeimage build"},
	})
	if err != nil {
		return v1.Hash{}, fmt.Errorf("adding the layer: %w", err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return v1.Hash{}, err
	}
	cfg = cfg.DeepCopy()
	cfg.Architecture = "amd64"
	cfg.OS = "linux"
	cfg.Created = v1.Time{Time: fixedModTime}
	cfg.Config.Env = []string{searchPath}
	switch {
	case spec.entrypoint != "":
		cfg.Config.Entrypoint = []string{spec.entrypoint}
	case len(spec.binaries) == 1:
		cfg.Config.Entrypoint = []string{path.Join(binDir, filepath.Base(spec.binaries[0]))}
	}
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("setting the image config: %w", err)
	}
	id, err := img.ConfigName()
	if err != nil {
		return v1.Hash{}, err
	}

	if err := ocilayout.WriteImage(out, tag, img); err != nil {
		return v1.Hash{}, err
	}
	return id, nil
}
