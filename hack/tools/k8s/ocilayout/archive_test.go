package ocilayout

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// An archive names its image as containerd looks it up (docker.io/…, not
// go-containerregistry's index.docker.io/…) and as OCI's ref.name; it reads
// back, and other users may read it.
func TestWriteImageNamesItForContainerd(t *testing.T) {
	for ref, want := range map[string]string{
		"registry.k8s.io/pause:3.10.2": "registry.k8s.io/pause:3.10.2",
		"pause:3.10":                   "docker.io/library/pause:3.10",
		"docker.io/acme/app:v1":        "docker.io/acme/app:v1",
		"localhost:5000/app:v2":        "localhost:5000/app:v2",
	} {
		t.Run(ref, func(t *testing.T) {
			tag, err := name.NewTag(ref)
			if err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(t.TempDir(), "image.tar")
			if err := WriteImage(out, tag, empty.Image); err != nil {
				t.Fatal(err)
			}
			if info, err := os.Stat(out); err != nil || info.Mode().Perm() != 0o644 {
				t.Errorf("archive mode %v (%v), want 0644", info.Mode(), err)
			}
			leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(out), ".*"))
			if len(leftovers) != 0 {
				t.Errorf("temporary files left: %q", leftovers)
			}
			dir := t.TempDir()
			if err := Extract(out, dir); err != nil {
				t.Fatal(err)
			}
			idx, err := layout.ImageIndexFromPath(dir)
			if err != nil {
				t.Fatal(err)
			}
			top, err := idx.IndexManifest()
			if err != nil {
				t.Fatal(err)
			}
			if len(top.Manifests) != 1 {
				t.Fatalf("%d manifests, want 1", len(top.Manifests))
			}
			a := top.Manifests[0].Annotations
			if a["io.containerd.image.name"] != want || a["org.opencontainers.image.ref.name"] != tag.TagStr() {
				t.Errorf("annotations %v, want containerd's name %s", a, want)
			}
		})
	}
}
