package load

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgefleet/fleet/pkg/pki"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// SiteAPI plays the API servers of many simulated one-host clusters with
// one kube-apiserver behind a TLS front, where edge reach ends: a tunnel
// to a cluster's endpoint is dialled on its control-plane host at
// 127.0.0.1:6443, so every host of this machine reaches the same front.
// The front tells the clusters apart by the endpoint name the client asks
// for (TLS SNI), as a real site's API server is told apart by its
// address:
//
//   - it serves a certificate for that name signed by the cluster's own CA
//     (the one Cluster API generated) and accepts only client
//     certificates signed by that CA, so Cluster API's TLS and credentials
//     are checked as a real site's API server checks them;
//   - it shows the cluster only its own objects where names would
//     collide or lists would span clusters: Node lists and watches are
//     limited to the cluster's node, Pod lists and watches to the pods on
//     it, and kube-system/kubeadm-config is the cluster's own (see
//     ScopeRequest).
//
// Behind it the stand-in is one API server for all: it answers as fast as
// one shared server does, and objects no Cluster API controller lists
// across (RBAC the control plane provider ensures, the namespaces) exist
// once.
type SiteAPI struct {
	// Addr is where the front listens.
	Addr string
	// Config reaches the stand-in API server directly, as an
	// administrator: what the simulated kubeadm and kubelet use.
	Config *rest.Config

	env  *envtest.Environment
	srv  *http.Server
	opts SiteAPIOptions

	mu    sync.Mutex
	sites map[string]*siteTLS

	counts sync.Map // verb → *atomic.Int64
}

// SiteAPIOptions describe a SiteAPI.
type SiteAPIOptions struct {
	// BinDir holds kube-apiserver and etcd.
	BinDir string
	// Addr is where the front listens (127.0.0.1:6443: where an agent
	// dials its cluster's endpoint on a control-plane host).
	Addr string
	// Node names the one node of the cluster whose endpoint host is
	// serverName (false: no cluster's).
	Node func(serverName string) (node string, ok bool)
	// CA returns the PEM certificate and key of the CA of the cluster
	// whose endpoint host is serverName.
	CA func(ctx context.Context, serverName string) (cert, key []byte, err error)
}

type siteTLS struct {
	cert *tls.Certificate
	ca   *x509.CertPool
}

// StartSiteAPI starts the stand-in API server and its front.
func StartSiteAPI(o SiteAPIOptions) (*SiteAPI, error) {
	s := &SiteAPI{Addr: o.Addr, opts: o, sites: map[string]*siteTLS{},
		env: &envtest.Environment{BinaryAssetsDirectory: o.BinDir, ControlPlaneStartTimeout: 2 * time.Minute}}
	cfg, err := s.env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting the sites' stand-in API server: %w", err)
	}
	s.Config = cfg
	upstream, err := url.Parse(cfg.Host)
	if err != nil {
		_ = s.env.Stop()
		return nil, err
	}
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		_ = s.env.Stop()
		return nil, err
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			node, _ := o.Node(pr.In.TLS.ServerName)
			if err := ScopeRequest(pr.Out, node); err != nil {
				// The upstream answers an emptied request with an error
				// the client sees.
				pr.Out.URL.Path = "/invalid-request"
			}
			s.count(pr.In)
		},
		Transport: rt,
		// Watches stream.
		FlushInterval: -1,
		ErrorLog:      log.New(io.Discard, "", 0),
	}
	s.srv = &http.Server{Handler: proxy, ReadHeaderTimeout: 30 * time.Second, ErrorLog: log.New(io.Discard, "", 0),
		TLSConfig: &tls.Config{
			MinVersion: tls.VersionTLS12,
			ClientAuth: tls.RequireAnyClientCert,
			GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
				t, err := s.site(hello.Context(), hello.ServerName)
				if err != nil {
					return nil, err
				}
				return t.cert, nil
			},
			VerifyConnection: s.verifyClient,
		}}
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		_ = s.env.Stop()
		return nil, fmt.Errorf("the sites' API front: %w", err)
	}
	go func() { _ = s.srv.ServeTLS(ln, "", "") }()
	return s, nil
}

// site is the TLS identity the front shows for serverName, made on first
// use from the cluster's CA (not kept on failure: the CA may not exist
// yet).
func (s *SiteAPI) site(ctx context.Context, serverName string) (*siteTLS, error) {
	if _, ok := s.opts.Node(serverName); !ok {
		return nil, fmt.Errorf("%q is no cluster's endpoint", serverName)
	}
	s.mu.Lock()
	t := s.sites[serverName]
	s.mu.Unlock()
	if t != nil {
		return t, nil
	}
	certPEM, keyPEM, err := s.opts.CA(ctx, serverName)
	if err != nil {
		return nil, err
	}
	ca, err := pki.ParseCA(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("the CA of %s: %w", serverName, err)
	}
	cert, err := ca.ServingCertificate([]string{serverName}, nil, 365*24*time.Hour)
	if err != nil {
		return nil, fmt.Errorf("the serving certificate of %s: %w", serverName, err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	t = &siteTLS{cert: &cert, ca: pool}
	s.mu.Lock()
	s.sites[serverName] = t
	s.mu.Unlock()
	return t, nil
}

// verifyClient accepts a client certificate signed by the CA of the
// cluster the client asked for, as the cluster's API server would.
func (s *SiteAPI) verifyClient(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("no client certificate")
	}
	t, err := s.site(context.Background(), cs.ServerName)
	if err != nil {
		return err
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err = cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: t.ca, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	return err
}

func (s *SiteAPI) count(r *http.Request) {
	verb := r.Method
	if r.URL.Query().Get("watch") == "true" {
		verb = "WATCH"
	}
	c, _ := s.counts.LoadOrStore(verb, new(atomic.Int64))
	c.(*atomic.Int64).Add(1)
}

// Requests counts, by HTTP method (WATCH for watches), the requests the
// front has passed on: what Cluster API asked of the sites.
func (s *SiteAPI) Requests() map[string]float64 {
	out := map[string]float64{}
	s.counts.Range(func(k, v any) bool {
		out[k.(string)] = float64(v.(*atomic.Int64).Load())
		return true
	})
	return out
}

// EtcdURL is where the stand-in's etcd serves clients.
func (s *SiteAPI) EtcdURL() string {
	if s.env.ControlPlane.Etcd == nil || s.env.ControlPlane.Etcd.URL == nil {
		return ""
	}
	return s.env.ControlPlane.Etcd.URL.String()
}

// Stop stops the front and the stand-in API server.
func (s *SiteAPI) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
	return s.env.Stop()
}

const kubeadmConfigPath = "/api/v1/namespaces/kube-system/configmaps/kubeadm-config"

// ScopeRequest limits a request to the stand-in API server to one
// cluster, whose only node is node: Node lists and watches to that node,
// Pod lists and watches to the pods on it, and kube-system/kubeadm-config
// (which kubeadm init writes and KubeadmControlPlane reads to learn that
// the control plane is initialised) to kubeadm-config-<node>. Both the
// front (for Cluster API) and the node simulator's client (for the
// simulated kubeadm and kubelet) scope their requests with it.
func ScopeRequest(r *http.Request, node string) error {
	if node == "" {
		return errors.New("no node to scope the request to")
	}
	p := r.URL.Path
	switch {
	case r.Method == http.MethodGet && p == "/api/v1/nodes":
		addFieldSelector(r.URL, "metadata.name="+node)
	case r.Method == http.MethodGet && (p == "/api/v1/pods" || strings.HasPrefix(p, "/api/v1/namespaces/") && strings.HasSuffix(p, "/pods")):
		addFieldSelector(r.URL, "spec.nodeName="+node)
	case p == kubeadmConfigPath:
		r.URL.Path = p + "-" + node
		r.URL.RawPath = ""
	case r.Method == http.MethodPost && p == "/api/v1/namespaces/kube-system/configmaps" && r.Body != nil:
		return renameCreated(r, "kubeadm-config", "kubeadm-config-"+node)
	}
	return nil
}

func addFieldSelector(u *url.URL, sel string) {
	q := u.Query()
	if cur := q.Get("fieldSelector"); cur != "" {
		sel = cur + "," + sel
	}
	q.Set("fieldSelector", sel)
	u.RawQuery = q.Encode()
}

// renameCreated renames the object a JSON create request makes from one
// name to another.
func renameCreated(r *http.Request, from, to string) error {
	b, err := io.ReadAll(r.Body)
	_ = r.Body.Close()
	if err != nil {
		return err
	}
	var obj map[string]any
	if err := json.Unmarshal(b, &obj); err == nil {
		if md, ok := obj["metadata"].(map[string]any); ok && md["name"] == from {
			md["name"] = to
			if b, err = json.Marshal(obj); err != nil {
				return err
			}
		}
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	r.ContentLength = int64(len(b))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	return nil
}

// ScopedConfig is cfg with every request scoped to node's cluster
// (ScopeRequest): the simulated kubeadm and kubelet of that node.
func ScopedConfig(cfg *rest.Config, node string) *rest.Config {
	c := rest.CopyConfig(cfg)
	// JSON, so that a create's body can be read and renamed.
	c.ContentType = "application/json"
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			r = r.Clone(r.Context())
			if err := ScopeRequest(r, node); err != nil {
				return nil, err
			}
			return rt.RoundTrip(r)
		})
	})
	return c
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Scrape reads a Prometheus text endpoint: name{labels} → value.
func Scrape(ctx context.Context, metricsURL string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, metricsURL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return parseText(resp.Body)
}
