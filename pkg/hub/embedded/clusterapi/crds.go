package clusterapi

import (
	"bytes"
	"compress/gzip"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// crds.yaml.gz is written by `make generate` (hack/capicrds).
//
//go:embed crds.yaml.gz
var bundledCRDs []byte

// ContractLabel marks CRDs as implementing the v1beta2 contract; kustomize
// adds it in real installs and Cluster API looks for it.
const ContractLabel = "cluster.x-k8s.io/v1beta2"

// Groups of the bundled CRDs.
const (
	CoreGroup         = "cluster.x-k8s.io"
	BootstrapGroup    = "bootstrap.cluster.x-k8s.io"
	ControlPlaneGroup = "controlplane.cluster.x-k8s.io"
)

// CRDs returns Cluster API's CRDs whose group is one of groups, or all of
// them when groups is empty. Core includes the addons, ipam and runtime
// groups that core's reconcilers also watch.
func CRDs(groups ...string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	zr, err := gzip.NewReader(bytes.NewReader(bundledCRDs))
	if err != nil {
		return nil, fmt.Errorf("reading bundled Cluster API CRDs: %w", err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(zr, 1<<20)
	var out []*apiextensionsv1.CustomResourceDefinition
	for {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := dec.Decode(crd); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("decoding bundled Cluster API CRDs: %w", err)
		}
		if crd.Name == "" || !wanted(crd.Spec.Group, groups) {
			continue
		}
		if crd.Labels == nil {
			crd.Labels = map[string]string{}
		}
		crd.Labels[ContractLabel] = "v1beta2"
		out = append(out, crd)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no bundled Cluster API CRDs of groups %v", groups)
	}
	return out, nil
}

func wanted(group string, groups []string) bool {
	if len(groups) == 0 {
		return true
	}
	for _, g := range groups {
		if g == CoreGroup && (group == CoreGroup || strings.HasSuffix(group, "."+CoreGroup) &&
			group != BootstrapGroup && group != ControlPlaneGroup) {
			return true
		}
		if group == g {
			return true
		}
	}
	return false
}
