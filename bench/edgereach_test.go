package bench

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgefleet/fleet/pkg/enrolltoken"
	"github.com/edgefleet/fleet/pkg/hub/enrollment"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/edgefleet/fleet/pkg/agent"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/hub"
	"github.com/edgefleet/fleet/pkg/hub/gateway"
	"github.com/edgefleet/fleet/pkg/hub/reach"
	hubreconcilers "github.com/edgefleet/fleet/pkg/hub/reconcilers"
	"github.com/edgefleet/fleet/pkg/pki"
)

// reachRig is one edge cluster reached through one agent: a TLS server
// with a certificate for the endpoint name plays its API server, a real
// agent (in this process) carries the tunnels, the hub's gateway and
// proxy run in this process too.
type reachRig struct {
	endpoint  string // host:port
	rootCAs   *x509.CertPool
	proxyURL  *url.URL // with the cluster's credentials
	proxyAddr string
	direct    string // the server's address, dialled without the tunnel
}

const streamChunk = 64 << 10

func startReachRig(b *testing.B) *reachRig {
	b.Helper()
	ctrl.SetLogger(logr.Discard())
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	ns, err := env.CreateNamespace(ctx, "reach")
	if err != nil {
		b.Fatal(err)
	}
	name := "bench." + ns + ".fleet.internal"

	// The edge cluster's "API server": small answers and long streams.
	ca, err := pki.NewCA("bench-cluster-ca", time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	serving, err := ca.ServingCertificate([]string{name}, nil, time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	small := []byte(strings.Repeat("x", 1024))
	chunk := make([]byte, streamChunk)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n, err := strconv.Atoi(r.URL.Query().Get("bytes")); err == nil {
			w.Header().Set("Content-Length", strconv.Itoa(n))
			for ; n > 0; n -= len(chunk) {
				if _, err := w.Write(chunk[:min(n, len(chunk))]); err != nil {
					return
				}
			}
			return
		}
		_, _ = w.Write(small)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{serving}}
	// Tunnels opened only to be counted close without a handshake.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	b.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	portN, _ := strconv.Atoi(port)

	// The hub: reconcilers, gateway and edge-reach proxy.
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Logger: logr.Discard(), Cache: cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}}})
	if err != nil {
		b.Fatal(err)
	}
	h, err := hub.Setup(ctx, mgr, hub.Options{Reconcilers: hubreconcilers.Options{Concurrency: 2, SkipNameValidation: true},
		Gateway: &gateway.Options{Addr: "127.0.0.1:0", HubNamespace: ns, IPs: []net.IP{net.ParseIP("127.0.0.1")}},
		Reach:   &reach.SetupOptions{Options: reach.Options{Addr: "127.0.0.1:0"}, AdvertiseURL: "http://127.0.0.1:1"}})
	if err != nil {
		b.Fatal(err)
	}
	gw, proxy := h.Gateway, h.Proxy
	go func() { _ = mgr.Start(ctx) }()
	<-gw.Ready()
	<-proxy.Ready()

	c := env.Client
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: "bench", Namespace: ns},
		Spec: clusterv1.ClusterSpec{
			InfrastructureRef:    clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "EdgeCluster", Name: "bench"},
			ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: name, Port: int32(portN)},
		},
	}
	must(b, c.Create(ctx, cluster))

	// One real agent, enrolled, holding a control-plane claim of the
	// cluster (no bootstrap: nothing to provision, only to carry).
	token, _, err := enrollment.CreateToken(ctx, c, ns, enrolltoken.Options{TTL: time.Hour, HostNamespace: ns}, time.Now())
	must(b, err)
	root := b.TempDir()
	must(b, os.MkdirAll(filepath.Join(root, "etc"), 0o755))
	must(b, os.WriteFile(filepath.Join(root, "etc", "hostname"), []byte("bench-0\n"), 0o644))
	must(b, os.WriteFile(filepath.Join(root, "etc", "machine-id"), []byte(fmt.Sprintf("%032x\n", 1)), 0o644))
	cfg := agent.Config{Hub: "https://" + gw.Addr(), Token: token, CACertHash: gw.CA().Pin(),
		StateDir: b.TempDir(), RootDir: root, LinkInterval: -1}
	must(b, cfg.Complete())
	alog := &strings.Builder{}
	var alogMu sync.Mutex
	a := agent.New(cfg, agent.Unavailable{}, funcr.New(func(prefix, args string) {
		alogMu.Lock()
		defer alogMu.Unlock()
		if alog.Len() < 1<<20 {
			alog.WriteString(prefix + " " + args + "\n")
		}
	}, funcr.Options{}))
	b.Cleanup(func() {
		if b.Failed() {
			alogMu.Lock()
			defer alogMu.Unlock()
			b.Logf("agent log:\n%s", alog.String())
		}
	})
	go func() { _ = a.Run(ctx, nil) }()
	var host *infrav1.EdgeHost
	waitFor(b, "the agent's EdgeHost", func() error {
		hosts := &infrav1.EdgeHostList{}
		if err := c.List(ctx, hosts, client.InNamespace(ns)); err != nil || len(hosts.Items) != 1 {
			return fmt.Errorf("%d hosts, %v", len(hosts.Items), err)
		}
		host = &hosts.Items[0]
		return nil
	})
	em := &infrav1.EdgeMachine{ObjectMeta: metav1.ObjectMeta{Name: "bench-cp", Namespace: ns,
		Labels: map[string]string{clusterv1.ClusterNameLabel: "bench"}}}
	must(b, c.Create(ctx, em))
	waitFor(b, "the claim", func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(host), host); err != nil {
			return err
		}
		host.Spec.ClaimRef = &infrav1.HostClaimReference{Name: em.Name, UID: em.UID}
		host.Labels[infrav1.ClaimedByLabel] = em.Name
		host.Labels[infrav1.ClusterLabel] = "bench"
		host.Labels[infrav1.ControlPlaneLabel] = "true"
		return c.Update(ctx, host)
	})

	user, password := reach.NewCredentials(gw.CA()).For(cluster)
	rig := &reachRig{endpoint: net.JoinHostPort(name, port), rootCAs: x509.NewCertPool(), proxyAddr: proxy.Addr(),
		proxyURL: &url.URL{Scheme: "http", Host: proxy.Addr(), User: url.UserPassword(user, password)}}
	rig.rootCAs.AddCert(ca.Cert)
	// Ready once a request goes through (the agent has its Reach).
	tr := rig.transport(true, true)
	waitFor(b, "a first request through the tunnel", func() error {
		resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get("https://" + rig.endpoint + "/")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})
	tr.CloseIdleConnections()
	// The direct path needs the name to resolve here: it dials the server.
	rig.direct = srv.Listener.Addr().String()
	return rig
}

func (r *reachRig) transport(viaProxy, keepAlive bool) *http.Transport {
	t := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: r.rootCAs},
		DisableKeepAlives:   !keepAlive,
		MaxIdleConnsPerHost: 64,
		ForceAttemptHTTP2:   false,
	}
	if viaProxy {
		t.Proxy = http.ProxyURL(r.proxyURL)
	} else {
		d := net.Dialer{}
		t.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, r.direct)
		}
	}
	return t
}

// client makes an HTTP client whose connections (and tunnels) are closed
// when the (sub-)benchmark ends, and waits until the tunnels of earlier
// runs are gone: an agent carries 32 at most.
func (r *reachRig) client(b *testing.B, viaProxy, keepAlive bool) *http.Client {
	b.Helper()
	waitFor(b, "earlier tunnels closed", func() error {
		if n := tunnelsOpen(b); n != 0 {
			return fmt.Errorf("%v tunnels still open", n)
		}
		return nil
	})
	tr := r.transport(viaProxy, keepAlive)
	b.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func tunnelsOpen(b *testing.B) float64 {
	families, err := ctrlmetrics.Registry.Gather()
	must(b, err)
	for _, f := range families {
		if f.GetName() == "fleet_reach_tunnels_open" {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return 0
}

func waitFor(b *testing.B, what string, cond func() error) {
	b.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func must(b *testing.B, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
}

func get(b *testing.B, c *http.Client, u string) {
	resp, err := c.Get(u)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("status %d", resp.StatusCode)
	}
}

// BenchmarkEdgeReach compares the tunnel with a direct connection to the
// same TLS server: a small request on an open connection, a request on a
// new connection (TLS handshake, and the CONNECT and agent dial for the
// tunnel), bulk throughput, and 32 tunnels (an agent's maximum) at once.
// Everything runs on this machine, so the figures are the tunnel's own
// cost: no real WAN round trip is in either path.
func BenchmarkEdgeReach(b *testing.B) {
	rig := startReachRig(b)
	for _, path := range []struct {
		name  string
		proxy bool
	}{{"direct", false}, {"tunnel", true}} {
		b.Run("request/"+path.name, func(b *testing.B) {
			c := rig.client(b, path.proxy, true)
			get(b, c, "https://"+rig.endpoint+"/")
			b.ResetTimer()
			for range b.N {
				get(b, c, "https://"+rig.endpoint+"/")
			}
		})
		b.Run("new-connection/"+path.name, func(b *testing.B) {
			c := rig.client(b, path.proxy, false)
			for range b.N {
				get(b, c, "https://"+rig.endpoint+"/")
			}
		})
		b.Run("throughput/"+path.name, func(b *testing.B) {
			const size = 64 << 20
			c := rig.client(b, path.proxy, true)
			b.SetBytes(size)
			for range b.N {
				get(b, c, fmt.Sprintf("https://%s/?bytes=%d", rig.endpoint, size))
			}
		})
		b.Run("concurrent-32/"+path.name, func(b *testing.B) {
			// 32 clients, each on its own connection (its own tunnel).
			clients := make([]*http.Client, 32)
			for i := range clients {
				clients[i] = rig.client(b, path.proxy, true)
			}
			var wg sync.WaitGroup
			per := max(b.N/32, 1)
			b.ResetTimer()
			for _, c := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range per {
						get(b, c, "https://"+rig.endpoint+"/")
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(per*32)/b.Elapsed().Seconds(), "req/s")
		})
	}
	// An agent carries 32 tunnels; the 33rd goes to another agent of the
	// cluster, and with none the proxy says so.
	b.Run("tunnels-per-agent", func(b *testing.B) {
		rig.client(b, true, false) // waits for earlier tunnels to close
		open := 0
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for i := 0; i < 40; i++ {
			c, ok := rawConnect(b, rig)
			if !ok {
				break
			}
			conns = append(conns, c)
			open++
		}
		if open != agent.MaxTunnels {
			b.Fatalf("%d tunnels opened on one agent, want %d", open, agent.MaxTunnels)
		}
		b.ReportMetric(float64(open), "tunnels/agent")
	})
}

// rawConnect opens a tunnel and keeps it; false when the proxy refuses.
func rawConnect(b *testing.B, rig *reachRig) (net.Conn, bool) {
	b.Helper()
	c, err := net.Dial("tcp", rig.proxyAddr)
	must(b, err)
	password, _ := rig.proxyURL.User.Password()
	auth := base64.StdEncoding.EncodeToString([]byte(rig.proxyURL.User.Username() + ":" + password))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\n\r\n", rig.endpoint, rig.endpoint, auth)
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	must(b, err)
	if resp.StatusCode != http.StatusOK {
		c.Close()
		return nil, false
	}
	return c, true
}
