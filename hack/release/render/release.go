package render

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/edgefleet/fleet/pkg/clustertemplate"
)

// Files clusterctl reads from a provider's release.
const (
	ComponentsFile = "infrastructure-components.yaml"
	MetadataFile   = "metadata.yaml"
)

// ImageName is the hub's image as the manifests name it; kustomize's
// images: entries match it.
const ImageName = "ghcr.io/edgefleet/fleet-hub"

// Options say which checkout to render and which image the hub runs.
type Options struct {
	// Root is fleet's checkout (holding manifests/ and metadata.yaml).
	Root string
	// Image is the repository the hub's image is pulled from (default
	// ImageName), Tag its tag, Digest (sha256:…) pins it when set.
	Image, Tag, Digest string
}

// Write renders every artifact into dir and returns the files' paths.
func Write(dir string, o Options) ([]string, error) {
	files := map[string][]byte{}
	var err error
	if files[ComponentsFile], err = Components(o); err != nil {
		return nil, err
	}
	if files[MetadataFile], err = Metadata(o.Root); err != nil {
		return nil, err
	}
	for _, f := range clustertemplate.Flavors {
		if files[f.File()], err = f.Template(); err != nil {
			return nil, err
		}
	}
	files[clustertemplate.ClassFile] = clustertemplate.Class()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var written []string
	for _, name := range append([]string{ComponentsFile, MetadataFile}, templateFiles()...) {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, files[name], 0o644); err != nil {
			return nil, err
		}
		written = append(written, p)
	}
	return written, nil
}

func templateFiles() []string {
	var names []string
	for _, f := range clustertemplate.Flavors {
		names = append(names, f.File())
	}
	return append(names, clustertemplate.ClassFile)
}

// Components is manifests/release built by kustomize, with the image set
// through an overlay's images: entry, as `kustomize edit set image` would.
func Components(o Options) ([]byte, error) {
	if o.Tag == "" && o.Digest == "" {
		return nil, errors.New("the hub image needs a tag or a digest")
	}
	base, err := filepath.Abs(filepath.Join(o.Root, "manifests", "release"))
	if err != nil {
		return nil, err
	}
	overlay, err := os.MkdirTemp("", "fleet-release-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(overlay)
	// kustomize takes only relative paths to other kustomizations.
	rel, err := filepath.Rel(overlay, base)
	if err != nil {
		return nil, err
	}
	image := types.Image{Name: ImageName, NewName: o.Image, NewTag: o.Tag, Digest: o.Digest}
	k, err := yaml.Marshal(types.Kustomization{Resources: []string{rel}, Images: []types.Image{image}})
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), k, 0o644); err != nil {
		return nil, err
	}
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), overlay)
	if err != nil {
		return nil, fmt.Errorf("kustomize build manifests/release: %w", err)
	}
	return resMap.AsYaml()
}

// Metadata is the checkout's metadata.yaml, refused unless clusterctl
// would accept it (strict fields, the Metadata kind, a release series).
func Metadata(root string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(root, MetadataFile))
	if err != nil {
		return nil, err
	}
	md := &v1alpha3.Metadata{}
	if err := yaml.UnmarshalStrict(b, md); err != nil {
		return nil, fmt.Errorf("%s: %w", MetadataFile, err)
	}
	if md.APIVersion != v1alpha3.GroupVersion.String() || md.Kind != "Metadata" || len(md.ReleaseSeries) == 0 {
		return nil, fmt.Errorf("%s: want apiVersion %s, kind Metadata and at least one release series", MetadataFile, v1alpha3.GroupVersion)
	}
	return b, nil
}
