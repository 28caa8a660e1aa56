package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/edgefleet/fleet/internal/testkit/testenv"
	"github.com/edgefleet/fleet/pkg/agent"
	"github.com/edgefleet/fleet/pkg/cli"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/hub/gateway"
)

var (
	env        *testenv.Env
	kubeconfig string
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(zap.New(zap.Level(zapcore.ErrorLevel)))
	var err error
	// The real Cluster API core and kubeadm bootstrap reconcilers and
	// fleet's hub run, so what the plugin writes is shown to be accepted.
	env, err = testenv.Start(context.Background(), testenv.Options{KubeadmBootstrap: true, HubConcurrency: 2})
	if err != nil {
		if errors.Is(err, testenv.ErrNoAssets) && os.Getenv("CI") != "true" {
			fmt.Fprintf(os.Stderr, "SKIP: %v\n", err)
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		os.Exit(1)
	}
	dir, _ := os.MkdirTemp("", "kubectl-fleet")
	kubeconfig = filepath.Join(dir, "kubeconfig")
	cfg := env.Config
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["test"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test", Namespace: "hosts"}
	kc.CurrentContext = "test"
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, ns := range []string{"fleet-system", "hosts"} {
		_ = env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	code := m.Run()
	_ = env.Stop()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// fleet runs `kubectl fleet args…` in-process and returns stdout, stderr.
func fleet(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := fleetTo(context.Background(), &out, &errOut, args...)
	return out.String(), errOut.String(), err
}

// fleetTo runs `kubectl fleet args…` in-process until it returns or ctx
// ends (Ctrl-C), writing to out and errOut.
func fleetTo(ctx context.Context, out, errOut io.Writer, args ...string) error {
	cmd := cli.NewRootCmd(genericiooptions.IOStreams{In: strings.NewReader(""), Out: out, ErrOut: errOut})
	cmd.SetArgs(append([]string{"--kubeconfig", kubeconfig}, args...))
	return cmd.ExecuteContext(ctx)
}

func startGateway(t *testing.T) *gateway.Server {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, Logger: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	gw, err := gateway.Setup(ctx, mgr, gateway.Options{Addr: addr, HubNamespace: "fleet-system",
		IPs: []net.IP{net.ParseIP("127.0.0.1")}, AdvertiseURL: "https://" + addr})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	<-gw.Ready()
	return gw
}

func enroll(t *testing.T, hubURL, pin, token, hostname string) error {
	t.Helper()
	root := t.TempDir()
	for p, c := range map[string]string{"etc/hostname": hostname + "\n", "etc/machine-id": hostname + "-machine-id\n"} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := agent.Config{Hub: hubURL, Token: token, CACertHash: pin, StateDir: filepath.Join(root, "state"), RootDir: root}
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	return agent.EnrollOnce(context.Background(), cfg)
}

var agentCmdRE = regexp.MustCompile(`fleet-agent --hub (\S+) \\\n\s+--ca-cert-hash (\S+) \\\n\s+--token (\S+)`)

// token create prints a complete agent command whose token the gateway
// accepts; list shows it used; revoke makes the gateway refuse a token.
func TestTokenLifecycle(t *testing.T) {
	gw := startGateway(t)
	out, stderr, err := fleet(t, "token", "create", "--usages", "1", "--labels", "site=store-17,topology.kubernetes.io/zone=eu-1")
	if err != nil {
		t.Fatalf("token create: %v\n%s", err, stderr)
	}
	m := agentCmdRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no agent command in:\n%s", out)
	}
	hubURL, pin, tok := m[1], m[2], m[3]
	if hubURL != "https://"+gw.Addr() || pin != gw.CA().Pin() {
		t.Fatalf("agent command has hub %s pin %s", hubURL, pin)
	}
	if err := enroll(t, hubURL, pin, tok, "kiosk-1"); err != nil {
		t.Fatalf("the gateway refused a token from `token create`: %v", err)
	}
	h := &infrav1.EdgeHost{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: "hosts", Name: "kiosk-1"}, h); err != nil {
		t.Fatalf("host not created in the context's namespace: %v", err)
	}
	if h.Labels["site"] != "store-17" || h.Labels[infrav1.ZoneLabel] != "eu-1" {
		t.Errorf("host labels %v", h.Labels)
	}

	id := strings.SplitN(tok, ".", 2)[0]
	out, _, err = fleet(t, "token", "list")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, id) || !strings.Contains(out, "1/1") || !strings.Contains(out, "used up") ||
		strings.Contains(out, tok) || !strings.HasPrefix(out, "ID") {
		t.Errorf("token list:\n%s", out)
	}

	out, _, err = fleet(t, "token", "create", "--usages", "0")
	if err != nil {
		t.Fatal(err)
	}
	tok2 := agentCmdRE.FindStringSubmatch(out)[3]
	if _, _, err := fleet(t, "token", "revoke", tok2); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	var ee *agent.EnrollError
	if err := enroll(t, hubURL, pin, tok2, "kiosk-2"); !errors.As(err, &ee) || !strings.Contains(ee.Message, "revoked") {
		t.Fatalf("enrolling with a revoked token: %v", err)
	}
	if _, _, err := fleet(t, "token", "revoke", "zzzzzz"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("revoking an unknown token: %v", err)
	}
	if _, _, err := fleet(t, "token", "create", "--labels", "novalue"); err == nil || !strings.Contains(err.Error(), "key=value") {
		t.Errorf("bad labels: %v", err)
	}
}

// get hosts prints kubectl-style tables and the usual output formats. The
// table is the API server's, from the CRD's printer columns, so an empty
// column (CLAIMED-BY) is blank and LAST-SEEN is an age, as in kubectl get.
func TestGetHosts(t *testing.T) {
	ctx := context.Background()
	for _, n := range []string{"table-a", "table-b"} {
		h := &infrav1.EdgeHost{ObjectMeta: metav1.ObjectMeta{Namespace: "hosts", Name: n, Labels: map[string]string{"site": n}}}
		if err := env.Client.Create(ctx, h); err != nil {
			t.Fatal(err)
		}
		seen := metav1.NewTime(time.Now().Add(-2 * time.Minute))
		// The hub's EdgeHost reconciler runs here too: retry on conflict,
		// and add to its conditions rather than replace them.
		if err := setStatus(h, func() {
			h.Status.Phase = infrav1.HostAvailable
			h.Status.Facts.AgentVersion = "v0.1.0"
			h.Status.Facts.OS = "Debian 12"
			h.Status.LastSeenTime = &seen
			h.Status.Conditions = append(h.Status.Conditions, metav1.Condition{Type: infrav1.AgentConnectedCondition,
				Status: "True", Reason: "Connected", LastTransitionTime: seen})
		}); err != nil {
			t.Fatal(err)
		}
	}
	out, _, err := fleet(t, "get", "hosts", "-l", "site=table-a")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !regexp.MustCompile(`^NAME\s+PHASE\s+CLAIMED-BY\s+CONNECTED\s+LAST-SEEN\s+AGENT\s+AGE$`).MatchString(lines[0]) ||
		!regexp.MustCompile(`^table-a\s+Available\s+True\s+2m\d*s?\s+v0.1.0\s+\S+$`).MatchString(lines[1]) {
		t.Errorf("get hosts:\n%s", out)
	}
	out, _, err = fleet(t, "get", "hosts", "-o", "wide", "-l", "site=table-b")
	if err != nil || !strings.Contains(out, "LABELS") || !strings.Contains(out, "site=table-b") || !strings.Contains(out, "Debian 12") {
		t.Errorf("get hosts -o wide: %v\n%s", err, out)
	}
	out, _, err = fleet(t, "get", "hosts", "-o", "name", "-l", "site in (table-a,table-b)")
	if err != nil || strings.TrimSpace(out) != "edgehost.infrastructure.cluster.x-k8s.io/table-a\nedgehost.infrastructure.cluster.x-k8s.io/table-b" {
		t.Errorf("get hosts -o name: %v\n%s", err, out)
	}
	out, _, err = fleet(t, "get", "hosts", "-o", "json", "-l", "site=table-a")
	var list infrav1.EdgeHostList
	if err != nil || json.Unmarshal([]byte(out), &list) != nil || len(list.Items) != 1 || list.Items[0].Name != "table-a" {
		t.Errorf("get hosts -o json: %v\n%s", err, out)
	}
	_, stderr, err := fleet(t, "get", "machines", "-n", "empty-ns")
	if err != nil || !strings.Contains(stderr, "No resources found in empty-ns namespace.") {
		t.Errorf("empty namespace: %v %q", err, stderr)
	}
	if _, _, err := fleet(t, "get", "widgets"); err == nil || !strings.Contains(err.Error(), "want clusters, machines, hosts, rollouts or releases") {
		t.Errorf("unknown kind: %v", err)
	}
}

func TestErrorsAndVersion(t *testing.T) {
	if _, _, err := fleet(t, "--context", "nope", "get", "hosts"); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("unknown context: %v", err)
	}
	out, _, err := fleet(t, "version", "--client")
	if err != nil || !strings.HasPrefix(out, "kubectl-fleet: ") {
		t.Errorf("version: %v %q", err, out)
	}
	if _, _, err := fleet(t, "token", "create", "--hub-namespace", "missing"); err == nil || !strings.Contains(err.Error(), "no fleet hub found") {
		t.Errorf("no hub: %v", err)
	}
}

// version reports the hub's version when the hub is reachable.
func TestVersionWithHub(t *testing.T) {
	startGateway(t)
	out, _, err := fleet(t, "version")
	if err != nil || !strings.Contains(out, "kubectl-fleet: ") || !strings.Contains(out, "fleet-hub: dev") {
		t.Errorf("version: %v\n%s", err, out)
	}
}
