package e2e

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgefleet/fleet/pkg/enrolltoken"
	"github.com/edgefleet/fleet/pkg/hub/enrollment"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/kubeconfig"
	"sigs.k8s.io/cluster-api/util/secret"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/edgefleet/fleet/internal/testkit/testenv"
	"github.com/edgefleet/fleet/pkg/clustertemplate"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	fleethub "github.com/edgefleet/fleet/pkg/hub"
	"github.com/edgefleet/fleet/pkg/hub/gateway"
	"github.com/edgefleet/fleet/pkg/hub/inplace"
	"github.com/edgefleet/fleet/pkg/hub/reach"
	hubreconcilers "github.com/edgefleet/fleet/pkg/hub/reconcilers"
	"github.com/edgefleet/fleet/pkg/pki"
)

// sitePort is the workload API server's port inside the site.
const sitePort = 16443

// An edge cluster whose API server no one outside its site can dial: it
// runs in the site's network namespace, where its agents run too; they
// dial the hub through an outbound-only forwarder. Cluster API, in the
// root namespace, reaches it only through the hub's edge-reach proxy and
// the agents' sessions.
//
// First without the proxy wiring (the cluster opted out): the failure
// users of every other provider see — the Machine stays Provisioned with
// no nodeRef. Then with it: nodeRef, ControlPlaneInitialized, the remote
// connection probe, and a worker joined with a token the kubeadm
// bootstrap reconciler created in the workload cluster through a tunnel.
// Then `kubectl fleet kubeconfig` with the real kubectl, fail-over to
// another agent when the tunnel's agent dies, the error when none is
// left, and every kind of abuse refused and counted.
func TestEdgeReachThroughAgents(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	c := hub.Client
	endpoint := clusterName + "." + ns + ".fleet.internal"
	target := fmt.Sprintf("%s:%d", endpoint, sitePort)

	s := newSite(t)
	api := startSiteAPIServer(t, s, endpoint, sitePort, nil)
	must(t, unreachable(api.kubeconfig, endpoint,
		fmt.Sprintf("%s:%d", siteAddr, sitePort), fmt.Sprintf("127.0.0.1:%d", sitePort), target))
	if _, err := net.LookupHost(endpoint); err == nil {
		t.Fatalf("%s resolves outside the site", endpoint)
	}

	gw, proxyAddr := startFleetHubWithReach(t, ns)
	const siteGateway = "127.0.0.1:17443"
	s.forward(t, siteGateway, gw.Addr())

	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: clusterName, Namespace: ns,
			Annotations: map[string]string{infrav1.EdgeReachAnnotation: "disabled"}},
		Spec: clusterv1.ClusterSpec{InfrastructureRef: clusterv1.ContractVersionedObjectReference{
			APIGroup: infrav1.GroupVersion.Group, Kind: "EdgeCluster", Name: clusterName}},
	}
	must(t, c.Create(ctx, cluster))
	must(t, c.Create(ctx, kubeconfig.GenerateSecret(cluster, api.kubeconfig)))
	must(t, c.Create(ctx, &infrav1.EdgeCluster{ObjectMeta: metav1.ObjectMeta{Name: clusterName, Namespace: ns},
		Spec: infrav1.EdgeClusterSpec{ControlPlaneEndpoint: infrav1.APIEndpoint{Host: endpoint, Port: sitePort}}}))

	cpToken, wToken := roleTokens(t, ns)
	agentBin, simBin := buildBinaries(t)
	hubURL, pin := "https://"+siteGateway, gw.CA().Pin()
	cpAgent := startAgentIn(t, s, "cp-0", agentBin, simBin, hubURL, pin, cpToken, api.kubeconfig)
	wAgent := startAgentIn(t, s, "w-0", agentBin, simBin, hubURL, pin, wToken, api.kubeconfig)
	eventually(t, "2 hosts in the site enrolled and Available", func() error { return testenv.HostsAvailable(ctx, c, ns, 2) })

	// Without edge reach: provisioned, but Cluster API cannot see the node.
	createCPMachine(t, c, ns, "cp-0", nil)
	eventually(t, "cp-0 Provisioned", func() error {
		m := &clusterv1.Machine{}
		must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "cp-0"}, m))
		if m.Status.Phase != string(clusterv1.MachinePhaseProvisioned) {
			return fmt.Errorf("phase %q", m.Status.Phase)
		}
		return nil
	})
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Second) {
		m := &clusterv1.Machine{}
		must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "cp-0"}, m))
		if m.Status.NodeRef.IsDefined() || m.Status.Phase == string(clusterv1.MachinePhaseRunning) {
			t.Fatalf("without edge reach Cluster API reached the workload cluster anyway: phase %s, nodeRef %v", m.Status.Phase, m.Status.NodeRef)
		}
	}
	if proxyURLOf(t, ns) != "" {
		t.Fatal("the kubeconfig of a cluster with edge reach disabled has a proxy-url")
	}

	// With edge reach: the hub points the kubeconfig at its proxy.
	must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: clusterName}, cluster))
	p := client.MergeFrom(cluster.DeepCopy())
	delete(cluster.Annotations, infrav1.EdgeReachAnnotation)
	must(t, c.Patch(ctx, cluster, p))
	eventually(t, "proxy-url in the kubeconfig Secret", func() error {
		if u := proxyURLOf(t, ns); !strings.Contains(u, proxyAddr) {
			return fmt.Errorf("proxy-url %q", u)
		}
		return nil
	})
	eventually(t, "cp-0 Running with nodeRef through the tunnel", func() error { return testenv.MachinesRunning(ctx, c, ns, 1) })
	eventually(t, "Cluster ControlPlaneInitialized and its remote connection probe passing", func() error {
		must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: clusterName}, cluster))
		for _, cond := range []string{clusterv1.ClusterControlPlaneInitializedCondition, clusterv1.ClusterRemoteConnectionProbeCondition} {
			if !conditions.IsTrue(cluster, cond) {
				return fmt.Errorf("%s is not True: %+v", cond, conditions.Get(cluster, cond))
			}
		}
		return nil
	})
	// A worker: its join needs a bootstrap token that the kubeadm
	// bootstrap reconciler creates in the workload cluster.
	createWorkerMachine(t, c, ns, "w-0", nil)
	eventually(t, "cp-0 and w-0 Running with nodeRef", func() error { return testenv.MachinesRunning(ctx, c, ns, 2) })

	// An operator's kubectl, through `kubectl fleet kubeconfig`.
	kc := fleetKubeconfig(t, ns)
	if out := kubectl(t, kc, "get", "nodes", "-o", "name"); !strings.Contains(out, "node/cp-0") || !strings.Contains(out, "node/w-0") {
		t.Fatalf("kubectl get nodes through the proxy: %q", out)
	}
	if out := kubectl(t, kc, "get", "secrets", "-n", "kube-system", "-o", "name"); !strings.Contains(out, "secret/bootstrap-token-") {
		t.Fatalf("no bootstrap token in the workload cluster: %q", out)
	}

	// Fail-over: the control-plane host's agent (the preferred carrier)
	// dies. Cluster API goes on through the worker's agent, which reaches
	// the control plane over the site's LAN: it syncs a new Machine label
	// to the Node.
	cpAgent.kill(t)
	eventually(t, "cp-0 disconnected", func() error {
		h := &infrav1.EdgeHost{}
		must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "cp-0"}, h))
		if conditions.IsTrue(h, infrav1.AgentConnectedCondition) {
			return errors.New("still connected")
		}
		return nil
	})
	m := &clusterv1.Machine{}
	must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "w-0"}, m))
	mp := client.MergeFrom(m.DeepCopy())
	m.Labels["node.cluster.x-k8s.io/reached-after-failover"] = "yes"
	must(t, c.Patch(ctx, m, mp))
	eventually(t, "Cluster API labels the Node through the other agent", func() error {
		out := kubectl(t, kc, "get", "node", "w-0", "-o", "jsonpath={.metadata.labels.node\\.cluster\\.x-k8s\\.io/reached-after-failover}")
		if out != "yes" {
			return fmt.Errorf("label is %q", out)
		}
		return nil
	})

	// Abuse, all refused and counted.
	user, password := credentialsOf(t, ns)
	before := reachMetrics(t)
	for _, tc := range []struct {
		name, method, target, user, password string
		want                                 int
	}{
		{"plain GET", http.MethodGet, target, user, password, http.StatusMethodNotAllowed},
		{"no credentials", http.MethodConnect, target, "", "", http.StatusProxyAuthRequired},
		{"wrong password", http.MethodConnect, target, user, password + "x", http.StatusProxyAuthRequired},
		{"another cluster's credentials", http.MethodConnect, target, ns + "/other", password, http.StatusProxyAuthRequired},
		{"the site's LAN address", http.MethodConnect, fmt.Sprintf("%s:%d", siteAddr, sitePort), user, password, http.StatusForbidden},
		{"another port of the endpoint", http.MethodConnect, endpoint + ":22", user, password, http.StatusForbidden},
		{"another site's private address", http.MethodConnect, "192.168.1.10:443", user, password, http.StatusForbidden},
	} {
		if code, body := proxyRequest(t, proxyAddr, tc.method, tc.target, tc.user, tc.password); code != tc.want {
			t.Errorf("%s: status %d, want %d (%s)", tc.name, code, tc.want, body)
		}
	}
	// The hub itself asking an agent for another address: the agent says no.
	_, _, err := gw.DialCluster(ctx, ns, clusterName, fmt.Sprintf("%s:22", siteAddr))
	var te *reach.TunnelError
	if !errors.As(err, &te) || te.Reason != "agent_refused" || !strings.Contains(err.Error(), "not this host's cluster endpoint") {
		t.Errorf("agent dialled a target outside its cluster: %v", err)
	}
	after := reachMetrics(t)
	for _, k := range []string{"refused/not_connect", "refused/unauthenticated", "refused/bad_credentials", "refused/target_not_allowed"} {
		if after[k] <= before[k] {
			t.Errorf("metric fleet_reach_%s did not count the refusal (%v → %v)", k, before[k], after[k])
		}
	}
	if !strings.Contains(wAgent.log.String(), "Refused a tunnel") {
		t.Error("the agent did not log the refused tunnel")
	}

	// A leaked credential is retired with `kubectl fleet kubeconfig
	// --rotate-credential`: the kubeconfig it prints works, the credential
	// handed out before is refused, and no agent was touched.
	rotated := fleetKubeconfig(t, ns, "--rotate-credential")
	if out := kubectl(t, rotated, "get", "nodes", "-o", "name"); !strings.Contains(out, "node/w-0") {
		t.Fatalf("kubectl get nodes with the rotated credential: %q", out)
	}
	if code, body := proxyRequest(t, proxyAddr, http.MethodConnect, target, user, password); code != http.StatusProxyAuthRequired {
		t.Errorf("the retired credential: status %d, want 407 (%s)", code, body)
	}
	user, password = credentialsOf(t, ns)

	// No agent left: a clear error naming the cluster.
	wAgent.kill(t)
	eventually(t, "no agent of the cluster connected", func() error {
		code, body := proxyRequest(t, proxyAddr, http.MethodConnect, target, user, password)
		if code != http.StatusBadGateway || !strings.Contains(body, fmt.Sprintf("no agent of cluster %s/%s is connected", ns, clusterName)) {
			return fmt.Errorf("status %d: %s", code, body)
		}
		return nil
	})
	if got := reachMetrics(t)["dial_failures/no_agent"]; got < 1 {
		t.Errorf("fleet_reach_dial_failures_total{reason=no_agent} = %v", got)
	}
}

// startFleetHubWithReach runs fleet's hub with edge reach, watching only
// ns (other tests' clusters are not its to point at its proxy), and
// returns its gateway and the proxy's address.
// Its certificate names 127.0.0.1 and extraIPs (a site router's address,
// where hosts reach the gateway).
func startFleetHubWithReach(t *testing.T, ns string, extraIPs ...string) (*gateway.Server, string) {
	t.Helper()
	return startFleetHubFor(t, ns, false, extraIPs...)
}

// startFleetHubWithHooks is startFleetHubWithReach with the in-place
// update hooks, registered for ns alone (an ExtensionConfig "fleet-<ns>",
// removed at the end): other tests' hubs serve no hooks.
func startFleetHubWithHooks(t *testing.T, ns string, extraIPs ...string) (*gateway.Server, string) {
	t.Helper()
	return startFleetHubFor(t, ns, true, extraIPs...)
}

func startFleetHubFor(t *testing.T, ns string, hooks bool, extraIPs ...string) (*gateway.Server, string) {
	t.Helper()
	mgr, err := ctrl.NewManager(hub.Config, ctrl.Options{Scheme: hub.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Logger: ctrl.Log.WithName("hub"),
		Cache:  cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}}})
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	ips := []net.IP{net.ParseIP("127.0.0.1")}
	for _, ip := range extraIPs {
		ips = append(ips, net.ParseIP(ip))
	}
	proxyAddr := freeAddr(t)
	o := fleethub.Options{Reconcilers: hubreconcilers.Options{Concurrency: 4, SkipNameValidation: true},
		Gateway: &gateway.Options{Addr: "127.0.0.1:0", HubNamespace: ns, IPs: ips},
		Reach:   &reach.SetupOptions{Options: reach.Options{Addr: proxyAddr}}}
	if hooks {
		name := "fleet-" + ns
		o.InPlace = &inplace.Options{Addr: "127.0.0.1:0", Namespace: ns, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Register: true, Name: name,
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}}
		t.Cleanup(func() {
			_ = hub.Client.Delete(context.Background(), &runtimev1.ExtensionConfig{ObjectMeta: metav1.ObjectMeta{Name: name}})
		})
	}
	h, err := fleethub.Setup(ctx, mgr, o)
	must(t, err)
	gw := h.Gateway
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(ctx) }()
	<-gw.Ready()
	t.Cleanup(func() { cancel(); <-done })
	return gw, proxyAddr
}

func (a *agentProc) kill(t *testing.T) {
	t.Helper()
	_ = a.cmd.Process.Signal(syscall.SIGKILL)
	_ = a.cmd.Wait()
}

func kubeconfigSecret(t *testing.T, ns string) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{}
	must(t, hub.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: secret.Name(clusterName, secret.Kubeconfig)}, s))
	return s
}

func proxyURLOf(t *testing.T, ns string) string {
	t.Helper()
	cfg, err := clientcmd.Load(kubeconfigSecret(t, ns).Data[secret.KubeconfigDataName])
	must(t, err)
	for _, c := range cfg.Clusters {
		return c.ProxyURL
	}
	return ""
}

func credentialsOf(t *testing.T, ns string) (user, password string) {
	t.Helper()
	u, err := url.Parse(proxyURLOf(t, ns))
	must(t, err)
	password, _ = u.User.Password()
	return u.User.Username(), password
}

// fleetKubeconfig runs `kubectl fleet kubeconfig` as an operator would and
// returns the file it wrote.
func fleetKubeconfig(t *testing.T, ns string, args ...string) string {
	t.Helper()
	dir := t.TempDir()
	bin := build(t, dir, "./cmd/kubectl-fleet", "kubectl-fleet")
	hubKC := filepath.Join(dir, "hub.kubeconfig")
	b := kubeconfig.FromEnvTestConfig(hub.Config, &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "hub"}})
	must(t, os.WriteFile(hubKC, b, 0o600))
	cmd := exec.Command(bin, append([]string{"kubeconfig", clusterName, "--kubeconfig", hubKC, "-n", ns}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl fleet kubeconfig: %v\n%s", err, stderr.String())
	}
	path := filepath.Join(dir, "edge.kubeconfig")
	must(t, os.WriteFile(path, out, 0o600))
	return path
}

func kubectl(t *testing.T, kubeconfig string, args ...string) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	must(t, err)
	cmd := exec.Command(filepath.Join(root, "bin", "k8s", "kubectl"), append([]string{"--kubeconfig", kubeconfig, "--request-timeout", "20s"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Sprintf("kubectl %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// proxyRequest sends one request to the proxy and returns its answer.
func proxyRequest(t *testing.T, proxyAddr, method, target, user, password string) (int, string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", proxyAddr, 5*time.Second)
	must(t, err)
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(40 * time.Second))
	req := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: %s\r\n", method, target, target)
	if method != http.MethodConnect {
		req = fmt.Sprintf("%s https://%s/ HTTP/1.1\r\nHost: %s\r\n", method, target, target)
	}
	if user != "" {
		req += "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password)) + "\r\n"
	}
	_, err = io.WriteString(conn, req+"\r\n")
	must(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: method})
	must(t, err)
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		return resp.StatusCode, ""
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, strings.TrimSpace(string(body))
}

// reachMetrics reads the proxy's counters as "refused/<reason>" and
// "dial_failures/<reason>".
func reachMetrics(t *testing.T) map[string]float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	must(t, err)
	out := map[string]float64{}
	for _, f := range families {
		var kind string
		switch f.GetName() {
		case "fleet_reach_refused_total":
			kind = "refused"
		case "fleet_reach_dial_failures_total":
			kind = "dial_failures"
		default:
			continue
		}
		for _, m := range f.GetMetric() {
			out[kind+"/"+label(m, "reason")] = m.GetCounter().GetValue()
		}
	}
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// A KubeadmControlPlane cluster behind NAT becomes Available: the real
// KubeadmControlPlane reconciler makes the control plane's kubeconfig from
// the cluster CA, the hub points it at the proxy, and through the tunnel
// KCP inspects the control-plane node and its static pods (external etcd:
// the node simulator runs no etcd member for KCP to dial).
func TestEdgeReachKubeadmControlPlaneAvailable(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	c := hub.Client
	endpoint := clusterName + "." + ns + ".fleet.internal"

	// The cluster CA, as a user (or KCP itself) would have it: the site's
	// API server serves and authenticates with it.
	ca, err := pki.NewCA("kubernetes", 24*time.Hour)
	must(t, err)
	s := newSite(t)
	api := startSiteAPIServer(t, s, endpoint, sitePort, ca)

	gw, _ := startFleetHubWithReach(t, ns)
	const siteGateway = "127.0.0.1:17443"
	s.forward(t, siteGateway, gw.Addr())

	objs := clustertemplate.Objects(clustertemplate.Spec{Name: clusterName, Namespace: ns, KubernetesVersion: "v1.36.3",
		ControlPlane: "kubeadm", ControlPlaneMachines: 1, WorkerMachines: 0,
		ControlPlaneSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "cp"}}, WorkerSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "worker"}},
		Endpoint: infrav1.APIEndpoint{Host: endpoint, Port: sitePort}})
	var kcp *controlplanev1.KubeadmControlPlane
	for _, o := range objs {
		if k, ok := o.(*controlplanev1.KubeadmControlPlane); ok {
			kcp = k
		}
	}
	if kcp == nil {
		t.Fatal("kubectl fleet create made no KubeadmControlPlane")
	}
	kcp.Spec.KubeadmConfigSpec.ClusterConfiguration.Etcd.External = bootstrapv1.ExternalEtcd{
		Endpoints: []string{"https://127.0.0.1:2379"},
		CAFile:    "/etc/kubernetes/pki/etcd/ca.crt", CertFile: "/etc/kubernetes/pki/apiserver-etcd-client.crt",
		KeyFile: "/etc/kubernetes/pki/apiserver-etcd-client.key"}
	// The cluster CA and, for external etcd, its CA and the API server's
	// etcd client certificate are the user's to provide.
	etcdCA, err := pki.NewCA("etcd-ca", 24*time.Hour)
	must(t, err)
	etcdClient, err := pki.NewCA("apiserver-etcd-client", 24*time.Hour)
	must(t, err)
	for name, data := range map[string]map[string][]byte{
		secret.Name(clusterName, secret.ClusterCA): {secret.TLSCrtDataName: ca.CertPEM, secret.TLSKeyDataName: ca.KeyPEM},
		// An external etcd's CA comes without its key.
		secret.Name(clusterName, secret.EtcdCA):              {secret.TLSCrtDataName: etcdCA.CertPEM},
		secret.Name(clusterName, secret.APIServerEtcdClient): {secret.TLSCrtDataName: etcdClient.CertPEM, secret.TLSKeyDataName: etcdClient.KeyPEM},
	} {
		must(t, c.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{clusterv1.ClusterNameLabel: clusterName}},
			Type:       clusterv1.ClusterSecretType,
			Data:       data,
		}))
	}
	for _, o := range objs {
		if _, ok := o.(*clusterv1.MachineDeployment); ok {
			continue
		}
		must(t, c.Create(ctx, o))
	}

	token, _, err := enrollment.CreateToken(ctx, c, ns, enrolltoken.Options{TTL: time.Hour, HostNamespace: ns, HostLabels: map[string]string{"role": "cp"}}, time.Now())
	must(t, err)
	agentBin, simBin := buildBinaries(t)
	startAgentIn(t, s, "cp-0", agentBin, simBin, "https://"+siteGateway, gw.CA().Pin(), token, api.kubeconfig)

	eventually(t, "the control-plane Machine Running with nodeRef", func() error { return testenv.MachinesRunning(ctx, c, ns, 1) })
	eventually(t, "KubeadmControlPlane and Cluster Available", func() error {
		must(t, c.Get(ctx, client.ObjectKeyFromObject(kcp), kcp))
		if !conditions.IsTrue(kcp, controlplanev1.KubeadmControlPlaneAvailableCondition) {
			return fmt.Errorf("KubeadmControlPlane Available: %+v", conditions.Get(kcp, controlplanev1.KubeadmControlPlaneAvailableCondition))
		}
		cluster := &clusterv1.Cluster{}
		must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: clusterName}, cluster))
		for _, cond := range []string{clusterv1.ClusterControlPlaneInitializedCondition, clusterv1.ClusterAvailableCondition} {
			if !conditions.IsTrue(cluster, cond) {
				return fmt.Errorf("Cluster %s: %+v", cond, conditions.Get(cluster, cond))
			}
		}
		return nil
	})
	if u := proxyURLOf(t, ns); u == "" {
		t.Error("KubeadmControlPlane's kubeconfig has no proxy-url")
	}
}
