package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/tools/clientcmd"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	clusterctlconfig "sigs.k8s.io/cluster-api/cmd/clusterctl/config"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/internal/testkit"
	"github.com/edgefleet/fleet/internal/testkit/testenv"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/hub/embedded/clusterapi"
)

// A running fleet cluster moves to another hub cluster with the real
// `clusterctl move`: its Cluster API objects, EdgeMachines and every
// EdgeHost of the namespace go to the target, the source hub ends its
// agents' sessions without revoking them (clusterctl marks what it deletes
// for a move), and once the gateway address leads to the new hub the agents
// reconnect there as the same hosts: no enrollment, no reset, every Machine
// Running with its nodeRef under the target's own Cluster API.
//
// The source is this suite's hub cluster and an in-process fleet hub; the
// target is `fleet-hub dev` (its own kube-apiserver and etcd, Cluster API
// and the fleet hub) started with the source's hub CA, as docs/OPERATING.md
// has the operator install it. The agents dial a forwarder that stands for
// the gateway's DNS name, re-pointed after the move.
func TestClusterctlMove(t *testing.T) {
	ctx := context.Background()
	clusterctl := clusterctlBinary(t)
	ns := newNamespace(t)
	c := hub.Client
	gw, _ := startFleetHub(t, ns, freeAddr(t))
	name := testkit.NewForwarder(t, gw.Addr())
	hubURL := "https://" + name.Addr()
	agentBin, simBin := buildBinaries(t)
	_, wkc := createCluster(t, ns)
	cpToken, wToken := roleTokens(t, ns)
	pin := gw.CA().Pin()
	agents := []*agentProc{
		startAgent(t, "mv-cp-0", agentBin, simBin, hubURL, pin, cpToken, wkc),
		startAgent(t, "mv-w-0", agentBin, simBin, hubURL, pin, wToken, wkc),
		startAgent(t, "mv-spare", agentBin, simBin, hubURL, pin, wToken, wkc),
	}
	eventually(t, "3 hosts Available", func() error { return testenv.HostsAvailable(ctx, c, ns, 3) })
	createCPMachine(t, c, ns, "cp-0", nil)
	eventually(t, "the control plane Running", func() error { return testenv.MachinesRunning(ctx, c, ns, 1) })
	createWorkerMachine(t, c, ns, "worker-a", nil)
	eventually(t, "2 Machines Running with nodeRef", func() error { return testenv.MachinesRunning(ctx, c, ns, 2) })
	claims, err := hostClaims(ctx, ns)
	must(t, err)
	t.Logf("hosts and their claims: %v", claims)

	// The target hub cluster, installed with the source's hub CA.
	target := startDevHub(t, build(t, t.TempDir(), "./cmd/fleet-hub", "fleet-hub"))
	ca := &corev1.Secret{}
	must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "fleet-hub-ca"}, ca))
	target.useCA(t, ca)
	srcKubeconfig := filepath.Join(t.TempDir(), "source.kubeconfig")
	must(t, hub.WriteKubeconfig(srcKubeconfig))
	for _, cl := range []client.Client{c, target.client} {
		registerProviders(t, cl)
	}

	since := logOffsets(agents)
	out := runClusterctl(t, clusterctl, "move", "--kubeconfig", srcKubeconfig, "--to-kubeconfig", target.kubeconfig, "--namespace", ns)
	t.Logf("clusterctl move:\n%s", out)
	name.Repoint(target.gateway)

	tc := target.client
	eventually(t, "the same hosts connected to the new hub, claimed as before", func() error { return sameFleetOn(ctx, tc, ns, claims) })
	eventually(t, "2 Machines Running with nodeRef on the new hub", func() error { return testenv.MachinesRunning(ctx, tc, ns, 2) })
	cl := &clusterv1.Cluster{}
	must(t, tc.Get(ctx, client.ObjectKey{Namespace: ns, Name: clusterName}, cl))
	if cl.Spec.Paused != nil && *cl.Spec.Paused {
		t.Errorf("the moved Cluster is still paused")
	}
	for _, l := range []client.ObjectList{&infrav1.EdgeHostList{}, &infrav1.EdgeMachineList{}, &clusterv1.MachineList{}} {
		must(t, c.List(ctx, l, client.InNamespace(ns)))
		if n := meta.LenList(l); n != 0 {
			t.Errorf("%d %T left on the source hub cluster", n, l)
		}
	}
	untouched(t, agents, since, claims)
	for _, a := range agents {
		if !strings.Contains(a.log.String()[since[a.name]:], "moved to another hub cluster") {
			t.Errorf("agent %s was not told its EdgeHost moved:\n%s", a.name, tail(a.log.String()[since[a.name]:], 3000))
		}
	}
}

// sameFleetOn is sameFleet on another hub cluster: the hosts of want, each
// connected and claimed as before.
func sameFleetOn(ctx context.Context, c client.Client, ns string, want map[string]string) error {
	hosts := &infrav1.EdgeHostList{}
	if err := c.List(ctx, hosts, client.InNamespace(ns)); err != nil {
		return err
	}
	got := map[string]string{}
	for _, h := range hosts.Items {
		got[h.Name] = ""
		if h.Spec.ClaimRef != nil {
			got[h.Name] = h.Spec.ClaimRef.Name
		}
		if c := conditions.Get(&h, infrav1.AgentConnectedCondition); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("host %s not connected (phase %s, hubReplica %q, AgentConnected %+v)", h.Name, h.Status.Phase, h.Status.HubReplica, c)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		return fmt.Errorf("hosts and claims %v, want %v", got, want)
	}
	return nil
}

// registerProviders records fleet and Cluster API as installed in
// clusterctl's inventory and labels their CRDs, as `clusterctl init` does
// (it cannot run here: the providers' Deployments and webhooks would not
// run on these API servers, and their CRDs are already in place).
func registerProviders(t *testing.T, c client.Client) {
	t.Helper()
	ctx := context.Background()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(clusterctlconfig.ClusterctlAPIManifest), 4096)
	for {
		u := &unstructured.Unstructured{}
		err := dec.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			break
		}
		must(t, err)
		if len(u.Object) == 0 {
			continue
		}
		if err := c.Create(ctx, u); client.IgnoreAlreadyExists(err) != nil {
			t.Fatalf("installing clusterctl's inventory CRD: %v", err)
		}
	}
	crds := &apiextensionsv1.CustomResourceDefinitionList{}
	must(t, c.List(ctx, crds))
	for i := range crds.Items {
		p := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"`+clusterctlv1.ClusterctlLabel+`":""}}}`))
		must(t, c.Patch(ctx, &crds.Items[i], p))
	}
	providers := &unstructured.UnstructuredList{}
	providers.SetGroupVersionKind(clusterctlv1.GroupVersion.WithKind("ProviderList"))
	eventually(t, "clusterctl's Provider kind served", func() error { return c.List(ctx, providers) })
	for _, p := range []struct{ ns, name, typ, version string }{
		{"capi-system", "cluster-api", string(clusterctlv1.CoreProviderType), capiVersion},
		{"capi-kubeadm-bootstrap-system", "kubeadm", string(clusterctlv1.BootstrapProviderType), capiVersion},
		{"capi-kubeadm-control-plane-system", "kubeadm", string(clusterctlv1.ControlPlaneProviderType), capiVersion},
		{"fleet-system", "edge", string(clusterctlv1.InfrastructureProviderType), "v0.1.0"},
	} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: p.ns}}); client.IgnoreAlreadyExists(err) != nil {
			t.Fatal(err)
		}
		prov := &unstructured.Unstructured{Object: map[string]any{
			"providerName": p.name, "type": p.typ, "version": p.version,
		}}
		prov.SetGroupVersionKind(clusterctlv1.GroupVersion.WithKind("Provider"))
		prov.SetNamespace(p.ns)
		prov.SetName(clusterctlv1.ManifestLabel(p.name, clusterctlv1.ProviderType(p.typ)))
		prov.SetLabels(map[string]string{clusterctlv1.ClusterctlLabel: ""})
		if err := c.Create(ctx, prov); client.IgnoreAlreadyExists(err) != nil {
			t.Fatalf("registering provider %s: %v", prov.GetName(), err)
		}
	}
}

// capiVersion is the Cluster API release fleet builds on (go.mod).
const capiVersion = "v1.14.2"

// clusterctlBinary is bin/clusterctl, built by `make clusterctl`.
func clusterctlBinary(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", "bin", "clusterctl"))
	must(t, err)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%v: run `make clusterctl` (make test does)", err)
	}
	return p
}

func runClusterctl(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, append(args, "-v", "1")...)
	cmd.Env = append(os.Environ(), "CLUSTERCTL_DISABLE_VERSIONCHECK=true", "XDG_CONFIG_HOME="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("clusterctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// devHub is a `fleet-hub dev` process: a hub cluster of its own.
type devHub struct {
	bin, dataDir, gateway, kubeconfig string
	cmd                               *exec.Cmd
	log                               *syncBuffer
	client                            client.Client
}

func startDevHub(t *testing.T, bin string) *devHub {
	t.Helper()
	d := &devHub{bin: bin, dataDir: t.TempDir(), gateway: freeAddr(t)}
	d.kubeconfig = filepath.Join(d.dataDir, "kubeconfig")
	d.start(t)
	t.Cleanup(func() { d.stop(t) })
	return d
}

// start runs the hub and waits until it says it is ready.
func (d *devHub) start(t *testing.T) {
	t.Helper()
	assets, err := filepath.Abs(filepath.Join("..", "..", "bin", "k8s"))
	must(t, err)
	d.cmd = exec.Command(d.bin, "dev", "--data-dir", d.dataDir, "--bin-dir", assets,
		"--gateway-bind-address", d.gateway, "--proxy-bind-address", "0")
	pr, pw := io.Pipe()
	d.log = &syncBuffer{}
	d.cmd.Stdout, d.cmd.Stderr = pw, pw
	must(t, d.cmd.Start())
	ready := make(chan struct{})
	var once sync.Once
	go func() {
		s := bufio.NewScanner(pr)
		for s.Scan() {
			fmt.Fprintln(d.log, s.Text())
			if strings.Contains(s.Text(), " is ready") {
				once.Do(func() { close(ready) })
			}
		}
	}()
	exited := make(chan struct{})
	go func() { _ = d.cmd.Wait(); pw.Close(); close(exited) }()
	select {
	case <-ready:
	case <-exited:
		t.Fatalf("fleet-hub dev exited:\n%s", d.log.String())
	case <-time.After(3 * time.Minute):
		t.Fatalf("fleet-hub dev not ready after 3 minutes:\n%s", d.log.String())
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", d.kubeconfig)
	must(t, err)
	d.client, err = client.New(cfg, client.Options{Scheme: clusterapi.NewScheme()})
	must(t, err)
}

func (d *devHub) stop(t *testing.T) {
	t.Helper()
	if d.cmd == nil || d.cmd.Process == nil || d.cmd.ProcessState != nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	deadline := time.Now().Add(time.Minute)
	for d.cmd.ProcessState == nil && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if d.cmd.ProcessState == nil {
		_ = d.cmd.Process.Kill()
	}
	if t.Failed() {
		b, _ := os.ReadFile(filepath.Join(d.dataDir, "hub.log"))
		t.Logf("--- fleet-hub dev ---\n%s\n--- its log ---\n%s", d.log.String(), tail(string(b), 6000))
	}
}

// useCA installs ca as the hub's CA and restarts the hub on it, as an
// operator moving to this hub cluster does before the move.
func (d *devHub) useCA(t *testing.T, ca *corev1.Secret) {
	t.Helper()
	ctx := context.Background()
	cur := &corev1.Secret{}
	must(t, d.client.Get(ctx, client.ObjectKey{Namespace: "fleet-system", Name: ca.Name}, cur))
	cur.Data = ca.Data
	must(t, d.client.Update(ctx, cur))
	d.stop(t)
	d.start(t)
}
