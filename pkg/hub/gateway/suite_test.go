package gateway_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgefleet/fleet/pkg/enrolltoken"
	"github.com/edgefleet/fleet/pkg/hub/enrollment"

	"github.com/go-logr/logr"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/edgefleet/fleet/internal/testkit"
	"github.com/edgefleet/fleet/internal/testkit/testenv"
	"github.com/edgefleet/fleet/pkg/agent"
	"github.com/edgefleet/fleet/pkg/agent/agenttest"
	"github.com/edgefleet/fleet/pkg/agent/logring"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/hub/delivery"
	"github.com/edgefleet/fleet/pkg/hub/gateway"
	"github.com/edgefleet/fleet/pkg/hub/hostaccess"
	"github.com/edgefleet/fleet/pkg/hub/inventory"
	"github.com/edgefleet/fleet/pkg/hub/linkhealth"
	hubreconcilers "github.com/edgefleet/fleet/pkg/hub/reconcilers"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.Level(zapLevel())))
	var err error
	env, err = testenv.Start(context.Background(), testenv.Options{APIServerOnly: true})
	if err != nil {
		if errors.Is(err, testenv.ErrNoAssets) && os.Getenv("CI") != "true" {
			fmt.Fprintf(os.Stderr, "SKIP: %v\n", err)
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "FAIL: starting test environment: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

const waitTimeout = 60 * time.Second

func eventually(t *testing.T, what string, cond func() error) {
	t.Helper()
	testkit.Eventually(t, waitTimeout, 100*time.Millisecond, what, cond)
}

// writeCounter counts the requests that change something, across every
// client built from the hub's rest config.
type writeCounter struct {
	// failDisconnects answers this many "disconnected" writes with 504.
	failDisconnects atomic.Int64
	writes          atomic.Int64
	// slowStatus delays every status write by this much, so writes that
	// run at once overlap; statusInFlight and maxStatusInFlight count them.
	slowStatus                        time.Duration
	statusInFlight, maxStatusInFlight atomic.Int64
	mu                                sync.Mutex
	paths                             []string
}

// to counts the writes whose URL path contains s.
func (c *writeCounter) to(s string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, p := range c.paths {
		if strings.Contains(p, s) {
			n++
		}
	}
	return n
}

type countingTransport struct {
	rt http.RoundTripper
	c  *writeCounter
}

func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPatch && r.Body != nil && t.c.failDisconnects.Load() > 0 {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if bytes.Contains(body, []byte("Session ended")) && t.c.failDisconnects.Add(-1) >= 0 {
			// An overloaded API server's answer.
			return &http.Response{StatusCode: http.StatusGatewayTimeout, Request: r,
				Header: http.Header{"Content-Type": {"application/json"}},
				Body:   io.NopCloser(strings.NewReader(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Timeout","message":"the server was unable to return a response in the time allotted","code":504}`)),
			}, nil
		}
	}
	if r.Method == http.MethodPatch && strings.HasSuffix(r.URL.Path, "/status") && r.Body != nil && t.c.slowStatus > 0 {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if !bytes.Contains(body, []byte(`"lastSeenTime"`)) {
			// Not the gateway's connectivity write (the reconcilers
			// write status too, under limits of their own).
			return t.c.count(t.rt, r)
		}
		n := t.c.statusInFlight.Add(1)
		defer t.c.statusInFlight.Add(-1)
		for m := t.c.maxStatusInFlight.Load(); n > m && !t.c.maxStatusInFlight.CompareAndSwap(m, n); m = t.c.maxStatusInFlight.Load() {
		}
		time.Sleep(t.c.slowStatus)
	}
	return t.c.count(t.rt, r)
}

// since lists the writes after the first n.
func (c *writeCounter) since(n int) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.paths[n:]...)
}

// count counts r if it is a write, and sends it.
func (c *writeCounter) count(rt http.RoundTripper, r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		c.writes.Add(1)
		c.mu.Lock()
		c.paths = append(c.paths, r.Method+" "+r.URL.Path)
		c.mu.Unlock()
	}
	return rt.RoundTrip(r)
}

// hub is one running hub replica: gateway plus reconcilers.
type hub struct {
	srv    *gateway.Server
	access *hostaccess.Server
	url    string
	writes *writeCounter
	cancel context.CancelFunc
	done   chan struct{}
}

type hubOptions struct {
	addr       string
	ns         string
	certValid  time.Duration
	handshakes int
	lastSeen   time.Duration
	// disconnectGrace defaults to 200 ms here: long enough to run the
	// grace's timer, short enough for tests that wait for "disconnected".
	disconnectGrace time.Duration
	// returnGrace defaults to an hour here: the sweep it starts lists
	// every namespace, and other tests' hosts must not be written under a
	// running test.
	returnGrace time.Duration
	// statusWrites is MaxConcurrentStatusWrites; slowStatus, the delay of
	// each status write.
	statusWrites int
	slowStatus   time.Duration
	// tlsHandshakes is MaxConcurrentTLSHandshakes; rotationOverlap,
	// RotationOverlap; log, the gateway's log (default: the test's).
	tlsHandshakes   int
	rotationOverlap time.Duration
	log             logr.Logger
	// mux is SessionMux; minAgentProtocol, MinAgentProtocol.
	mux              string
	minAgentProtocol int
	// hostAccess, when set, serves the host-access API (Namespace
	// defaults to ns).
	hostAccess *hostaccess.Options
	// replica and replicaProxy name this replica and its peer address.
	replica, replicaProxy string
	// releases bounds the replica's transfers.
	releases delivery.Options
}

func startHub(t *testing.T, o hubOptions) *hub {
	t.Helper()
	if o.addr == "" {
		o.addr = freeAddr(t)
	}
	if o.disconnectGrace == 0 {
		o.disconnectGrace = 200 * time.Millisecond
	}
	if o.returnGrace == 0 {
		o.returnGrace = time.Hour
	}
	h := &hub{done: make(chan struct{}), writes: &writeCounter{slowStatus: o.slowStatus}}
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countingTransport{rt: rt, c: h.writes} })
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  env.Scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Logger:  logr.Discard(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	if err := hubreconcilers.Setup(ctx, mgr, hubreconcilers.Options{SkipNameValidation: true}); err != nil {
		t.Fatal(err)
	}
	h.srv, err = gateway.Setup(ctx, mgr, gateway.Options{
		Addr: o.addr, HubNamespace: o.ns, IPs: []net.IP{net.ParseIP("127.0.0.1")},
		ClientCertValidity: o.certValid, MaxConcurrentHandshakes: o.handshakes,
		LastSeenInterval: o.lastSeen, KeepAlive: 2 * time.Second, HelloTimeout: 2 * time.Second,
		DisconnectGrace: o.disconnectGrace, ReturnGrace: o.returnGrace,
		LinkThresholds: linkhealth.DefaultThresholds(), MaxConcurrentStatusWrites: o.statusWrites,
		MaxConcurrentTLSHandshakes: o.tlsHandshakes, RotationOverlap: o.rotationOverlap, Logger: o.log,
		SessionMux: o.mux, MinAgentProtocol: o.minAgentProtocol, ReplicaName: o.replica, ReplicaProxy: o.replicaProxy,
		Releases: o.releases,
	})
	if err != nil {
		t.Fatal(err)
	}
	if ha := o.hostAccess; ha != nil {
		if ha.Namespace == "" {
			ha.Namespace = o.ns
		}
		ha.ReplicaName = o.replica
		if h.access, err = hostaccess.Setup(ctx, mgr, *ha, h.srv); err != nil {
			t.Fatal(err)
		}
	}
	go func() {
		defer close(h.done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("hub manager: %v", err)
		}
	}()
	select {
	case <-h.srv.Ready():
	case <-time.After(waitTimeout):
		t.Fatal("gateway did not start")
	}
	h.url = "https://" + h.srv.Addr()
	t.Cleanup(h.stop)
	return h
}

func (h *hub) stop() {
	h.cancel()
	<-h.done
}

func freeAddr(t *testing.T) string { return testkit.FreeAddr(t) }

// newNamespace makes a namespace for the test's hosts and hub objects.
func newNamespace(t *testing.T) string { return env.NewNamespace(t, "gw") }

func newToken(t *testing.T, ns string, opts enrolltoken.Options) string {
	t.Helper()
	if opts.HostNamespace == "" {
		opts.HostNamespace = ns
	}
	if opts.TTL == 0 {
		opts.TTL = time.Hour
	}
	tok, _, err := enrollment.CreateToken(context.Background(), env.Client, ns, opts, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// edge is one simulated edge machine: a sandbox root and a state dir.
type edge struct {
	t        *testing.T
	cfg      agent.Config
	rec      *agenttest.Recorder
	agent    *agent.Agent
	cancel   context.CancelFunc
	done     chan error
	hostname string
	// link, when set, is the agent's link probe; noLink, when set, is why
	// it has none.
	link   agent.LinkCounter
	noLink string
	// upgrader and stager, when set, let the agent upgrade and stage;
	// stagerFor, when set, makes the stager of each start (one that takes
	// the agent's archives from the hub).
	upgrader  agent.Upgrader
	stager    agent.Stager
	stagerFor func(*agent.Agent) agent.Stager
	// ring, when set, is the agent's own log.
	ring *logring.Ring
}

func newEdge(t *testing.T, hostname, hubURL, pin, token string) *edge {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	must(t, os.WriteFile(filepath.Join(root, "etc", "hostname"), []byte(hostname+"\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(root, "etc", "machine-id"), []byte(fmt.Sprintf("%032x\n", []byte(hostname))[:33]), 0o644))
	must(t, os.WriteFile(filepath.Join(root, "etc", "os-release"), []byte("PRETTY_NAME=\"Test Linux 1\"\n"), 0o644))
	cfg := agent.Config{Hub: hubURL, Token: token, CACertHash: pin, StateDir: filepath.Join(root, "var", "lib", "fleet-agent"),
		RootDir: root, ResyncInterval: 200 * time.Millisecond, MaxBackoff: 500 * time.Millisecond, KeepAlive: time.Second}
	must(t, cfg.Complete())
	must(t, cfg.Validate())
	return &edge{t: t, cfg: cfg, rec: &agenttest.Recorder{}, hostname: hostname}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// start runs a fresh agent process-equivalent on the edge's directories.
func (e *edge) start() *edge {
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	e.done = make(chan error, 1)
	e.agent = agent.New(e.cfg, e.rec, logr.Discard())
	if e.link != nil || e.noLink != "" {
		e.agent.UseLinkProbe(e.link, e.noLink)
	}
	if e.ring != nil {
		e.agent.UseLogRing(e.ring)
	}
	if e.upgrader != nil {
		e.agent.UseUpgrader(e.upgrader)
		if e.stagerFor != nil {
			e.stager = e.stagerFor(e.agent)
		}
		e.agent.UseStager(e.stager)
	}
	go func() { e.done <- e.agent.Run(ctx, nil) }()
	e.t.Cleanup(e.stop)
	return e
}

func (e *edge) stop() {
	if e.cancel == nil {
		return
	}
	e.cancel()
	<-e.done
	e.cancel = nil
}

func getHost(ns, name string) (*infrav1.EdgeHost, error) {
	h := &infrav1.EdgeHost{}
	return h, env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, h)
}

func connectedStatus(ns, name string) (metav1.ConditionStatus, error) {
	h, err := getHost(ns, name)
	if err != nil {
		return "", err
	}
	for _, c := range h.Status.Conditions {
		if c.Type == infrav1.AgentConnectedCondition {
			return c.Status, nil
		}
	}
	return "", errors.New("no AgentConnected condition")
}

func bootstrapSecret(t *testing.T, ns, name, data string) {
	t.Helper()
	must(t, env.Client.Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Data:       map[string][]byte{"value": []byte(data), "format": []byte("cloud-config")},
	}))
}

// claim does what the EdgeMachine reconciler does when it claims a host,
// for an EdgeMachine it creates (without a Machine, so no reconciler
// touches it). It returns the claim's uid.
func claim(t *testing.T, ns, host, machine, secret string) types.UID {
	t.Helper()
	em := &infrav1.EdgeMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: machine}}
	must(t, env.Client.Create(context.Background(), em))
	eventually(t, "claim "+host, func() error {
		h, err := getHost(ns, host)
		if err != nil {
			return err
		}
		h.Spec.ClaimRef = &infrav1.HostClaimReference{Name: machine, UID: em.UID, BootstrapDataSecretName: secret}
		return env.Client.Update(context.Background(), h)
	})
	return em.UID
}

func release(t *testing.T, ns, host string) {
	t.Helper()
	eventually(t, "release "+host, func() error {
		h, err := getHost(ns, host)
		if err != nil {
			return err
		}
		if h.Spec.ClaimRef == nil {
			return nil
		}
		// As the hub releases: the release is recorded, so the agent is
		// ordered to reset (a claim cleared otherwise is not).
		return inventory.Release(context.Background(), env.Client, h, h.Spec.ClaimRef.UID)
	})
}

func zapLevel() zapcore.Level {
	if os.Getenv("FLEET_TEST_VERBOSE") != "" {
		return zapcore.DebugLevel
	}
	return zapcore.ErrorLevel
}

func agentEnroll(e *edge) error { return agent.EnrollOnce(context.Background(), e.cfg) }

func objMeta(ns, name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: ns, Name: name} }
