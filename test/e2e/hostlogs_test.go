package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	"github.com/edgefleet/fleet/internal/testkit/testenv"
	accessapi "github.com/edgefleet/fleet/pkg/contract/hostaccess"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/enrolltoken"
	fleethub "github.com/edgefleet/fleet/pkg/hub"
	"github.com/edgefleet/fleet/pkg/hub/enrollment"
	"github.com/edgefleet/fleet/pkg/hub/gateway"
	"github.com/edgefleet/fleet/pkg/hub/hostaccess"
	hubreconcilers "github.com/edgefleet/fleet/pkg/hub/reconcilers"
)

// A real agent's failed bootstrap, read from afar with the real
// kubectl-fleet: `host logs --bootstrap` prints the whole output with the
// join token the bootstrap printed redacted on the host, `host logs -f`
// follows the agent's log as the host is reset, `host facts` shows the
// host, and a user without the RBAC verb is refused with advice.
func TestHostLogsOfAFailedBootstrap(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	c := hub.Client
	addr := freeAddr(t)
	gw := startFleetHubWithHostAccess(t, ns, addr)
	agentBin, simBin := buildBinaries(t)
	_, wkc := createCluster(t, ns)
	tok, _, err := enrollment.CreateToken(ctx, c, ns, enrolltoken.Options{TTL: time.Hour, HostNamespace: ns,
		HostLabels: map[string]string{"role": "cp"}}, time.Now())
	must(t, err)
	startAgent(t, "logs-cp-0", agentBin, simBin, "https://"+addr, gw.CA().Pin(), tok, wkc)
	eventually(t, "host enrolled", func() error { return testenv.HostsAvailable(ctx, c, ns, 1) })

	const token = "x7k2p9.q4w8e1r6t3y5u0i2"
	createCPMachine(t, c, ns, "broken", []string{
		"echo preflight output line; echo kubeadm join edge.fleet.internal:6443 --token " + token + "; exit 3"})
	eventually(t, "the bootstrap failed", func() error {
		cond, err := hostCondition(ctx, c, ns, "broken", infrav1.HostProvisionedCondition)
		if err != nil {
			return err
		}
		if cond.Reason != infrav1.ProvisioningFailedReason {
			return fmt.Errorf("HostProvisioned %s", cond.Reason)
		}
		return nil
	})

	cli := newUserCLI(t, ns, "carol", true)
	var out string
	eventually(t, "kubectl fleet host logs --bootstrap", func() error {
		var err error
		out, err = cli.output("host", "logs", "logs-cp-0", "--bootstrap")
		return err
	})
	if strings.Contains(out, token) || !strings.Contains(out, "--token [REDACTED]") || !strings.Contains(out, "preflight output line") ||
		!strings.Contains(out, "runcmd 1/") || !strings.Contains(out, "failed: exit status 3") {
		t.Fatalf("host logs --bootstrap:\n%s", out)
	}

	t.Logf("kubectl fleet host logs logs-cp-0 --bootstrap:\n%s", out)
	out, err = cli.output("host", "facts", "logs-cp-0")
	must(t, err)
	t.Logf("kubectl fleet host facts logs-cp-0:\n%s", out)
	for _, want := range []string{"Hostname:      logs-cp-0", "fleet e2e sandbox", "Interfaces:", "Workload:      Failed"} {
		if !strings.Contains(out, want) {
			t.Errorf("host facts lacks %q:\n%s", want, out)
		}
	}

	// Follow the agent's log while the host is reset.
	fctx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	follow := exec.CommandContext(fctx, cli.bin, "host", "logs", "logs-cp-0", "-f", "--tail", "1", "-n", ns, "--kubeconfig", cli.kubeconfig)
	stdout, err := follow.StdoutPipe()
	must(t, err)
	must(t, follow.Start())
	lines := make(chan string, 1024)
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			lines <- s.Text()
		}
		close(lines)
	}()
	select {
	case <-lines:
	case <-fctx.Done():
		t.Fatal("the followed log printed nothing")
	}
	m := &unstructured.Unstructured{}
	m.SetAPIVersion("cluster.x-k8s.io/v1beta2")
	m.SetKind("Machine")
	m.SetNamespace(ns)
	m.SetName("broken")
	must(t, c.Delete(ctx, m))
	for seen := false; !seen; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the followed log ended")
			}
			seen = strings.Contains(strings.ToLower(l), "host reset")
		case <-fctx.Done():
			t.Fatal("the followed log never told of the reset")
		}
	}
	cancel()
	_ = follow.Wait()

	// Without the verb.
	dave := newUserCLI(t, ns, "dave", false)
	out, err = dave.output("host", "logs", "logs-cp-0", "--bootstrap")
	if err == nil || !strings.Contains(out, "forbidden") || !strings.Contains(out, "fleet-host-access") {
		t.Errorf("a user without the verb: %v\n%s", err, out)
	}
}

// userCLI runs the real kubectl-fleet as a user of the hub cluster.
type userCLI struct{ bin, kubeconfig, ns string }

func newUserCLI(t *testing.T, ns, user string, allowed bool) userCLI {
	t.Helper()
	cfg, err := hub.UserConfig(user)
	must(t, err)
	dir := t.TempDir()
	kc := filepath.Join(dir, "kubeconfig")
	must(t, testenv.WriteKubeconfigOf(cfg, kc))
	ctx := context.Background()
	// Reading the EdgeHosts is what every fleet user may.
	must(t, hub.Client.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: user}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{infrav1.GroupVersion.Group}, Resources: []string{"edgehosts"}, Verbs: []string{"get", "list"}}}}))
	must(t, hub.Client.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: user},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}))
	if allowed {
		role := &rbacv1.ClusterRole{}
		must(t, readManifest("manifests/rbac/host_access_role.yaml", role))
		if err := hub.Client.Create(ctx, role); err != nil && !strings.Contains(err.Error(), "already exists") {
			t.Fatal(err)
		}
		must(t, hub.Client.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: user + "-host-access"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}))
	}
	return userCLI{bin: build(t, dir, "./cmd/kubectl-fleet", "kubectl-fleet"), kubeconfig: kc, ns: ns}
}

func (u userCLI) output(args ...string) (string, error) {
	out, err := exec.Command(u.bin, append(args, "-n", u.ns, "--kubeconfig", u.kubeconfig)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl fleet %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// startFleetHubWithHostAccess runs the hub with its host-access API,
// registered with the hub cluster's aggregation layer.
func startFleetHubWithHostAccess(t *testing.T, ns, addr string) *gateway.Server {
	t.Helper()
	mgr, err := ctrl.NewManager(hub.Config, ctrl.Options{Scheme: hub.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, Logger: logr.Discard()})
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	h, err := fleethub.Setup(ctx, mgr, fleethub.Options{Reconcilers: hubreconcilers.Options{Concurrency: 4, SkipNameValidation: true},
		Gateway: &gateway.Options{Addr: addr, HubNamespace: ns, IPs: []net.IP{net.ParseIP("127.0.0.1")}},
		HostAccess: &hostaccess.Options{Addr: "127.0.0.1:0", Namespace: ns, Register: true, Service: "fleet-hub-host-access",
			ExternalName: "localhost"}})
	must(t, err)
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(ctx) }()
	<-h.Gateway.Ready()
	t.Cleanup(func() {
		cancel()
		<-done
		// The APIService is cluster-wide; a stale one would fail other
		// tests' discovery.
		a := &unstructured.Unstructured{}
		a.SetAPIVersion("apiregistration.k8s.io/v1")
		a.SetKind("APIService")
		a.SetName(accessapi.APIServiceName)
		_ = hub.Client.Delete(context.Background(), a)
	})
	return h.Gateway
}

// readManifest reads one object of the repository's manifests.
func readManifest(path string, into any) error {
	b, err := os.ReadFile(filepath.Join("..", "..", path))
	if err != nil {
		return err
	}
	return yaml.Unmarshal(b, into)
}
