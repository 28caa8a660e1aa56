package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Packages the plugin must not link: controller-runtime's client and
// cli-runtime's kubectl flags both bring client-go's kubernetes/scheme
// (every built-in API group), discovery's OpenAPI models and kustomize.
// docs/PERFORMANCE.md, "Binary sizes: kubectl fleet".
var heavy = []string{
	"k8s.io/client-go/kubernetes",
	"sigs.k8s.io/controller-runtime",
	"k8s.io/cli-runtime/pkg/genericclioptions",
	"k8s.io/cli-runtime/pkg/resource",
	"sigs.k8s.io/kustomize",
	"k8s.io/client-go/discovery",
}

// The plugin links none of them, even indirectly (depguard's `cli` rule
// sees only direct imports).
func TestLinksNoHeavyPackages(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, h := range heavy {
			if pkg == h || strings.HasPrefix(pkg, h+"/") {
				t.Errorf("kubectl-fleet links %s", pkg)
			}
		}
	}
}

// maxUnstripped is issue 33's budget for `go build ./cmd/kubectl-fleet`
// (40 MB), symbol table and DWARF included.
const maxUnstripped = 40_000_000

func TestUnstrippedSize(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "kubectl-fleet")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > maxUnstripped {
		t.Errorf("kubectl-fleet is %.1f MB unstripped, over the %.0f MB budget", float64(fi.Size())/1e6, float64(maxUnstripped)/1e6)
	}
}
