package e2e

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/edgefleet/fleet/pkg/enrolltoken"
	"github.com/edgefleet/fleet/pkg/hub/enrollment"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/kubeconfig"
	"sigs.k8s.io/cluster-api/util/secret"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/hack/release/render"
	"github.com/edgefleet/fleet/internal/testkit/testenv"
)

// A cluster made with `clusterctl generate cluster` from fleet's release
// template (the "machines" flavor: a control-plane Machine and a
// MachineDeployment) provisions on real agents: both Machines Running with
// their nodeRef. The workload cluster's kubeconfig points at the node
// simulator's API server, since the template's endpoint is a name only a
// real site resolves.
func TestClusterFromTemplateOnRealAgents(t *testing.T) {
	ctx := context.Background()
	clusterctl := clusterctlBinary(t)
	ns := newNamespace(t)
	c := hub.Client
	gw, _ := startFleetHub(t, ns, freeAddr(t))
	dir := t.TempDir()
	if _, err := render.Write(dir, render.Options{Root: filepath.Join("..", ".."), Tag: "v0.1.0"}); err != nil {
		t.Fatal(err)
	}
	must(t, os.WriteFile(filepath.Join(dir, "clusterctl.yaml"), []byte("{}\n"), 0o600))
	cmd := exec.Command(clusterctl, "generate", "cluster", clusterName, "--from", filepath.Join(dir, "cluster-template-machines.yaml"),
		"--kubernetes-version", "v1.36.3", "--worker-machine-count", "1", "--target-namespace", ns, "--config", filepath.Join(dir, "clusterctl.yaml"))
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_CONFIG_HOME="+dir, "CLUSTERCTL_DISABLE_VERSIONCHECK=true")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	generated, err := cmd.Output()
	if err != nil {
		t.Fatalf("clusterctl generate cluster: %v\n%s", err, stderr.String())
	}
	applyAll(t, generated)
	cluster := &clusterv1.Cluster{}
	must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: clusterName}, cluster))
	setKubeconfig(t, cluster, kubeconfig.FromEnvTestConfig(workload.Config, cluster))

	token, _, err := enrollment.CreateToken(ctx, c, ns, enrolltoken.Options{TTL: time.Hour, HostNamespace: ns}, time.Now())
	must(t, err)
	agentBin, simBin := buildBinaries(t)
	wkc := kubeconfig.FromEnvTestConfig(workload.Config, cluster)
	hubURL, pin := "https://"+gw.Addr(), gw.CA().Pin()
	startAgent(t, "tpl-0", agentBin, simBin, hubURL, pin, token, wkc)
	startAgent(t, "tpl-1", agentBin, simBin, hubURL, pin, token, wkc)
	eventually(t, "the template's 2 Machines Running with nodeRef on the agents", func() error { return testenv.MachinesRunning(ctx, c, ns, 2) })
}

// applyAll creates every object of a multi-document YAML.
func applyAll(t *testing.T, docs []byte) {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(docs), 4096)
	for {
		u := &unstructured.Unstructured{}
		err := dec.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			return
		}
		must(t, err)
		if len(u.Object) == 0 {
			continue
		}
		if err := hub.Client.Create(context.Background(), u); err != nil {
			t.Fatalf("creating %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
}

// setKubeconfig makes the cluster's kubeconfig Secret hold kc, whether or
// not Cluster API has written one already.
func setKubeconfig(t *testing.T, cluster *clusterv1.Cluster, kc []byte) {
	t.Helper()
	ctx := context.Background()
	err := hub.Client.Create(ctx, kubeconfig.GenerateSecret(cluster, kc))
	if apierrors.IsAlreadyExists(err) {
		s := &corev1.Secret{}
		must(t, hub.Client.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: secret.Name(cluster.Name, secret.Kubeconfig)}, s))
		s.Data[secret.KubeconfigDataName] = kc
		err = hub.Client.Update(ctx, s)
	}
	must(t, err)
}
