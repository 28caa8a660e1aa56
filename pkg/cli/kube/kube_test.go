package kube

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

func TestExplainMissingCRDs(t *testing.T) {
	c := &Connection{Context: "prod-hub", Config: &rest.Config{Host: "https://10.0.0.1:6443"}}
	err := c.Explain(fmt.Errorf("listing: %w", &meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: "infrastructure.cluster.x-k8s.io", Kind: "EdgeHost"}}))
	for _, want := range []string{"fleet's CRDs are not installed", `context "prod-hub"`, "kubectl apply -k manifests/default"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Explain() = %v, want it to say %q", err, want)
		}
	}
	if c.Explain(nil) != nil {
		t.Error("Explain(nil) != nil")
	}
}
