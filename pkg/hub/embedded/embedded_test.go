package embedded

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/internal/testkit"
	"github.com/edgefleet/fleet/pkg/contract/hostaccess"
	"github.com/edgefleet/fleet/pkg/hub/embedded/clusterapi"
)

// The gateway's certificate names what agents dial: loopback, the
// advertised host and the extra names, once each.
func TestGatewayNames(t *testing.T) {
	ips := gatewayIPs("https://10.98.0.1:8443", []net.IP{net.ParseIP("192.168.1.20"), net.ParseIP("10.98.0.1")})
	var got []string
	for _, ip := range ips {
		got = append(got, ip.String())
	}
	if want := []string{"127.0.0.1", "10.98.0.1", "192.168.1.20"}; !slices.Equal(got, want) {
		t.Errorf("gatewayIPs: %v, want %v", got, want)
	}
	names := gatewayDNSNames("https://hub.lan:7443", []string{" gw.example.com", "", "localhost"})
	if want := []string{"localhost", "hub.lan", "gw.example.com"}; !slices.Equal(names, want) {
		t.Errorf("gatewayDNSNames: %v, want %v", names, want)
	}
	if got := gatewayDNSNames("https://127.0.0.1:7443", nil); !slices.Equal(got, []string{"localhost"}) {
		t.Errorf("gatewayDNSNames of an address: %v", got)
	}
}

// The embedded hub runs the KubeadmControlPlane and MachineHealthCheck
// reconcilers and the edge-reach proxy, which asks a CONNECT without credentials for them.
func TestRunServesEdgeReachAndKubeadmControlPlane(t *testing.T) {
	bin := os.Getenv("KUBEBUILDER_ASSETS")
	if bin == "" {
		bin, _ = filepath.Abs(filepath.Join("..", "..", "..", "bin", "k8s"))
	}
	if _, err := os.Stat(filepath.Join(bin, "kube-apiserver")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no kube-apiserver in %s", bin)
		}
		t.Skipf("no kube-apiserver in %s: run make k8s", bin)
	}
	logs := &testkit.SyncBuffer{}
	progress := &testkit.SyncBuffer{}
	o := Options{DataDir: t.TempDir(), BinDir: bin, GatewayAddr: testkit.FreeAddr(t), ProxyAddr: testkit.FreeAddr(t),
		GatewayIPs: []net.IP{net.ParseIP("10.98.0.1")}, Progress: progress,
		Logger: funcr.New(func(prefix, args string) { fmt.Fprintln(logs, prefix, args) }, funcr.Options{})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	testkit.Eventually(t, 3*time.Minute, 200*time.Millisecond, "the embedded hub ready", func() error {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("Run returned before it was ready: %v\n%s", err, progress.String())
		default:
		}
		if !strings.Contains(progress.String(), " is ready") {
			return fmt.Errorf("progress: %q", progress.String())
		}
		return nil
	})
	if want := "edge reach: " + o.ProxyAddr; !strings.Contains(progress.String(), want) {
		t.Errorf("the ready lines lack %q:\n%s", want, progress.String())
	}

	conn, err := net.DialTimeout("tcp", o.ProxyAddr, 5*time.Second)
	if err != nil {
		t.Fatalf("the edge-reach proxy is not listening on %s: %v", o.ProxyAddr, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "CONNECT demo.default.fleet.internal:6443 HTTP/1.1\r\nHost: demo.default.fleet.internal:6443\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the proxy's answer: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusProxyAuthRequired {
		t.Errorf("CONNECT without credentials: %s, want 407", resp.Status)
	}

	checkWebhooks(t, progress.String())
	checkHostAccess(t, progress.String())

	for _, controller := range []string{"kubeadmcontrolplane", "machinehealthcheck"} {
		testkit.Eventually(t, time.Minute, 200*time.Millisecond, "the "+controller+" controller started", func() error {
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, "Starting workers") && strings.Contains(l, `"controller"="`+controller+`"`) {
					return nil
				}
			}
			return fmt.Errorf("no %s workers in the log yet", controller)
		})
	}
}

// checkHostAccess asks the embedded hub's API server for the host-access
// API, which its aggregation layer serves from the hub.
func checkHostAccess(t *testing.T, progress string) {
	t.Helper()
	_, rest, _ := strings.Cut(progress, "kubeconfig: ")
	path, _, _ := strings.Cut(rest, "\n")
	cfg, err := clientcmd.BuildConfigFromFlags("", strings.TrimSpace(path))
	if err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Minute, 200*time.Millisecond, "the host-access API through the aggregation layer", func() error {
		l, err := dc.ServerResourcesForGroupVersion(hostaccess.GroupVersion)
		if err != nil {
			return err
		}
		if len(l.APIResources) != 2 {
			return fmt.Errorf("resources %v", l.APIResources)
		}
		return nil
	})
}

// checkWebhooks asks the embedded hub's API server for what a real
// management cluster refuses, a one-replica KubeadmControlPlane that would
// scale in: Cluster API's own webhook must refuse it.
func checkWebhooks(t *testing.T, progress string) {
	t.Helper()
	_, rest, ok := strings.Cut(progress, "kubeconfig: ")
	if !ok {
		t.Fatalf("no kubeconfig in the ready lines:\n%s", progress)
	}
	path, _, _ := strings.Cut(rest, "\n")
	cfg, err := clientcmd.BuildConfigFromFlags("", strings.TrimSpace(path))
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: clusterapi.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	kcp := &controlplanev1.KubeadmControlPlane{
		ObjectMeta: metav1.ObjectMeta{Name: "one", Namespace: "default"},
		Spec: controlplanev1.KubeadmControlPlaneSpec{Replicas: ptr.To[int32](1), Version: "v1.36.3",
			Rollout: controlplanev1.KubeadmControlPlaneRolloutSpec{Strategy: controlplanev1.KubeadmControlPlaneRolloutStrategy{
				RollingUpdate: controlplanev1.KubeadmControlPlaneRolloutStrategyRollingUpdate{MaxSurge: ptr.To(intstr.FromInt32(0))}}},
			MachineTemplate: controlplanev1.KubeadmControlPlaneMachineTemplate{Spec: controlplanev1.KubeadmControlPlaneMachineTemplateSpec{
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "EdgeMachineTemplate", Name: "one"}}}},
	}
	err = c.Create(context.Background(), kcp)
	if err == nil || !strings.Contains(err.Error(), "replica count needs to be at least 3") {
		t.Errorf("fleet-hub dev took a one-replica KubeadmControlPlane with maxSurge 0 that Cluster API's webhook refuses: %v", err)
	}
}
