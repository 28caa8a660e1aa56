package main

import (
	"fmt"
	"os"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/edgefleet/fleet/hack/tools/k8s/ocilayout"
)

// readArchive opens the image index an archive written by build holds; the
// layout is extracted into a temporary directory, removed by the returned
// function.
func readArchive(archive string) (v1.ImageIndex, func(), error) {
	dir, err := os.MkdirTemp("", "hubimage-")
	if err != nil {
		return nil, nil, err
	}
	cleanup := func() { os.RemoveAll(dir) }
	if err := ocilayout.Extract(archive, dir); err != nil {
		cleanup()
		return nil, nil, err
	}
	root, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("%s is not an OCI layout: %w", archive, err)
	}
	m, err := root.IndexManifest()
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	if len(m.Manifests) != 1 {
		cleanup()
		return nil, nil, fmt.Errorf("%s holds %d entries, want the one image index hubimage build writes", archive, len(m.Manifests))
	}
	idx, err := root.ImageIndex(m.Manifests[0].Digest)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	return idx, cleanup, nil
}

// push uploads the archive's image index to the registry, with the
// credentials docker login (or crane auth login) stored.
func push(archive, to string) (v1.Hash, error) {
	ref, err := name.ParseReference(to)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("--to %q: %w", to, err)
	}
	idx, cleanup, err := readArchive(archive)
	if err != nil {
		return v1.Hash{}, err
	}
	defer cleanup()
	if err := remote.WriteIndex(ref, idx, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return v1.Hash{}, fmt.Errorf("pushing to %s: %w", ref, err)
	}
	return idx.Digest()
}
