package render_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/edgefleet/fleet/hack/release/render"
)

// capiVersion is the Cluster API release fleet's go.mod pins; its
// components are rendered from that module's config/ directories.
const capiVersion = "v1.14.2"

// clusterctlBinary is the real clusterctl `make test` builds into bin/; a
// run without it is skipped, except in CI.
func clusterctlBinary(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join(root, "bin", "clusterctl"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v: run `make clusterctl`", err)
		}
		t.Skipf("%v: run `make clusterctl`", err)
	}
	return p
}

// capiModuleDir is where the Go module cache holds Cluster API's module.
func capiModuleDir(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/cluster-api").Output()
	if err != nil {
		t.Fatalf("go list -m sigs.k8s.io/cluster-api: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// kustomize builds a kustomization directory, as Cluster API's own
// release does for its components.
func kustomize(t *testing.T, dir string) []byte {
	t.Helper()
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	b, err := resMap.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// certManagerStandIn is cert-manager's Issuer and Certificate CRDs with
// open schemas: what clusterctl init checks for (it creates a test Issuer
// and Certificate, and skips installing cert-manager when that works) and
// what Cluster API's components hold objects of. cert-manager's release
// manifest is fetched from GitHub, which these machines cannot reach.
func certManagerStandIn() []client.Object {
	var crds []client.Object
	for _, kind := range []string{"Issuer", "Certificate"} {
		plural := strings.ToLower(kind) + "s"
		crds = append(crds, &apiextensionsv1.CustomResourceDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: plural + ".cert-manager.io"},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{
				Group: "cert-manager.io", Scope: apiextensionsv1.NamespaceScoped,
				Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: kind, ListKind: kind + "List", Plural: plural, Singular: strings.ToLower(kind)},
				Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
					Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
						Type: "object", XPreserveUnknownFields: ptrTo(true)}}}},
			},
		})
	}
	return crds
}

func ptrTo[T any](v T) *T { return &v }

// `clusterctl init --infrastructure edge` installs fleet from a local
// repository (clusterctl's file provider) into a real API server that has
// no CRD at all, together with Cluster API's core, kubeadm bootstrap and
// kubeadm control-plane providers rendered with kustomize from the
// v1.14.2 module's own config/ directories. Stood in for: cert-manager,
// whose release manifest is downloaded from GitHub (here only its Issuer
// and Certificate CRDs are installed, which is what clusterctl checks; no
// cert-manager controller runs, so no webhook certificate is ever issued).
// Nothing runs the installed Deployments either: envtest has no kubelet.
func TestClusterctlInit(t *testing.T) {
	t.Parallel()
	clusterctl := clusterctlBinary(t)
	capi := capiModuleDir(t)
	repo := t.TempDir()
	capiMetadata, err := os.ReadFile(filepath.Join(capi, "metadata.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	providers := []struct{ name, typ, label, version, file, config string }{
		{"cluster-api", "CoreProvider", "cluster-api", capiVersion, "core-components.yaml", "core/config/default"},
		{"kubeadm", "BootstrapProvider", "bootstrap-kubeadm", capiVersion, "bootstrap-components.yaml", "bootstrap/kubeadm/config/default"},
		{"kubeadm", "ControlPlaneProvider", "control-plane-kubeadm", capiVersion, "control-plane-components.yaml", "controlplane/kubeadm/config/default"},
		{"edge", "InfrastructureProvider", "infrastructure-edge", "v0.1.0", "infrastructure-components.yaml", ""},
	}
	var config clusterctlConfig
	for _, p := range providers {
		dir := filepath.Join(repo, p.label, p.version)
		if p.config != "" {
			writeFile(t, filepath.Join(dir, p.file), kustomize(t, filepath.Join(capi, p.config)))
			writeFile(t, filepath.Join(dir, "metadata.yaml"), capiMetadata)
		} else if _, err := render.Write(dir, render.Options{Root: root, Tag: "v0.1.0"}); err != nil {
			t.Fatal(err)
		}
		config.Providers = append(config.Providers, clusterctlProvider{Name: p.name, Type: p.typ, URL: filepath.Join(dir, p.file)})
	}
	// A patch release beside it, for `clusterctl upgrade apply`.
	if _, err := render.Write(filepath.Join(repo, "infrastructure-edge", "v0.1.1"), render.Options{Root: root, Tag: "v0.1.1"}); err != nil {
		t.Fatal(err)
	}
	cfgYAML, err := yaml.Marshal(config)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(repo, "clusterctl.yaml"), cfgYAML)

	env := startBare(t)
	ctx := context.Background()
	for _, crd := range certManagerStandIn() {
		if err := env.Client.Create(ctx, crd); err != nil {
			t.Fatal(err)
		}
	}
	kubeconfig := filepath.Join(repo, "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	out := runClusterctl(t, clusterctl, repo, "init", "--config", filepath.Join(repo, "clusterctl.yaml"), "--kubeconfig", kubeconfig,
		"--infrastructure", "edge:v0.1.0", "--bootstrap", "kubeadm", "--control-plane", "kubeadm")
	for _, want := range []string{"Skipping installing cert-manager as it is already installed",
		`Installing provider="infrastructure-edge" version="v0.1.0" targetNamespace="fleet-system"`,
		`Installing provider="cluster-api" version="` + capiVersion + `"`} {
		if !strings.Contains(out, want) {
			t.Errorf("clusterctl init output lacks %q:\n%s", want, out)
		}
	}
	inventory := &unstructured.UnstructuredList{}
	inventory.SetGroupVersionKind(clusterctlv1.GroupVersion.WithKind("ProviderList"))
	if err := env.Client.List(ctx, inventory); err != nil {
		t.Fatalf("clusterctl's inventory: %v", err)
	}
	var got []string
	for _, p := range inventory.Items {
		v, _, _ := unstructured.NestedString(p.Object, "version")
		got = append(got, p.GetNamespace()+"/"+p.GetName()+"@"+v)
	}
	if !strings.Contains(strings.Join(got, " "), "fleet-system/infrastructure-edge@v0.1.0") || len(got) != 4 {
		t.Errorf("providers installed: %v", got)
	}
	d := &appsv1.Deployment{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "fleet-system", Name: "fleet-hub"}, d); err != nil {
		t.Fatal(err)
	}
	if d.Labels["cluster.x-k8s.io/provider"] != "infrastructure-edge" || d.Spec.Template.Spec.Containers[0].Image != render.ImageName+":v0.1.0" {
		t.Errorf("fleet-hub Deployment labels %v, image %s", d.Labels, d.Spec.Template.Spec.Containers[0].Image)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "edgemachines.infrastructure.cluster.x-k8s.io"}, crd); err != nil ||
		crd.Labels["cluster.x-k8s.io/v1beta2"] != "v1alpha1" {
		t.Errorf("EdgeMachine CRD: %v, labels %v", err, crd.Labels)
	}

	// The templates in the same repository are what `clusterctl generate
	// cluster --infrastructure edge --flavor …` finds.
	out = runClusterctl(t, clusterctl, repo, "generate", "cluster", "store-17", "--config", filepath.Join(repo, "clusterctl.yaml"),
		"--kubeconfig", kubeconfig, "--infrastructure", "edge:v0.1.0", "--flavor", "single-host", "--kubernetes-version", "v1.36.3",
		"--target-namespace", "default")
	if !strings.Contains(out, "kind: KubeadmControlPlane") || !strings.Contains(out, "taints: []") {
		t.Errorf("generate cluster --flavor single-host:\n%s", out)
	}

	// The topology flavor brings fleet's ClusterClass with it (that Cluster
	// API's webhooks accept the class is pkg/hub/embedded/clusterapi's test:
	// nothing serves the webhooks clusterctl installed here).
	out = runClusterctlEnv(t, clusterctl, repo, []string{"EDGE_SITE=store-18"}, "generate", "cluster", "store-18", "--config", filepath.Join(repo, "clusterctl.yaml"),
		"--kubeconfig", kubeconfig, "--infrastructure", "edge:v0.1.0", "--flavor", "topology", "--kubernetes-version", "v1.36.3",
		"--target-namespace", "default")
	var kinds []string
	for _, u := range parseDocs(t, []byte(out)) {
		kinds = append(kinds, u.GetKind()+"/"+u.GetName())
	}
	slices.Sort(kinds)
	if want := []string{"Cluster/store-18", "ClusterClass/edge", "EdgeClusterTemplate/edge-cluster", "EdgeMachineTemplate/edge-control-plane",
		"EdgeMachineTemplate/edge-worker", "KubeadmConfigTemplate/edge-worker", "KubeadmControlPlaneTemplate/edge-control-plane"}; !slices.Equal(kinds, want) {
		t.Errorf("generate cluster --flavor topology made %v, want %v", kinds, want)
	}
	if !strings.Contains(out, "value: store-18") {
		t.Errorf("generate cluster --flavor topology did not set the site variable:\n%s", out)
	}

	// The upgrade docs/INSTALL.md gives: plan, then apply.
	out = runClusterctl(t, clusterctl, repo, "upgrade", "plan", "--config", filepath.Join(repo, "clusterctl.yaml"), "--kubeconfig", kubeconfig)
	if !strings.Contains(out, "infrastructure-edge") || !strings.Contains(out, "v0.1.1") {
		t.Errorf("clusterctl upgrade plan does not offer v0.1.1:\n%s", out)
	}
	runClusterctl(t, clusterctl, repo, "upgrade", "apply", "--config", filepath.Join(repo, "clusterctl.yaml"), "--kubeconfig", kubeconfig,
		"--infrastructure", "fleet-system/edge:v0.1.1")
	if err := env.Client.List(ctx, inventory); err != nil {
		t.Fatal(err)
	}
	got = got[:0]
	for _, p := range inventory.Items {
		v, _, _ := unstructured.NestedString(p.Object, "version")
		got = append(got, p.GetNamespace()+"/"+p.GetName()+"@"+v)
	}
	if !strings.Contains(strings.Join(got, " "), "fleet-system/infrastructure-edge@v0.1.1") {
		t.Errorf("providers after the upgrade: %v", got)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "fleet-system", Name: "fleet-hub"}, d); err != nil {
		t.Fatal(err)
	}
	if img := d.Spec.Template.Spec.Containers[0].Image; img != render.ImageName+":v0.1.1" {
		t.Errorf("fleet-hub image after the upgrade: %s", img)
	}
}

type clusterctlConfig struct {
	Providers []clusterctlProvider `json:"providers"`
}

type clusterctlProvider struct {
	Name string `json:"name"`
	Type string `json:"type"`
	URL  string `json:"url"`
}

// runClusterctl runs clusterctl with a home of its own (no user config or
// overrides) and no version check against GitHub; it returns stdout and
// stderr together.
func runClusterctl(t *testing.T, clusterctl, home string, args ...string) string {
	t.Helper()
	return runClusterctlEnv(t, clusterctl, home, nil, args...)
}

// runClusterctlEnv is runClusterctl with environment variables added:
// clusterctl takes a template's variables from its environment.
func runClusterctlEnv(t *testing.T, clusterctl, home string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(clusterctl, args...)
	cmd.Env = append(append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home, "CLUSTERCTL_DISABLE_VERSIONCHECK=true"), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("clusterctl %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}
