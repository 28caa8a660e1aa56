package reach

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/hub/admission"
	"github.com/edgefleet/fleet/pkg/transport"
)

// Tunnel lifetimes on the hub's side; the agent applies the same.
const (
	IdleTimeout      = 5 * time.Minute
	HalfCloseTimeout = transport.WriteTimeout
	// DialTimeout bounds finding an agent and its dial of the endpoint.
	DialTimeout = 20 * time.Second
)

// ClusterDialer opens a connection to a cluster's endpoint through one of
// its agents. The gateway is one.
type ClusterDialer interface {
	DialCluster(ctx context.Context, namespace, cluster, target string) (net.Conn, string, error)
}

// Options configure the proxy.
type Options struct {
	// Addr to listen on, e.g. ":8081" or "127.0.0.1:0".
	Addr string
	// MaxTunnels bounds the tunnels open through this replica at once.
	MaxTunnels int
	// ReplicaName is this hub replica's name, as the gateway records it in
	// EdgeHost status.hubReplica.
	ReplicaName string
	// Forward carries a CONNECT for a cluster whose agents are connected
	// to another replica there, at the proxy address that replica records
	// in the hosts' status.hubReplicaProxy (once; a forwarded request is
	// never forwarded again). False serves only this replica's agents.
	Forward bool
}

// ForwardedHeader marks a CONNECT one replica forwards to another.
const ForwardedHeader = "Fleet-Reach-Forwarded-By"

// Proxy is the hub's CONNECT proxy into edge clusters.
type Proxy struct {
	opts   Options
	reader client.Reader
	dialer ClusterDialer
	creds  func() *Credentials
	log    logr.Logger
	// places bound the tunnels open through this replica.
	places *admission.Places

	listener net.Listener
	ready    chan struct{}
}

// New makes a proxy. reader reads Clusters (a cache is best); creds is
// called per request and may return nil until the hub CA is known.
func New(opts Options, reader client.Reader, dialer ClusterDialer, creds func() *Credentials) *Proxy {
	if opts.MaxTunnels <= 0 {
		opts.MaxTunnels = 4096
	}
	return &Proxy{opts: opts, reader: reader, dialer: dialer, creds: creds,
		log: ctrl.Log.WithName("reach-proxy"), places: admission.NewPlaces(opts.MaxTunnels), ready: make(chan struct{})}
}

// NeedLeaderElection is false: every replica proxies through its own agents.
func (p *Proxy) NeedLeaderElection() bool { return false }

// Ready is closed once the proxy listens.
func (p *Proxy) Ready() <-chan struct{} { return p.ready }

// Addr is where the proxy listens, once Ready.
func (p *Proxy) Addr() string { return p.listener.Addr().String() }

// Start serves until ctx ends.
func (p *Proxy) Start(ctx context.Context) error {
	ln, err := net.Listen("tcp", p.opts.Addr)
	if err != nil {
		return fmt.Errorf("edge-reach proxy: listening on %s: %w", p.opts.Addr, err)
	}
	p.listener = ln
	close(p.ready)
	p.log.Info("Serving the edge-reach proxy", "addr", ln.Addr().String())
	srv := &http.Server{
		Handler:           p,
		ReadHeaderTimeout: 10 * time.Second,
		// A refused client's kept-alive connection must not wait forever
		// (taken-over tunnels are not affected).
		IdleTimeout:    30 * time.Second,
		MaxHeaderBytes: 8 << 10,
		BaseContext:    func(net.Listener) context.Context { return ctx },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
	case err := <-errc:
		return fmt.Errorf("edge-reach proxy: serving: %w", err)
	}
	// Hijacked tunnels end with ctx (BaseContext), not with Shutdown.
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdownCtx)
	return nil
}

// ServeHTTP handles one CONNECT.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodConnect {
		p.refuse(w, r, "not_connect", http.StatusMethodNotAllowed, "this is fleet's edge-reach proxy: only CONNECT to a fleet cluster's API endpoint is served")
		return
	}
	cluster, status, reason, msg := p.authorize(r)
	if cluster == nil {
		if status == http.StatusProxyAuthRequired {
			w.Header().Set("Proxy-Authenticate", `Basic realm="fleet edge reach"`)
		}
		p.refuse(w, r, reason, status, msg)
		return
	}
	if !p.places.Take(r.Context(), 0) {
		p.refuse(w, r, "limit", http.StatusServiceUnavailable,
			fmt.Sprintf("the hub carries its maximum of %d tunnels; retry later", p.opts.MaxTunnels))
		return
	}
	defer p.places.Release()

	ctx, cancel := context.WithTimeout(r.Context(), DialTimeout)
	tunnel, via, err := p.dialer.DialCluster(ctx, cluster.Namespace, cluster.Name, r.Host)
	var noAgentHere *ErrNoAgent
	if errors.As(err, &noAgentHere) && p.opts.Forward && r.Header.Get(ForwardedHeader) == "" {
		if t, replica, ferr := p.forward(ctx, r, cluster); t != nil {
			tunnel, via, err = t, "replica "+replica, nil
		} else if ferr != nil {
			err = ferr
		}
	}
	cancel()
	if err != nil {
		var noAgent *ErrNoAgent
		var te *TunnelError
		switch {
		case errors.As(err, &noAgent):
			dialFailures.WithLabelValues("no_agent").Inc()
		case errors.As(err, &te):
			dialFailures.WithLabelValues(te.Reason).Inc()
		default:
			dialFailures.WithLabelValues("session_error").Inc()
		}
		p.log.Info("Edge-reach tunnel failed", "cluster", cluster.Namespace+"/"+cluster.Name, "target", r.Host, "error", err.Error())
		writeRefusal(w, http.StatusBadGateway, err.Error())
		return
	}
	defer tunnel.Close()

	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "connection cannot be taken over", http.StatusInternalServerError)
		return
	}
	client, buf, err := hj.Hijack()
	if err != nil {
		return
	}
	defer client.Close()
	if _, err := client.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		return
	}
	// Bytes the client sent right behind its CONNECT are already read.
	if n := buf.Reader.Buffered(); n > 0 {
		early, _ := buf.Reader.Peek(n)
		if _, err := tunnel.Write(early); err != nil {
			return
		}
		tunnelBytes.WithLabelValues("to_edge").Add(float64(n))
	}
	tunnelsTotal.Inc()
	tunnelsOpen.Inc()
	defer tunnelsOpen.Dec()
	p.log.V(1).Info("Edge-reach tunnel open", "cluster", cluster.Namespace+"/"+cluster.Name, "via", via)
	// Closing both ends when the hub stops ends the copy.
	stop := context.AfterFunc(r.Context(), func() { _ = client.Close(); _ = tunnel.Close() })
	defer stop()
	transport.Pipe(client, countingConn{tunnel}, IdleTimeout, HalfCloseTimeout)
}

// forward carries the CONNECT to the replica that holds a session of one
// of the cluster's agents, with the caller's own credentials. It returns
// nil and no error when no other replica has one.
func (p *Proxy) forward(ctx context.Context, r *http.Request, cluster *clusterv1.Cluster) (net.Conn, string, error) {
	hosts := &infrav1.EdgeHostList{}
	if err := p.reader.List(ctx, hosts, client.InNamespace(cluster.Namespace),
		client.MatchingLabels{infrav1.ClusterLabel: cluster.Name}); err != nil {
		return nil, "", fmt.Errorf("listing the hosts of cluster %s/%s: %w", cluster.Namespace, cluster.Name, err)
	}
	type peer struct{ name, addr string }
	var peers []peer
	for _, h := range hosts.Items {
		pr := peer{h.Status.HubReplica, h.Status.HubReplicaProxy}
		if pr.name != "" && pr.addr != "" && pr.name != p.opts.ReplicaName && !slices.Contains(peers, pr) {
			peers = append(peers, pr)
		}
	}
	var errs []error
	for _, pr := range peers {
		c, err := p.connectPeer(ctx, pr.addr, r)
		if err == nil {
			return c, pr.name, nil
		}
		errs = append(errs, fmt.Errorf("via hub replica %s (%s): %w", pr.name, pr.addr, err))
	}
	return nil, "", errors.Join(errs...)
}

// connectPeer sends the CONNECT on to a peer and returns the connection
// once the peer has its tunnel.
func (p *Proxy) connectPeer(ctx context.Context, addr string, r *http.Request) (net.Conn, error) {
	d := net.Dialer{}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	req := fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: %s\r\n%s: %s\r\n\r\n",
		r.Host, r.Host, r.Header.Get("Proxy-Authorization"), ForwardedHeader, p.opts.ReplicaName)
	if _, err := io.WriteString(c, req); err != nil {
		c.Close()
		return nil, err
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		c.Close()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		c.Close()
		return nil, fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	_ = c.SetDeadline(time.Time{})
	return &bufferedConn{Conn: c, r: br}, nil
}

// bufferedConn reads what its reader already buffered before the rest.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufferedConn) Read(p []byte) (int, error) { return b.r.Read(p) }

// CloseWrite half-closes the underlying TCP connection.
func (b *bufferedConn) CloseWrite() error {
	if tc, ok := b.Conn.(*net.TCPConn); ok {
		return tc.CloseWrite()
	}
	return b.Close()
}

// authorize finds the cluster the request's credential is for and checks
// that the target is that cluster's endpoint. On refusal it returns the
// status, the metric reason and a message that never tells an
// unauthenticated caller whether a cluster exists.
func (p *Proxy) authorize(r *http.Request) (cluster *clusterv1.Cluster, status int, reason, msg string) {
	user, password, ok := proxyBasicAuth(r)
	if !ok {
		return nil, http.StatusProxyAuthRequired, "unauthenticated",
			"proxy credentials required: use the proxy-url of `kubectl fleet kubeconfig CLUSTER`"
	}
	badCreds := func() (*clusterv1.Cluster, int, string, string) {
		return nil, http.StatusProxyAuthRequired, "bad_credentials", "proxy credentials not valid"
	}
	creds := p.creds()
	if creds == nil {
		return nil, http.StatusServiceUnavailable, "starting", "the hub is starting (its CA is not loaded yet); retry shortly"
	}
	ns, name, ok := splitUser(user)
	if !ok {
		return badCreds()
	}
	c := &clusterv1.Cluster{}
	if err := p.reader.Get(r.Context(), client.ObjectKey{Namespace: ns, Name: name}, c); err != nil {
		return badCreds()
	}
	if !creds.Valid(c, password) {
		return badCreds()
	}
	if ref := c.Spec.InfrastructureRef; ref.Kind != "EdgeCluster" || ref.APIGroup != infrav1.GroupVersion.Group {
		return nil, http.StatusForbidden, "target_not_allowed", fmt.Sprintf("cluster %s/%s is not a fleet cluster", ns, name)
	}
	if c.Annotations[infrav1.EdgeReachAnnotation] == "disabled" {
		return nil, http.StatusForbidden, "edge_reach_disabled",
			fmt.Sprintf("edge reach is disabled for cluster %s/%s (annotation %s)", ns, name, infrav1.EdgeReachAnnotation)
	}
	ep := c.Spec.ControlPlaneEndpoint
	if !ep.IsValid() {
		return nil, http.StatusForbidden, "target_not_allowed", fmt.Sprintf("cluster %s/%s has no controlPlaneEndpoint yet", ns, name)
	}
	endpoint := net.JoinHostPort(ep.Host, strconv.Itoa(int(ep.Port)))
	if !strings.EqualFold(r.Host, endpoint) {
		return nil, http.StatusForbidden, "target_not_allowed",
			fmt.Sprintf("the credentials of cluster %s/%s open only its API endpoint %s, not %q", ns, name, endpoint, r.Host)
	}
	r.Host = endpoint
	return c, 0, "", ""
}

func (p *Proxy) refuse(w http.ResponseWriter, r *http.Request, reason string, status int, msg string) {
	if reason != "starting" {
		refused.WithLabelValues(reason).Inc()
	}
	p.log.Info("Refused an edge-reach request", "reason", reason, "method", r.Method, "target", r.Host, "remote", r.RemoteAddr)
	writeRefusal(w, status, msg)
}

// writeRefusal answers with msg as the status line's reason phrase as well
// as the body: Go's HTTP clients (client-go, kubectl, Cluster API) drop the
// body of a failed CONNECT and show only the status line, so that is where
// the explanation must be.
func writeRefusal(w http.ResponseWriter, status int, msg string) {
	reason := strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, msg)
	if len(reason) > 300 {
		reason = reason[:300]
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, msg, status)
		return
	}
	// Headers set before (Proxy-Authenticate) go out too.
	hdr := w.Header().Clone()
	c, buf, err := hj.Hijack()
	if err != nil {
		return
	}
	defer c.Close()
	body := msg + "\n"
	hdr.Set("Content-Type", "text/plain; charset=utf-8")
	hdr.Set("Content-Length", strconv.Itoa(len(body)))
	hdr.Set("Connection", "close")
	_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(buf, "HTTP/1.1 %03d %s\r\n", status, reason)
	_ = hdr.Write(buf)
	_, _ = buf.WriteString("\r\n" + body)
	_ = buf.Flush()
}

// proxyBasicAuth reads HTTP Basic credentials from Proxy-Authorization.
func proxyBasicAuth(r *http.Request) (user, password string, ok bool) {
	h := r.Header.Get("Proxy-Authorization")
	scheme, value, found := strings.Cut(h, " ")
	if !found || !strings.EqualFold(scheme, "Basic") {
		return "", "", false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(value))
	if err != nil {
		return "", "", false
	}
	return strings.Cut(string(raw), ":")
}

// countingConn counts the bytes a tunnel carries as they move.
type countingConn struct{ net.Conn }

func (c countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	tunnelBytes.WithLabelValues("from_edge").Add(float64(n))
	return n, err
}

// CloseWrite ends the edge-bound direction only: a yamux stream's Close
// does that already; a peer replica's TCP connection has CloseWrite.
func (c countingConn) CloseWrite() error {
	if h, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return h.CloseWrite()
	}
	return c.Conn.Close()
}

func (c countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	tunnelBytes.WithLabelValues("to_edge").Add(float64(n))
	return n, err
}
