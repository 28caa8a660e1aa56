package render_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/hack/release/render"
	"github.com/edgefleet/fleet/internal/testkit/testenv"
)

const root = "../../.."

// startBare starts an API server with no CRD at all; it skips outside CI
// when the binaries are not built.
func startBare(t *testing.T) *testenv.Env {
	t.Helper()
	env, err := testenv.Start(context.Background(), testenv.Options{APIServerOnly: true, NoCRDs: true})
	if errors.Is(err, testenv.ErrNoAssets) && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	return env
}

var variable = regexp.MustCompile(`\$\{([A-Za-z0-9_]+)(:=([^}]*))?\}`)

// substitute does what clusterctl does to components with no variable
// set: each ${NAME:=default} becomes its default. A variable without one
// fails the test, since clusterctl init would refuse it unset.
func substitute(t *testing.T, b []byte) []byte {
	t.Helper()
	return variable.ReplaceAllFunc(b, func(m []byte) []byte {
		sm := variable.FindSubmatch(m)
		if len(sm[3]) == 0 {
			t.Errorf("variable %s has no default (clusterctl counts an empty one as none)", sm[1])
		}
		return sm[3]
	})
}

func parseDocs(t *testing.T, b []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if err.Error() == "EOF" {
				return objs
			}
			t.Fatal(err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

// warnings collects the API server's warnings (Pod Security among them).
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

// `kubectl apply --server-side -k manifests/default` installs the hub, and
// infrastructure-components.yaml, with clusterctl's defaults, is accepted
// whole over it by a real API server (server-side apply, the CRDs included), draws
// no Pod Security warning in the namespace that enforces "restricted", and
// the hub's pod spec is the one docs/INSTALL.md describes.
func TestComponentsApply(t *testing.T) {
	t.Parallel()
	comps, err := render.Components(render.Options{Root: root, Image: "registry.example/fleet-hub", Tag: "v0.1.0", Digest: "sha256:" + strings.Repeat("ab", 32)})
	if err != nil {
		t.Fatal(err)
	}
	objs := parseDocs(t, substitute(t, comps))
	kinds := map[string]int{}
	for _, u := range objs {
		kinds[u.GetKind()]++
		if u.GetLabels()["cluster.x-k8s.io/provider"] != "infrastructure-edge" {
			t.Errorf("%s %s lacks the provider label clusterctl gives infrastructure-edge", u.GetKind(), u.GetName())
		}
		if ns := u.GetNamespace(); ns != "" && ns != "fleet-system" {
			t.Errorf("%s %s in namespace %s: clusterctl wants one", u.GetKind(), u.GetName(), ns)
		}
	}
	for kind, n := range map[string]int{"Namespace": 1, "CustomResourceDefinition": 8, "Deployment": 1, "PodDisruptionBudget": 1, "NetworkPolicy": 1} {
		if kinds[kind] != n {
			t.Errorf("%d %s, want %d (all: %v)", kinds[kind], kind, n, kinds)
		}
	}

	env := startBare(t)
	ctx := context.Background()
	// First the install without clusterctl, as docs/INSTALL.md gives it,
	// with the real kubectl; the release's components then go over it.
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	kubectl := exec.Command(filepath.Join(root, "bin", "k8s", "kubectl"), "--kubeconfig", kubeconfig, "apply", "--server-side", "-k", filepath.Join(root, "manifests", "default"))
	if out, err := kubectl.CombinedOutput(); err != nil || !strings.Contains(string(out), "deployment.apps/fleet-hub serverside-applied") {
		t.Fatalf("kubectl apply --server-side -k manifests/default: %v\n%s", err, out)
	}
	w := &warnings{}
	cfg := rest.CopyConfig(env.Config)
	cfg.WarningHandler = w
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	// As kubectl apply --server-side does: the Namespace and the CRDs
	// first, since the rest refer to them.
	slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int {
		rank := func(u *unstructured.Unstructured) int {
			return map[string]int{"Namespace": 0, "CustomResourceDefinition": 1}[u.GetKind()] + 2*boolInt(u.GetKind() != "Namespace" && u.GetKind() != "CustomResourceDefinition")
		}
		return rank(a) - rank(b)
	})
	for _, u := range objs {
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("install-test"), client.ForceOwnership); err != nil {
			t.Fatalf("%s %s rejected: %v", u.GetKind(), u.GetName(), err)
		}
	}
	if len(w.list) > 0 {
		t.Errorf("the API server warned: %q", w.list)
	}
	crds := &apiextensionsv1.CustomResourceDefinitionList{}
	if err := c.List(ctx, crds); err != nil || len(crds.Items) != 8 {
		t.Errorf("%d CRDs stored, %v", len(crds.Items), err)
	}
	checkDeployment(t, c)
	checkPolicies(t, c)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func checkDeployment(t *testing.T, c client.Client) {
	t.Helper()
	d := &appsv1.Deployment{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "fleet-system", Name: "fleet-hub"}, d); err != nil {
		t.Fatal(err)
	}
	pod := d.Spec.Template.Spec
	if len(pod.Containers) != 1 || pod.Containers[0].Name != "manager" {
		t.Fatalf("containers %v: clusterctl wants one named manager", pod.Containers)
	}
	m := pod.Containers[0]
	if want := "registry.example/fleet-hub:v0.1.0@sha256:" + strings.Repeat("ab", 32); m.Image != want {
		t.Errorf("image %s, want %s", m.Image, want)
	}
	for _, a := range []string{"--gateway-dns-names=fleet-hub-gateway.fleet-system.svc", "--gateway-advertise-url=https://fleet-hub-gateway.fleet-system.svc",
		"--proxy-advertise-url=http://fleet-hub-proxy.fleet-system.svc:7444", "--zap-log-level=info", "--leader-elect=true",
		"--proxy-peer-address=$(POD_IP):7444"} {
		if !slices.Contains(m.Args, a) {
			t.Errorf("args %q lack %q", m.Args, a)
		}
	}
	// Replicas reach each other's proxy at the pod IP (Deployment pods have
	// no DNS names of their own); the replica name is the pod's.
	for name, field := range map[string]string{"POD_IP": "status.podIP", "POD_NAME": "metadata.name"} {
		if !slices.ContainsFunc(m.Env, func(e corev1.EnvVar) bool {
			return e.Name == name && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == field
		}) {
			t.Errorf("env %v: no %s from %s", m.Env, name, field)
		}
	}
	if p := m.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.String() != "healthz" {
		t.Errorf("liveness probe %+v", p)
	}
	if p := m.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" || p.HTTPGet.Port.String() != "healthz" {
		t.Errorf("readiness probe %+v", p)
	}
	if !slices.ContainsFunc(m.Ports, func(p corev1.ContainerPort) bool { return p.Name == "healthz" && p.ContainerPort == 9440 }) {
		t.Errorf("ports %v: no healthz 9440 (--health-probe-bind-address)", m.Ports)
	}
	req, lim := m.Resources.Requests, m.Resources.Limits
	if !req.Memory().Equal(resource.MustParse("512Mi")) || !lim.Memory().Equal(resource.MustParse("1Gi")) ||
		!req.Cpu().Equal(resource.MustParse("250m")) || !lim.Cpu().IsZero() {
		t.Errorf("resources %+v, want docs/INSTALL.md's sizing for 10,000 agents", m.Resources)
	}
	sc := m.SecurityContext
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container securityContext %+v", sc)
	}
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != 65532 ||
		psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext %+v", psc)
	}
	aa := pod.Affinity
	if aa == nil || aa.PodAntiAffinity == nil || len(aa.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 ||
		aa.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.TopologyKey != "kubernetes.io/hostname" {
		t.Errorf("affinity %+v: want replicas spread over nodes", aa)
	}
	if !slices.ContainsFunc(m.VolumeMounts, func(v corev1.VolumeMount) bool { return v.MountPath == "/tmp" }) {
		t.Errorf("no writable /tmp under a read-only root: %v", m.VolumeMounts)
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
		t.Errorf("replicas %v", d.Spec.Replicas)
	}
}

func checkPolicies(t *testing.T, c client.Client) {
	t.Helper()
	ctx := context.Background()
	pdb := &policyv1.PodDisruptionBudget{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "fleet-system", Name: "fleet-hub"}, pdb); err != nil ||
		pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget %+v, %v", pdb.Spec, err)
	}
	np := &networkingv1.NetworkPolicy{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "fleet-system", Name: "fleet-hub"}, np); err != nil {
		t.Fatal(err)
	}
	var proxyFrom []string
	for _, r := range np.Spec.Ingress {
		for _, p := range r.Ports {
			if p.Port.String() != "proxy" {
				continue
			}
			if len(r.From) == 0 {
				t.Error("the proxy port is open to every pod")
			}
			for _, f := range r.From {
				proxyFrom = append(proxyFrom, fmt.Sprint(f.NamespaceSelector, f.PodSelector))
			}
		}
	}
	if s := strings.Join(proxyFrom, " "); !strings.Contains(s, "capi-system") || !strings.Contains(s, "capi-kubeadm-control-plane-system") ||
		!strings.Contains(s, "app.kubernetes.io/name: fleet-hub") {
		t.Errorf("the proxy port is open to %s; want Cluster API's namespaces and the hub's replicas", s)
	}
	svc := &corev1.Service{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "fleet-system", Name: "fleet-hub-gateway"}, svc); err != nil || svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		t.Errorf("gateway Service type %s, %v", svc.Spec.Type, err)
	}
}

// Write renders every file clusterctl reads from a release; metadata.yaml
// is the checkout's, and a malformed one is refused.
func TestWrite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	files, err := render.Write(dir, render.Options{Root: root, Tag: "v0.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
	}
	want := []string{"infrastructure-components.yaml", "metadata.yaml", "cluster-template.yaml", "cluster-template-single-host.yaml", "cluster-template-machines.yaml",
		"cluster-template-topology.yaml", "clusterclass-edge.yaml"}
	if !slices.Equal(names, want) {
		t.Errorf("wrote %v, want %v", names, want)
	}
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "metadata.yaml"), []byte("apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\nreleaseSeries:\n- major: 0\n  minor: 1\n  contrac: v1beta2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := render.Metadata(bad); err == nil || !strings.Contains(err.Error(), "contrac") {
		t.Errorf("misspelt field accepted: %v", err)
	}
	if _, err := render.Components(render.Options{Root: root}); err == nil {
		t.Error("components without an image tag or digest")
	}
}
