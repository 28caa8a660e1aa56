package e2e

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/internal/testkit"
	"github.com/edgefleet/fleet/internal/testkit/testenv"
	"github.com/edgefleet/fleet/internal/testkit/testhost"
	"github.com/edgefleet/fleet/pkg/clustertemplate"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/hub/gateway"
	"github.com/edgefleet/fleet/pkg/hub/inventory"
)

// realNodesWait bounds each step on real nodes: a kubeadm init shares the
// machine with the hub, both API servers and the other suites.
const realNodesWait = 6 * time.Minute

// hostKit is what real hosts boot: the edge image's root file system
// (make test-image) and the fleet-agent under test, put over the image's.
type hostKit struct{ image, agent string }

// realKit is what real hosts need from this machine; it says what is
// missing, and the test fails under CI or is skipped elsewhere.
func realKit(t *testing.T) hostKit {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	must(t, err)
	image := filepath.Join(root, "bin", "edge-image", "rootfs")
	testhost.Require(t, image, "real nodes")
	agentBin, _ := buildBinaries(t)
	return hostKit{image: image, agent: agentBin}
}

// startRealSite makes an edge site named prefix-<pid> (so tests can run
// beside each other) whose router forwards the gateway port to the hub, and
// returns it with the hub URL its hosts dial.
func startRealSite(t *testing.T, prefix, lan string, gw *gateway.Server) (*testhost.Site, string) {
	t.Helper()
	s, err := testhost.NewSite(fmt.Sprintf("%s-%d", prefix, os.Getpid()%100000), lan)
	must(t, err)
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	addr, err := s.Forward(net.JoinHostPort(s.Router, "8443"), gw.Addr())
	must(t, err)
	return s, "https://" + addr
}

// startRealHost boots a host on the site and starts its agent with token.
func startRealHost(t *testing.T, s *testhost.Site, bin hostKit, name, hubURL, pin, token string) *testhost.Host {
	t.Helper()
	return startRealHostWith(t, s, bin, testhost.HostOptions{}, name, hubURL, pin, token)
}

// startRealHostWith is startRealHost for a host made with o.
func startRealHostWith(t *testing.T, s *testhost.Site, bin hostKit, o testhost.HostOptions, name, hubURL, pin, token string) *testhost.Host {
	t.Helper()
	ctx := context.Background()
	o.Name, o.Dir, o.Image, o.Agent = name, t.TempDir(), bin.image, bin.agent
	h, err := s.NewHost(ctx, o)
	must(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(h.Logs())
		}
		if err := h.Close(); err != nil {
			t.Error(err)
		}
	})
	must(t, h.StartAgent(ctx, testhost.AgentConfig{Hub: hubURL, Token: token, CACertHash: pin, ResyncInterval: "2s"}))
	return h
}

// testHostsKubeadm is what this machine's hosts need from the bootstrap,
// read from the documented template as `create --kubeadm-config` reads it.
func testHostsKubeadm(t *testing.T) bootstrapv1.KubeadmConfigSpec {
	t.Helper()
	tmpl, err := os.ReadFile(filepath.Join("..", "..", "docs", "templates", "kubeadm-cgroupv1-test-hosts.yaml"))
	must(t, err)
	settings, err := clustertemplate.ParseKubeadmConfig(tmpl)
	must(t, err)
	return settings
}

// realClusterSpec is the cluster `create` makes for one control-plane
// host (KubeadmControlPlane, stacked etcd) labelled role=cp and one worker
// labelled role=worker.
func realClusterSpec(t *testing.T, ns string) clustertemplate.Spec {
	return clustertemplate.Spec{Kubeadm: testHostsKubeadm(t), Name: clusterName, Namespace: ns, KubernetesVersion: "v1.36.3",
		ControlPlane: "kubeadm", ControlPlaneMachines: 1, WorkerMachines: 1,
		ControlPlaneSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "cp"}},
		WorkerSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"role": "worker"}},
		Endpoint:             infrav1.APIEndpoint{Host: clusterName + "." + ns + "." + infrav1.EndpointDomain, Port: 6443}}
}

// startTwoRealHosts makes a namespace, a hub with edge reach and a site
// on lan (its router at .1) holding a control-plane host (role=cp) and a
// worker host (role=worker), both enrolled and Available; the hosts are
// named <prefix><pid>-cp and -w.
func startTwoRealHosts(t *testing.T, prefix, lan string) (ns string, cp, worker *testhost.Host) {
	t.Helper()
	bin := realKit(t)
	ns = newNamespace(t)
	gw, _ := startFleetHubWithReach(t, ns, lan+".1")
	site, hubURL := startRealSite(t, prefix+"s", lan, gw)
	cpToken, wToken := roleTokens(t, ns)
	name := fmt.Sprintf("%s%d", prefix, os.Getpid()%100000)
	pin := gw.CA().Pin()
	cp = startRealHost(t, site, bin, name+"-cp", hubURL, pin, cpToken)
	worker = startRealHost(t, site, bin, name+"-w", hubURL, pin, wToken)
	realEventually(t, "2 real hosts enrolled and Available", func() error { return testenv.HostsAvailable(context.Background(), hub.Client, ns, 2) })
	return ns, cp, worker
}

// uidPattern is an object's uid, as kubectl prints it.
var uidPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func realEventually(t *testing.T, what string, cond func() error) {
	t.Helper()
	testkit.Eventually(t, realNodesWait, 2*time.Second, what, cond)
}

// A cluster made by `kubectl fleet create` with a KubeadmControlPlane
// (stacked etcd) and a MachineDeployment runs on two real hosts behind a
// site's NAT: real kubeadm, kubelet and containerd, reached by the hub only
// through edge reach, with kubeadm's kube-proxy and CoreDNS. A pod answers
// through the hub, and a pod on the other host reaches it through a Service
// by its DNS name; scaling the workers
// to 0 and back re-provisions the same host; deleting the cluster leaves
// every host clean and Available.
func TestRealNodesClusterLifecycle(t *testing.T) {
	ctx := context.Background()
	c := hub.Client
	ns, cpHost, wHost := startTwoRealHosts(t, "rn", "10.97.0")
	cpName, wName := cpHost.Name, wHost.Name

	// The settings this machine's hosts need come from the documented
	// template, plus kubelet flags as a user sets them in
	// /etc/default/kubelet: a file the bootstrap writes, which the kubelet
	// reads only once the agent has restarted it.
	spec := realClusterSpec(t, ns)
	const label = "edge.example.com/image=fleet-edge"
	spec.Kubeadm.Files = append(spec.Kubeadm.Files, bootstrapv1.File{Path: "/etc/default/kubelet", Permissions: "0644",
		Content: "KUBELET_EXTRA_ARGS=--node-labels=" + label + "\n"})
	for _, o := range clustertemplate.Objects(spec) {
		must(t, c.Create(ctx, o))
	}
	realEventually(t, "Cluster Available on real nodes", func() error { return clusterAvailable(ctx, c, ns) })

	// The nodes, as an operator sees them through the hub.
	kc := fleetKubeconfig(t, ns)
	for _, name := range []string{cpName, wName} {
		realEventually(t, "Node "+name+" Ready with fleet's providerID", func() error {
			return nodeReady(t, kc, name, inventory.ProviderIDOf(ns, name))
		})
		if got := kubectl(t, kc, "get", "node", name, "-o", `jsonpath={.metadata.labels.edge\.example\.com/image}`); got != "fleet-edge" {
			t.Errorf("Node %s: label %s = %q: the kubelet did not read /etc/default/kubelet", name, label, got)
		}
	}
	for _, h := range []*testhost.Host{cpHost, wHost} {
		underSystemd(ctx, t, h)
	}
	// The certificate expiry the agent reports is the real PKI's.
	cpMachine := machineOnHost(ctx, t, c, ns, cpName)
	apiserverExpiry, err := certExpiry(cpHost.Root("etc/kubernetes/pki/apiserver.crt"))
	must(t, err)
	if got := cpMachine.Status.CertificatesExpiryDate.Time; got.IsZero() || got.Sub(apiserverExpiry).Abs() > 24*time.Hour || time.Until(got) < 300*24*time.Hour {
		t.Errorf("control-plane Machine certificatesExpiryDate %s; the API server's certificate expires %s", got, apiserverExpiry)
	}

	// A pod from a locally built image runs on the worker and answers
	// through the hub.
	echo := echoImage(t)
	must(t, wHost.ImportImages(ctx, echo))
	runEchoPod(t, kc, wName)

	// kubeadm's addons run: a pod on the control-plane host reaches a
	// Service of the worker's pods by its DNS name (CoreDNS, kube-proxy,
	// and the pod routes between the hosts).
	must(t, cpHost.ImportImages(ctx, echo))
	serviceByDNS(t, kc, wName, cpName)

	// Workers to 0: the Machine and its Node go, the host is reset for real
	// and back in the pool.
	first := machineOnHost(ctx, t, c, ns, wName)
	var firstNode string
	realEventually(t, "the first Node's uid", func() error {
		firstNode = kubectl(t, kc, "get", "node", wName, "-o", "jsonpath={.metadata.uid}")
		if !uidPattern.MatchString(firstNode) {
			return fmt.Errorf("node %s: %s", wName, firstNode)
		}
		return nil
	})
	scaleWorkers(ctx, t, c, ns, 0)
	realEventually(t, "the worker Machine gone, its host reset and Available", func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(first), &clusterv1.Machine{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("Machine %s is still there (%v)", first.Name, err)
		}
		if err := hostPhase(ctx, c, ns, wName, infrav1.HostAvailable); err != nil {
			return err
		}
		return hostClean(wHost)
	})
	// To 1: the same host is provisioned a second time, for a new Machine,
	// and its kubelet registers a new Node (the first one's Ready would
	// prove nothing).
	scaleWorkers(ctx, t, c, ns, 1)
	realEventually(t, "the worker host provisioned again, a new Node Ready", func() error {
		m, err := liveWorker(ctx, c, ns)
		if err != nil {
			return err
		}
		if m.Name == first.Name || m.Spec.ProviderID != inventory.ProviderIDOf(ns, wName) || !m.Status.NodeRef.IsDefined() {
			return fmt.Errorf("worker Machine %s on %q, nodeRef %q", m.Name, m.Spec.ProviderID, m.Status.NodeRef.Name)
		}
		if uid := kubectl(t, kc, "get", "node", wName, "-o", "jsonpath={.metadata.uid}"); !uidPattern.MatchString(uid) || uid == firstNode {
			return fmt.Errorf("Node %s: %s, the first was %s", wName, uid, firstNode)
		}
		return nodeReady(t, kc, wName, inventory.ProviderIDOf(ns, wName))
	})

	// Delete the cluster: every host clean and Available.
	must(t, c.Delete(ctx, &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: clusterName}}))
	realEventually(t, "every host reset and Available after the cluster is gone", func() error {
		for _, h := range []*testhost.Host{cpHost, wHost} {
			if err := hostPhase(ctx, c, ns, h.Name, infrav1.HostAvailable); err != nil {
				return err
			}
			if err := hostClean(h); err != nil {
				return err
			}
		}
		return nil
	})
}

// underSystemd checks what a provisioned box's systemd shows: the kubelet
// active with its pods in slices systemd made (the systemd cgroup
// driver), restarted by the agent through systemd's D-Bus API after the
// bootstrap, and the agent's unit as shipped, no drop-in loosening it.
func underSystemd(ctx context.Context, t *testing.T, h *testhost.Host) {
	t.Helper()
	if p, err := h.Show(ctx, "kubelet.service", "ActiveState"); err != nil || p["ActiveState"] != "active" {
		t.Errorf("%s: kubelet.service %v %v", h.Name, p, err)
	}
	if p, err := h.Show(ctx, "kubepods.slice", "ActiveState"); err != nil || p["ActiveState"] != "active" {
		t.Errorf("%s: kubepods.slice %v %v (the kubelet's systemd cgroup driver)", h.Name, p, err)
	}
	if j := h.UnitLog("fleet-agent.service"); !strings.Contains(j, "kubelet.service restarted") || strings.Contains(j, "D-Bus") {
		t.Errorf("%s: the agent's journal does not show the kubelet restarted through D-Bus:\n%s", h.Name, j)
	}
	if p, err := h.Show(ctx, "fleet-agent.service", "DropInPaths"); err != nil || p["DropInPaths"] != "" {
		t.Errorf("%s: fleet-agent.service %v %v", h.Name, p, err)
	}
}

// nodeReady checks a Node through the hub: Ready, with providerID.
func nodeReady(t *testing.T, kc, name, providerID string) error {
	out := kubectl(t, kc, "get", "node", name, "-o", `jsonpath={.spec.providerID} {.status.conditions[?(@.type=="Ready")].status}`)
	if out != providerID+" True" {
		return fmt.Errorf("node %s: %q, want %q", name, out, providerID+" True")
	}
	return nil
}

// machineOnHost waits for the Machine whose providerID is host's: Cluster
// API copies it from the EdgeMachine a moment after the Node has it.
func machineOnHost(ctx context.Context, t *testing.T, c client.Client, ns, host string) *clusterv1.Machine {
	t.Helper()
	var found *clusterv1.Machine
	realEventually(t, "a Machine on host "+host, func() error {
		machines := &clusterv1.MachineList{}
		if err := c.List(ctx, machines, client.InNamespace(ns)); err != nil {
			return err
		}
		for i := range machines.Items {
			if machines.Items[i].Spec.ProviderID == inventory.ProviderIDOf(ns, host) {
				found = &machines.Items[i]
				return nil
			}
		}
		return fmt.Errorf("no Machine on host %s", host)
	})
	return found
}

func hostPhase(ctx context.Context, c client.Client, ns, name string, want infrav1.EdgeHostPhase) error {
	h := &infrav1.EdgeHost{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, h); err != nil {
		return err
	}
	if h.Status.Phase != want {
		return fmt.Errorf("host %s is %s, want %s", name, h.Status.Phase, want)
	}
	return nil
}

// hostClean checks what kubeadm reset must leave: no cluster PKI or
// kubeconfigs, no etcd data, no running containers.
func hostClean(h *testhost.Host) error {
	if err := hostFilesClean(h); err != nil {
		return err
	}
	out, err := h.Command(context.Background(), "ctr", "-n", "k8s.io", "tasks", "ls", "-q").CombinedOutput()
	if err != nil {
		return fmt.Errorf("host %s: listing containers: %v: %s", h.Name, err, out)
	}
	if tasks := strings.Fields(string(out)); len(tasks) > 0 {
		return fmt.Errorf("host %s: %d containers still running", h.Name, len(tasks))
	}
	return nil
}

// hostFilesClean is hostClean's part that needs no container runtime.
func hostFilesClean(h *testhost.Host) error {
	for _, dir := range []string{"etc/kubernetes/pki", "etc/kubernetes/manifests", "var/lib/etcd"} {
		entries, err := os.ReadDir(h.Root(dir))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if len(entries) > 0 {
			return fmt.Errorf("host %s: /%s still holds %d entries", h.Name, dir, len(entries))
		}
	}
	for _, f := range []string{"etc/kubernetes/kubelet.conf", "etc/kubernetes/admin.conf", "run/cluster-api/bootstrap-success.complete"} {
		if _, err := os.Stat(h.Root(f)); !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("host %s: /%s is still there", h.Name, f)
		}
	}
	return nil
}

func scaleWorkers(ctx context.Context, t *testing.T, c client.Client, ns string, n int32) {
	t.Helper()
	md := &clusterv1.MachineDeployment{}
	must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: clusterName + "-md-0"}, md))
	patch := client.MergeFrom(md.DeepCopy())
	md.Spec.Replicas = ptr.To(n)
	must(t, c.Patch(ctx, md, patch))
}

// echoImage builds test/echoserver into an image archive, as a user's CI
// would build their workload.
func echoImage(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "echoserver")
	cmd := exec.Command("go", "build", "-o", bin, "./test/echoserver")
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building echoserver: %v\n%s", err, out)
	}
	archive := filepath.Join(dir, "echoserver.tar")
	if out, err := exec.Command(filepath.Join("..", "..", "bin", "nodeimage"), "build", "--name", echoImageName,
		"--binary", bin, "--out", archive).CombinedOutput(); err != nil {
		t.Fatalf("nodeimage build: %v\n%s", err, out)
	}
	return archive
}

const echoImageName = "fleet.test/echoserver:e2e"

// runEchoPod schedules the echo server on node and reads its answer
// through `kubectl port-forward`: hub proxy, agent tunnel, API server,
// the worker's kubelet, the pod.
func runEchoPod(t *testing.T, kc, node string) {
	t.Helper()
	manifest := filepath.Join(t.TempDir(), "echo.yaml")
	must(t, os.WriteFile(manifest, []byte(fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: echo
  namespace: default
spec:
  nodeSelector:
    kubernetes.io/hostname: %s
  automountServiceAccountToken: false
  containers:
  - name: echo
    image: %s
    imagePullPolicy: Never
    args: ["--listen", ":8080"]
    ports:
    - containerPort: 8080
`, node, echoImageName)), 0o600))
	realEventually(t, "the echo pod created", func() error {
		if out := kubectl(t, kc, "apply", "-f", manifest); !strings.Contains(out, "pod/echo") || strings.Contains(out, "Error") {
			return errors.New(out)
		}
		return nil
	})
	realEventually(t, "the echo pod Running on "+node, func() error {
		out := kubectl(t, kc, "get", "pod", "echo", "-o", `jsonpath={.spec.nodeName} {.status.phase} {.status.podIP}`)
		if f := strings.Fields(out); len(f) != 3 || f[0] != node || f[1] != "Running" {
			return fmt.Errorf("pod echo: %q", out)
		}
		return nil
	})
	root, err := filepath.Abs(filepath.Join("..", ".."))
	must(t, err)
	pf := exec.Command(filepath.Join(root, "bin", "k8s", "kubectl"), "--kubeconfig", kc, "port-forward", "--address", "127.0.0.1", "pod/echo", ":8080")
	out := &syncBuffer{}
	pf.Stdout, pf.Stderr = out, out
	must(t, pf.Start())
	defer func() { _ = pf.Process.Kill(); _ = pf.Wait() }()
	var local string
	realEventually(t, "kubectl port-forward listening", func() error {
		for _, line := range strings.Split(out.String(), "\n") {
			if rest, ok := strings.CutPrefix(line, "Forwarding from 127.0.0.1:"); ok {
				local = "127.0.0.1:" + strings.Fields(rest)[0]
				return nil
			}
		}
		return fmt.Errorf("no port yet: %q", out.String())
	})
	realEventually(t, "the echo pod answering through the hub", func() error {
		resp, err := httpGet("http://" + local + "/")
		if err != nil {
			return err
		}
		if resp != "hello from echo\n" {
			return fmt.Errorf("answer %q", resp)
		}
		return nil
	})
}

// serviceByDNS runs a Deployment of the echo server on serverNode behind
// the Service web, and a client pod on clientNode that fetches
// http://web.default.svc.cluster.local; the answer must come from a web
// pod. kubectl exec reaches the client through the hub.
func serviceByDNS(t *testing.T, kc, serverNode, clientNode string) {
	t.Helper()
	manifest := filepath.Join(t.TempDir(), "web.yaml")
	must(t, os.WriteFile(manifest, []byte(fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: default
spec:
  replicas: 1
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      nodeSelector:
        kubernetes.io/hostname: %[1]s
      automountServiceAccountToken: false
      containers:
      - name: web
        image: %[3]s
        imagePullPolicy: Never
        args: ["--listen", ":8080"]
        ports:
        - containerPort: 8080
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: default
spec:
  selector: {app: web}
  ports:
  - port: 80
    targetPort: 8080
---
apiVersion: v1
kind: Pod
metadata:
  name: client
  namespace: default
spec:
  nodeSelector:
    kubernetes.io/hostname: %[2]s
  # The control-plane host is tainted; this pod is only a client.
  tolerations:
  - operator: Exists
  automountServiceAccountToken: false
  containers:
  - name: client
    image: %[3]s
    imagePullPolicy: Never
    args: ["--listen", ":8080"]
`, serverNode, clientNode, echoImageName)), 0o600))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("workload cluster pods:\n%s", kubectl(t, kc, "get", "pods", "-A", "-o", "wide"))
		}
	})
	realEventually(t, "the web Deployment, its Service and the client pod created", func() error {
		if out := kubectl(t, kc, "apply", "-f", manifest); !strings.Contains(out, "pod/client") || strings.Contains(out, "Error") {
			return errors.New(out)
		}
		return nil
	})
	realEventually(t, "the client pod Running on "+clientNode, func() error {
		if out := kubectl(t, kc, "get", "pod", "client", "-o", `jsonpath={.spec.nodeName} {.status.phase}`); out != clientNode+" Running" {
			// CI shows the first line of a failure: say there why.
			return fmt.Errorf("pod client: %q (%s)", out, kubectl(t, kc, "get", "pod", "client", "-o", `jsonpath={.status.reason}: {.status.message} {.status.containerStatuses[0].state}`))
		}
		return nil
	})
	realEventually(t, "http://web.default.svc.cluster.local answered from "+serverNode+" to a pod on "+clientNode, func() error {
		out := kubectl(t, kc, "exec", "client", "--", "/echoserver", "--get", "http://web.default.svc.cluster.local/")
		pod, ok := strings.CutPrefix(out, "hello from ")
		if !ok || !strings.HasPrefix(pod, "web-") {
			return fmt.Errorf("answer %q", out)
		}
		if node := kubectl(t, kc, "get", "pod", pod, "-o", "jsonpath={.spec.nodeName}"); node != serverNode {
			return fmt.Errorf("the answer came from pod %s on %q, want one on %s", pod, node, serverNode)
		}
		return nil
	})
}

func httpGet(url string) (string, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func clusterAvailable(ctx context.Context, c client.Client, ns string) error {
	kcp := &controlplanev1.KubeadmControlPlane{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: clusterName + "-control-plane"}, kcp); err != nil {
		return err
	}
	if !conditions.IsTrue(kcp, controlplanev1.KubeadmControlPlaneAvailableCondition) {
		return fmt.Errorf("KubeadmControlPlane Available: %+v", conditions.Get(kcp, controlplanev1.KubeadmControlPlaneAvailableCondition))
	}
	cluster := &clusterv1.Cluster{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: clusterName}, cluster); err != nil {
		return err
	}
	if !conditions.IsTrue(cluster, clusterv1.ClusterAvailableCondition) {
		return fmt.Errorf("Cluster Available: %+v", conditions.Get(cluster, clusterv1.ClusterAvailableCondition))
	}
	return nil
}

// certExpiry reads a certificate's expiry from a host's PKI.
func certExpiry(path string) (time.Time, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return time.Time{}, err
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return time.Time{}, errors.New(path + ": no PEM block")
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return time.Time{}, err
	}
	return cert.NotAfter, nil
}
