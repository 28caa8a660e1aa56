package reach

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/pki"
)

// echoDialer plays the agents: each tunnel answers what it reads,
// upper-cased, or fails as told.
type echoDialer struct {
	mu    sync.Mutex
	err   error
	calls []string
	hold  chan struct{} // when set, tunnels stay open until closed
}

func (d *echoDialer) DialCluster(_ context.Context, ns, cluster, target string) (net.Conn, string, error) {
	d.mu.Lock()
	d.calls = append(d.calls, ns+"/"+cluster+"→"+target)
	err, hold := d.err, d.hold
	d.mu.Unlock()
	if err != nil {
		return nil, "", err
	}
	a, b := net.Pipe()
	go func() {
		defer b.Close()
		if hold != nil {
			<-hold
			return
		}
		buf := make([]byte, 64)
		n, _ := b.Read(buf)
		_, _ = b.Write([]byte(strings.ToUpper(string(buf[:n]))))
	}()
	return a, "host-1", nil
}

func fleetCluster(name string, annotations map[string]string) *clusterv1.Cluster {
	return &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "site-a", UID: types.UID("uid-" + name), Annotations: annotations},
		Spec: clusterv1.ClusterSpec{
			InfrastructureRef:    clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "EdgeCluster", Name: name},
			ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: name + ".site-a.fleet.internal", Port: 6443},
		},
	}
}

func newTestProxy(t *testing.T, d *echoDialer, maxTunnels int) (*httptest.Server, *Credentials) {
	t.Helper()
	ca, err := pki.NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	creds := NewCredentials(ca)
	scheme := runtime.NewScheme()
	_ = clusterv1.AddToScheme(scheme)
	other := fleetCluster("other", nil)
	other.Spec.InfrastructureRef.Kind = "DockerCluster"
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		fleetCluster("edge", nil), fleetCluster("off", map[string]string{infrav1.EdgeReachAnnotation: "disabled"}), other).Build()
	p := New(Options{MaxTunnels: maxTunnels}, c, d, func() *Credentials { return creds })
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return srv, creds
}

func basic(user, password string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
}

// connect sends a CONNECT and returns the status, the body and the open
// connection (for a 200).
func connect(t *testing.T, srv *httptest.Server, target, auth string) (int, string, net.Conn) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	req := fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\n", target, target)
	if auth != "" {
		req += "Proxy-Authorization: " + auth + "\r\n"
	}
	if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode == http.StatusOK {
		return 200, "", &bufferedConn{Conn: conn, r: br}
	}
	body, _ := io.ReadAll(resp.Body)
	conn.Close()
	if resp.StatusCode == http.StatusProxyAuthRequired && resp.Header.Get("Proxy-Authenticate") == "" {
		t.Error("407 without Proxy-Authenticate")
	}
	return resp.StatusCode, strings.TrimSpace(string(body)), nil
}

func TestProxyCarriesAnAuthorisedConnect(t *testing.T) {
	d := &echoDialer{}
	srv, creds := newTestProxy(t, d, 0)
	user, password := creds.For(fleetCluster("edge", nil))
	code, body, conn := connect(t, srv, "edge.site-a.fleet.internal:6443", basic(user, password))
	if code != 200 {
		t.Fatalf("status %d: %s", code, body)
	}
	defer conn.Close()
	_, _ = conn.Write([]byte("ping"))
	buf := make([]byte, 4)
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "PING" {
		t.Fatalf("read %q, %v", buf, err)
	}
	if len(d.calls) != 1 || d.calls[0] != "site-a/edge→edge.site-a.fleet.internal:6443" {
		t.Errorf("dials: %v", d.calls)
	}
}

func TestProxyRefusals(t *testing.T) {
	d := &echoDialer{}
	srv, creds := newTestProxy(t, d, 0)
	user, password := creds.For(fleetCluster("edge", nil))
	offUser, offPassword := creds.For(fleetCluster("off", nil))
	otherUser, otherPassword := creds.For(fleetCluster("other", nil))
	for _, tc := range []struct {
		name, target, auth string
		want               int
		says               string
	}{
		{"no credentials", "edge.site-a.fleet.internal:6443", "", 407, "proxy credentials required"},
		{"not Basic", "edge.site-a.fleet.internal:6443", "Bearer " + password, 407, "proxy credentials required"},
		{"wrong password", "edge.site-a.fleet.internal:6443", basic(user, password+"x"), 407, "not valid"},
		{"unknown cluster", "edge.site-a.fleet.internal:6443", basic("site-a/nope", password), 407, "not valid"},
		{"malformed user", "edge.site-a.fleet.internal:6443", basic("edge", password), 407, "not valid"},
		{"another port", "edge.site-a.fleet.internal:22", basic(user, password), 403, "open only its API endpoint"},
		{"a private address", "10.0.0.5:6443", basic(user, password), 403, "open only its API endpoint"},
		{"another cluster's endpoint", "off.site-a.fleet.internal:6443", basic(user, password), 403, "open only its API endpoint"},
		{"edge reach disabled", "off.site-a.fleet.internal:6443", basic(offUser, offPassword), 403, "disabled"},
		{"not a fleet cluster", "other.site-a.fleet.internal:6443", basic(otherUser, otherPassword), 403, "not a fleet cluster"},
	} {
		code, body, conn := connect(t, srv, tc.target, tc.auth)
		if conn != nil {
			conn.Close()
		}
		if code != tc.want || !strings.Contains(body, tc.says) {
			t.Errorf("%s: %d %q, want %d saying %q", tc.name, code, body, tc.want, tc.says)
		}
	}
	resp, err := http.Get(srv.URL + "/anything")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d", resp.StatusCode)
	}
	if len(d.calls) != 0 {
		t.Errorf("refused requests reached the agents: %v", d.calls)
	}
}

func TestProxyNamesTheClusterWithoutAgents(t *testing.T) {
	d := &echoDialer{err: &ErrNoAgent{Namespace: "site-a", Cluster: "edge"}}
	srv, creds := newTestProxy(t, d, 0)
	user, password := creds.For(fleetCluster("edge", nil))
	code, body, _ := connect(t, srv, "edge.site-a.fleet.internal:6443", basic(user, password))
	if code != http.StatusBadGateway || body != "no agent of cluster site-a/edge is connected to the hub" {
		t.Fatalf("%d %q", code, body)
	}
	// What a Go client (client-go, kubectl, Cluster API) shows: only the
	// status line of a failed CONNECT, so the reason must be there.
	proxyURL, _ := url.Parse(srv.URL)
	proxyURL.User = url.UserPassword(user, password)
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}, Timeout: 10 * time.Second}
	_, err := c.Get("https://edge.site-a.fleet.internal:6443/version")
	if err == nil || !strings.Contains(err.Error(), "no agent of cluster site-a/edge is connected to the hub") {
		t.Fatalf("client error %v", err)
	}
}

func TestProxyLimitsTunnels(t *testing.T) {
	d := &echoDialer{hold: make(chan struct{})}
	defer close(d.hold)
	srv, creds := newTestProxy(t, d, 1)
	user, password := creds.For(fleetCluster("edge", nil))
	code, _, conn := connect(t, srv, "edge.site-a.fleet.internal:6443", basic(user, password))
	if code != 200 {
		t.Fatalf("first: %d", code)
	}
	defer conn.Close()
	code, body, _ := connect(t, srv, "edge.site-a.fleet.internal:6443", basic(user, password))
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "maximum of 1 tunnels") {
		t.Fatalf("second: %d %q", code, body)
	}
}

// A re-created cluster (new uid) gets a new credential: the old one no
// longer opens it.
func TestCredentialsAreBoundToTheClusterUID(t *testing.T) {
	ca, _ := pki.NewCA("test", time.Hour)
	creds := NewCredentials(ca)
	old := fleetCluster("edge", nil)
	_, password := creds.For(old)
	recreated := old.DeepCopy()
	recreated.UID = "another"
	if creds.Valid(recreated, password) || !creds.Valid(old, password) {
		t.Fatal("credential not bound to the uid")
	}
	other, _ := pki.NewCA("test", time.Hour)
	if NewCredentials(other).Valid(old, password) {
		t.Fatal("credential valid under another hub CA")
	}
}

func TestWithProxyURL(t *testing.T) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["edge"] = &clientcmdapi.Cluster{Server: "https://edge.site-a.fleet.internal:6443"}
	raw, _ := clientcmd.Write(*cfg)
	out, changed, err := withProxyURL(raw, "http://u:p@hub:7444")
	if err != nil || !changed {
		t.Fatalf("set: %v %v", changed, err)
	}
	if _, changed, _ := withProxyURL(out, "http://u:p@hub:7444"); changed {
		t.Error("setting the same proxy-url again changed the kubeconfig")
	}
	got, _ := clientcmd.Load(out)
	if got.Clusters["edge"].ProxyURL != "http://u:p@hub:7444" || got.Clusters["edge"].Server != "https://edge.site-a.fleet.internal:6443" {
		t.Fatalf("cluster entry: %+v", got.Clusters["edge"])
	}
	back, changed, _ := withProxyURL(out, "")
	got, _ = clientcmd.Load(back)
	if !changed || got.Clusters["edge"].ProxyURL != "" {
		t.Error("proxy-url not removed")
	}
	if _, _, err := withProxyURL([]byte("not: [yaml"), "x"); err == nil {
		t.Error("bad kubeconfig accepted")
	}
}

// Several hub replicas: a CONNECT that lands on a replica without the
// cluster's agents is carried on to the replica that has them, once.
func TestProxyForwardsToTheReplicaWithTheAgents(t *testing.T) {
	ca, err := pki.NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	creds := NewCredentials(ca)
	scheme := runtime.NewScheme()
	_ = clusterv1.AddToScheme(scheme)
	_ = infrav1.AddToScheme(scheme)
	host := &infrav1.EdgeHost{ObjectMeta: metav1.ObjectMeta{Name: "h1", Namespace: "site-a",
		Labels: map[string]string{infrav1.ClusterLabel: "edge"}}}
	withAgents := &echoDialer{}
	b := httptest.NewUnstartedServer(nil)
	// Replica b holds the host's session and recorded where its proxy is.
	host.Status.HubReplica, host.Status.HubReplicaProxy = "hub-b", b.Listener.Addr().String()
	// A host of replica c, which takes no forwarded CONNECTs.
	other := host.DeepCopy()
	other.Name, other.Status.HubReplica, other.Status.HubReplicaProxy = "h2", "hub-c", ""
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(fleetCluster("edge", nil), host, other).Build()
	b.Config.Handler = New(Options{ReplicaName: "hub-b"}, c, withAgents, func() *Credentials { return creds })
	b.Start()
	defer b.Close()
	without := &echoDialer{err: &ErrNoAgent{Namespace: "site-a", Cluster: "edge"}}
	a := httptest.NewServer(New(Options{ReplicaName: "hub-a", Forward: true}, c, without, func() *Credentials { return creds }))
	defer a.Close()

	user, password := creds.For(fleetCluster("edge", nil))
	code, body, conn := connect(t, a, "edge.site-a.fleet.internal:6443", basic(user, password))
	if code != 200 {
		t.Fatalf("through replica a: %d %s", code, body)
	}
	_, _ = conn.Write([]byte("ping"))
	buf := make([]byte, 4)
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "PING" {
		t.Fatalf("read %q, %v", buf, err)
	}
	conn.Close()
	if len(withAgents.calls) != 1 || len(without.calls) != 1 {
		t.Errorf("dials: replica b %v, replica a %v", withAgents.calls, without.calls)
	}

	// The agents moved back to replica a's side and b has none either:
	// no ping-pong between replicas, a clear error.
	withAgents.mu.Lock()
	withAgents.err = &ErrNoAgent{Namespace: "site-a", Cluster: "edge"}
	withAgents.mu.Unlock()
	code, body, _ = connect(t, a, "edge.site-a.fleet.internal:6443", basic(user, password))
	if code != http.StatusBadGateway || !strings.Contains(body, "via hub replica hub-b") || !strings.Contains(body, "no agent of cluster site-a/edge") {
		t.Fatalf("%d %q", code, body)
	}
	withAgents.mu.Lock()
	defer withAgents.mu.Unlock()
	if len(withAgents.calls) != 2 {
		t.Errorf("replica b dialled %d times, want 2 (no forwarding back)", len(withAgents.calls))
	}
}

// Bumping a cluster's credential epoch retires the credential handed out
// before: the proxy refuses it and accepts only the new one; epoch 0 is the
// credential of a cluster that never had one.
func TestRotatedCredentialIsRefused(t *testing.T) {
	ca, err := pki.NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	creds := NewCredentials(ca)
	scheme := runtime.NewScheme()
	_ = clusterv1.AddToScheme(scheme)
	cluster := fleetCluster("edge", nil)
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(cluster).Build()
	d := &echoDialer{}
	srv := httptest.NewServer(New(Options{}, c, d, func() *Credentials { return creds }))
	t.Cleanup(srv.Close)

	user, leaked := creds.For(cluster)
	if _, zero := creds.For(fleetCluster("edge", map[string]string{infrav1.ReachCredentialEpochAnnotation: "0"})); zero != leaked {
		t.Fatal("epoch 0 changed the credential")
	}
	if code, body, conn := connect(t, srv, "edge.site-a.fleet.internal:6443", basic(user, leaked)); code != http.StatusOK {
		t.Fatalf("before the rotation: %d %q", code, body)
	} else {
		conn.Close()
	}
	cluster.Annotations = map[string]string{infrav1.ReachCredentialEpochAnnotation: "1"}
	if err := c.Update(context.Background(), cluster); err != nil {
		t.Fatal(err)
	}
	if code, body, conn := connect(t, srv, "edge.site-a.fleet.internal:6443", basic(user, leaked)); code != http.StatusProxyAuthRequired {
		if conn != nil {
			conn.Close()
		}
		t.Fatalf("the retired credential: %d %q, want 407", code, body)
	}
	_, fresh := creds.For(cluster)
	if code, body, conn := connect(t, srv, "edge.site-a.fleet.internal:6443", basic(user, fresh)); code != http.StatusOK {
		t.Fatalf("the new credential: %d %q", code, body)
	} else {
		conn.Close()
	}
}
