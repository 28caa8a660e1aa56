package ociref_test

import (
	"strings"
	"testing"

	"github.com/edgefleet/fleet/pkg/contract/ociref"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]ociref.Ref{
		"oci://registry.example.com/edge/kubernetes:v1.36.3":         {Registry: "registry.example.com", Repository: "edge/kubernetes"},
		"oci://localhost:5000/k8s@sha256:" + strings.Repeat("a", 64): {Registry: "localhost:5000", Repository: "k8s"},
		"oci://ghcr.io/org/k8s-node":                                 {Registry: "ghcr.io", Repository: "org/k8s-node"},
		"oci://r:5000/k8s:v1.36.3@sha256:" + strings.Repeat("b", 64): {Registry: "r:5000", Repository: "k8s"},
	} {
		got, err := ociref.Parse(in)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"https://registry/k8s", "oci://registry", "oci:///k8s", "oci://registry/K8S", "oci://user@registry/k8s", "oci://registry/k8s/../x"} {
		if _, err := ociref.Parse(in); err == nil {
			t.Errorf("Parse(%q) took it", in)
		}
	}
}
