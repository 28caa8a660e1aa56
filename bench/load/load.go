package load

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/edgefleet/fleet/pkg/enrolltoken"
	"github.com/edgefleet/fleet/pkg/hub/enrollment"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/pkg/agent"
	"github.com/edgefleet/fleet/pkg/agent/agenttest"
	"github.com/edgefleet/fleet/pkg/agent/selfupdate"
	"github.com/edgefleet/fleet/pkg/agent/state"
	"github.com/edgefleet/fleet/pkg/contract/hubinfo"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/release"
)

// RaiseFileLimit lifts the limit on open files as far as it goes: to the
// kernel's most (fs.nr_open) where the process may raise the hard limit
// (root), else the soft one to the hard one. Every agent holds a socket,
// the hub one per agent, a balancer two.
func RaiseFileLimit() (uint64, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
	}
	if b, err := os.ReadFile("/proc/sys/fs/nr_open"); err == nil {
		if most, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && most > l.Max {
			if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: most, Max: most}) == nil {
				return most, nil
			}
		}
	}
	l.Cur = l.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
	}
	return l.Cur, nil
}

// Hub is a fleet-hub process.
type Hub struct {
	URL        string
	Pin        string
	Namespace  string
	MetricsURL string
	// PprofURL serves the hub's /debug/pprof.
	PprofURL string
	// GatewayAddr and ProxyAddr are where its gateway and its edge-reach
	// proxy listen (host:port).
	GatewayAddr, ProxyAddr string

	cmd  *exec.Cmd
	done chan struct{}
	log  *os.File
	args []string
	env  []string
	bin  string
}

// HubOptions describe the hub process.
type HubOptions struct {
	Binary    string
	Dir       string // kubeconfig and log
	Config    *rest.Config
	Namespace string
	Args      []string // extra flags
	Env       []string // extra environment (e.g. GOGC=50)
	// Replica names one of several hubs sharing the fleet (POD_NAME, as a
	// Deployment's pod has it): they take turns leading, and each records
	// its proxy address for the others. "" runs the only hub.
	Replica string
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// StartHub runs fleet-hub against the API server of o.Config and waits
// until its gateway publishes its URL and pin.
func StartHub(ctx context.Context, c client.Client, o HubOptions) (*Hub, error) {
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(o.Dir, "kubeconfig")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["api"] = &clientcmdapi.Cluster{Server: o.Config.Host, CertificateAuthorityData: o.Config.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: o.Config.CertData, ClientKeyData: o.Config.KeyData}
	kc.Contexts["api"] = &clientcmdapi.Context{Cluster: "api", AuthInfo: "admin"}
	kc.CurrentContext = "api"
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		return nil, err
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: o.Namespace}}); client.IgnoreAlreadyExists(err) != nil {
		return nil, err
	}
	gw, err := freePort()
	if err != nil {
		return nil, err
	}
	metrics, err := freePort()
	if err != nil {
		return nil, err
	}
	pprof, err := freePort()
	if err != nil {
		return nil, err
	}
	proxy, err := freePort()
	if err != nil {
		return nil, err
	}
	h := &Hub{Namespace: o.Namespace, URL: fmt.Sprintf("https://127.0.0.1:%d", gw), MetricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", metrics),
		PprofURL: fmt.Sprintf("http://127.0.0.1:%d/debug/pprof", pprof), bin: o.Binary, env: o.Env,
		GatewayAddr: fmt.Sprintf("127.0.0.1:%d", gw), ProxyAddr: fmt.Sprintf("127.0.0.1:%d", proxy)}
	leader := []string{"--leader-elect=false"}
	if o.Replica != "" {
		leader = []string{"--leader-elect=true", "--leader-election-namespace", o.Namespace, "--proxy-peer-address", h.ProxyAddr}
		h.env = append(h.env, "POD_NAME="+o.Replica)
	}
	h.args = append([]string{"--kubeconfig", kubeconfig, "--hub-namespace", o.Namespace,
		"--gateway-bind-address", fmt.Sprintf("127.0.0.1:%d", gw), "--gateway-ips", "127.0.0.1",
		"--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", metrics), "--metrics-secure=false",
		"--health-probe-bind-address", "0", "--pprof-bind-address", fmt.Sprintf("127.0.0.1:%d", pprof),
		"--proxy-bind-address", fmt.Sprintf("127.0.0.1:%d", proxy),
		"--runtime-extension-bind-address", "127.0.0.1:0", "--runtime-extension-service", "",
		"--host-access-bind-address", "127.0.0.1:0", "--host-access-service", "",
		"--zap-log-level", "error"}, append(leader, o.Args...)...)
	if h.log, err = os.OpenFile(filepath.Join(o.Dir, "hub.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err != nil {
		return nil, err
	}
	if err := h.start(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		info := &corev1.ConfigMap{}
		err := c.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: hubinfo.ConfigMap}, info)
		if err == nil && info.Data[hubinfo.KeyCAPin] != "" {
			h.Pin = info.Data[hubinfo.KeyCAPin]
			if conn, err := net.DialTimeout("tcp", strings.TrimPrefix(h.URL, "https://"), time.Second); err == nil {
				conn.Close()
				return h, nil
			}
		}
		select {
		case <-h.done:
			// The log is in the caller's temporary directory, gone with it.
			b, _ := os.ReadFile(h.log.Name())
			return nil, fmt.Errorf("fleet-hub exited while starting (log %s):\n%s", h.log.Name(), b[max(0, len(b)-3000):])
		default:
		}
		if time.Now().After(deadline) {
			h.Kill()
			return nil, fmt.Errorf("fleet-hub not ready after 2 minutes (log %s)", h.log.Name())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (h *Hub) start() error {
	h.cmd = exec.Command(h.bin, h.args...)
	h.cmd.Stdout, h.cmd.Stderr = h.log, h.log
	h.cmd.Env = append(hubEnviron(), h.env...)
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := h.cmd.Start(); err != nil {
		return fmt.Errorf("starting fleet-hub: %w", err)
	}
	h.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(h.cmd, h.done)
	return nil
}

// hubEnviron is this process's environment without the Go runtime's
// garbage-collector settings: the driver may run with GOGC raised (it
// stands in for thousands of machines), but the hub is measured as it is
// deployed, with its own --gc-percent, unless HubOptions.Env says
// otherwise.
func hubEnviron() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOGC=") && !strings.HasPrefix(kv, "GOMEMLIMIT=") {
			env = append(env, kv)
		}
	}
	return env
}

// Restart starts the hub again after Kill, on the same ports.
func (h *Hub) Restart() error { return h.start() }

// Kill stops the hub with SIGKILL, as a crash would, and waits.
func (h *Hub) Kill() {
	if h.cmd == nil || h.cmd.Process == nil {
		return
	}
	_ = h.cmd.Process.Kill()
	<-h.done
}

// Terminate stops the hub with SIGTERM, as a rolling update does, and
// waits for it to exit.
func (h *Hub) Terminate() {
	if h.cmd == nil || h.cmd.Process == nil {
		return
	}
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	<-h.done
}

// Stop kills the hub and closes its log.
func (h *Hub) Stop() {
	h.Kill()
	_ = h.log.Close()
}

// PID of the running hub.
func (h *Hub) PID() int { return h.cmd.Process.Pid }

// RSS is the hub's resident memory in bytes.
func (h *Hub) RSS() (int64, error) { return ProcessRSS(h.PID()) }

// ProcessRSS is process pid's resident memory in bytes.
func ProcessRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmRSS")
}

// CPU is the CPU time the hub process has used (user + system).
func (h *Hub) CPU() (time.Duration, error) { return ProcessCPU(h.PID()) }

// Metrics scrapes the hub's Prometheus metrics: name{labels} -> value.
func (h *Hub) Metrics(ctx context.Context) (map[string]float64, error) {
	return Scrape(ctx, h.MetricsURL)
}

// parseText reads Prometheus text: name{labels} → value.
func parseText(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		line := s.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out, s.Err()
}

// Agents are many real agents in this process.
type Agents struct {
	mu     sync.Mutex
	edges  []*edge
	dir    string
	hubURL string
	pin    string

	onDesired   func(int, *wire.DesiredState)
	provisioner func(int, agent.Config) agent.Provisioner
	upgrader    func(int, agent.Config) agent.Upgrader
	releases    *Releases
	perToken    int
	// Disconnects counts why the agents' sessions ended.
	Disconnects Reasons
}

type edge struct {
	cfg    agent.Config
	name   string
	cancel context.CancelFunc
	done   chan struct{}
	ag     *agent.Agent
	// desiredAt is when the agent last received a desired state
	// (UnixNano).
	desiredAt atomic.Int64
	log       recentLog
}

// AgentOptions describe a set of agents.
type AgentOptions struct {
	N   int
	Dir string
	// Sources is how many loopback source addresses (127.0.0.2 …) the
	// agents are spread over; each gives ~28,000 ephemeral ports.
	Sources int
	// LinkInterval and ResyncInterval as the agent's (defaults: off, 1m).
	LinkInterval time.Duration
	// OnDesired hears every desired state agent i receives, as it
	// arrives; it must not block.
	OnDesired func(i int, d *wire.DesiredState)
	// PerToken is how many agents share one enrollment token (default
	// 100, a large site).
	PerToken int
	// NamePrefix starts every agent's hostname (default "load"): Node
	// names are cluster-wide, so runs sharing a workload cluster need their
	// own.
	NamePrefix string
	// HostLabels gives agent i's EdgeHost labels (default: all alike).
	HostLabels func(i int) map[string]string
	// Provisioner makes agent i's provisioner (default agenttest.Recorder:
	// it records assignments and writes nothing).
	Provisioner func(i int, cfg agent.Config) agent.Provisioner
	// Upgrader, when set, makes agent i's in-place upgrader (default
	// none: the agent reports no Kubernetes version and is never ordered
	// to upgrade).
	Upgrader func(i int, cfg agent.Config) agent.Upgrader
	// Replicas, when set, spreads the agents' connections over several
	// hub replicas, as the gateway Service would.
	Replicas *Replicas
	// Releases, when set, lets the agents run the releases the hub
	// orders: each keeps its own release store and restarts into a
	// release as fleet-agent's launcher would, reporting its version.
	Releases *Releases
}

// Releases is how the agents take agent releases.
type Releases struct {
	// Roots are the release root keys the agents hold.
	Roots release.Roots
	// Installed is the version the agents start with.
	Installed string
}

// NewAgents prepares n agents (state dirs, and enrollment tokens, one per PerToken agents).
func NewAgents(ctx context.Context, c client.Client, hub *Hub, o AgentOptions) (*Agents, error) {
	a := &Agents{dir: o.Dir, hubURL: hub.URL, pin: hub.Pin, onDesired: o.OnDesired, provisioner: o.Provisioner, upgrader: o.Upgrader, releases: o.Releases}
	sources := max(o.Sources, 1)
	perToken := o.PerToken
	if perToken <= 0 {
		perToken = 100
	}
	a.perToken = perToken
	var tok, tokLabels string
	for i := range o.N {
		labels := map[string]string{"fleet.bench/load": "true"}
		if o.HostLabels != nil {
			labels = o.HostLabels(i)
		}
		if key := fmt.Sprint(labels); i%perToken == 0 || key != tokLabels {
			// One token per site-sized group (and per label set): hosts of
			// one token enroll one at a time (the hub counts its uses), as
			// a site's do.
			var err error
			tok, _, err = enrollment.CreateToken(ctx, c, hub.Namespace, enrolltoken.Options{TTL: 24 * time.Hour, HostNamespace: hub.Namespace,
				HostLabels: labels}, time.Now())
			if err != nil {
				return nil, fmt.Errorf("creating an enrollment token: %w", err)
			}
			tokLabels = key
		}
		root := filepath.Join(o.Dir, fmt.Sprintf("a%05d", i))
		if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
			return nil, err
		}
		prefix := o.NamePrefix
		if prefix == "" {
			prefix = "load"
		}
		name := fmt.Sprintf("%s-%05d", prefix, i)
		if err := os.WriteFile(filepath.Join(root, "etc", "hostname"), []byte(name+"\n"), 0o644); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(root, "etc", "machine-id"), []byte(fmt.Sprintf("%032x\n", i)), 0o644); err != nil {
			return nil, err
		}
		cfg := agent.Config{Hub: hub.URL, Token: tok, CACertHash: hub.Pin, StateDir: filepath.Join(root, "state"), RootDir: root,
			LocalAddr: fmt.Sprintf("127.0.0.%d", 2+i%sources), LinkInterval: o.LinkInterval}
		if o.LinkInterval == 0 {
			cfg.LinkInterval = -1
		}
		if o.Replicas != nil {
			cfg.Dial = o.Replicas.dialer(cfg.LocalAddr)
		}
		if err := cfg.Complete(); err != nil {
			return nil, err
		}
		if err := cfg.Validate(); err != nil {
			return nil, err
		}
		a.edges = append(a.edges, &edge{cfg: cfg, name: name})
	}
	return a, nil
}

// Start runs every agent, pacing the starts over spread. With no spread
// they are all set up first and released together: launched one by one,
// the last would start only after the first thousands had taken the cores
// (a 5,000-agent cold start spent 16 s starting its agents).
func (a *Agents) Start(spread time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	step := spread / time.Duration(max(len(a.edges), 1))
	gate := make(chan struct{})
	if step > 0 {
		close(gate)
	} else {
		defer close(gate)
	}
	for _, i := range a.startOrder() {
		a.launch(i, gate)
		if step > 0 {
			time.Sleep(step)
		}
	}
}

// launch runs agent i once gate is closed; a.mu held.
func (a *Agents) launch(i int, gate <-chan struct{}) {
	e := a.edges[i]
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel, e.done = cancel, make(chan struct{})
	var prov agent.Provisioner = &agenttest.Recorder{}
	if a.provisioner != nil {
		prov = a.provisioner(i, e.cfg)
	}
	var up agent.Upgrader
	if a.upgrader != nil {
		up = a.upgrader(i, e.cfg)
	}
	go func(done chan struct{}) {
		defer close(done)
		<-gate
		a.run(ctx, i, e, prov, up)
	}(e.done)
}

// Restart stops agent i and starts it again, as a reboot does: its
// session ends and a new one begins.
func (a *Agents) Restart(i int) {
	a.mu.Lock()
	e := a.edges[i]
	cancel, done := e.cancel, e.done
	a.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	open := make(chan struct{})
	close(open)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.launch(i, open)
}

// run runs agent i until ctx ends; with releases, it starts it again
// with the release the launcher's rules choose whenever it stops to run
// another (a trial that did not commit in time is rolled back then).
func (a *Agents) run(ctx context.Context, i int, e *edge, prov agent.Provisioner, up agent.Upgrader) {
	cfg := e.cfg
	var store selfupdate.Store
	var trial *selfupdate.Trial
	if a.releases != nil {
		store = selfupdate.Store{Dir: filepath.Join(cfg.StateDir, "releases")}
		cfg.Version = a.releases.Installed
	}
	log := agentSink{reasons: &a.Disconnects, log: &e.log}.logger()
	for {
		ag := agent.New(cfg, prov, log)
		if up != nil {
			ag.UseUpgrader(up)
		}
		ag.OnDesired = func(d *wire.DesiredState) {
			e.desiredAt.Store(time.Now().UnixNano())
			if a.onDesired != nil {
				a.onDesired(i, d)
			}
		}
		if a.releases != nil {
			ag.UseReleases(agent.Releases{Store: store, Roots: a.releases.Roots, Running: cfg.Version, Installed: a.releases.Installed})
		}
		if t := trial; t != nil {
			ag.UseTrial(t.Version, t.Deadline, func() error { return store.Commit(t.Slot, time.Now()) })
		}
		a.mu.Lock()
		e.ag = ag
		a.mu.Unlock()
		err := ag.Run(ctx, nil)
		if ctx.Err() != nil || a.releases == nil || !errors.Is(err, agent.ErrRestartForRelease) && !errors.Is(err, agent.ErrTrialExpired) {
			return
		}
		d, err := store.Decide(time.Now(), a.releases.Installed)
		if err != nil {
			// A launcher that cannot choose starts nothing: the agent is
			// lost, and its recent log says why.
			log.Error(err, "The launcher cannot choose a release to start")
			return
		}
		cfg.Version, trial = a.releases.Installed, d.Trial
		if d.Path != "" {
			cfg.Version = d.Slot.Version
		}
	}
}

// startOrder takes one agent of each token in turn: sites power up side
// by side, and the hub counts one token's uses one at a time.
func (a *Agents) startOrder() []int {
	n := len(a.edges)
	per := max(a.perToken, 1)
	groups := (n + per - 1) / per
	order := make([]int, 0, n)
	for k := range per {
		for g := range groups {
			if i := g*per + k; i < n {
				order = append(order, i)
			}
		}
	}
	return order
}

// RecentLog is agent i's last log lines, oldest first.
func (a *Agents) RecentLog(i int) string { return a.edges[i].log.String() }

// Name is agent i's hostname.
func (a *Agents) Name(i int) string { return a.edges[i].name }

// Host is the name of the EdgeHost agent i holds the identity of (its
// hostname, unless that was taken), or "" before it enrolled.
func (a *Agents) Host(i int) string {
	creds, err := state.Store{Dir: a.edges[i].cfg.StateDir}.LoadIdentity()
	if err != nil {
		return ""
	}
	return creds.Identity.Host
}

// Root is agent i's host root directory.
func (a *Agents) Root(i int) string { return a.edges[i].cfg.RootDir }

// Len is the number of agents.
func (a *Agents) Len() int { return len(a.edges) }

// DesiredSince counts the agents that received a desired state after t.
func (a *Agents) DesiredSince(t time.Time) int {
	n := 0
	for _, e := range a.edges {
		if e.desiredAt.Load() > t.UnixNano() {
			n++
		}
	}
	return n
}

// IsConnected tells whether agent i holds a session now.
func (a *Agents) IsConnected(i int) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.edges[i].ag != nil && a.edges[i].ag.Connected()
}

// Connected counts the agents that hold a session now.
func (a *Agents) Connected() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, e := range a.edges {
		if e.ag != nil && e.ag.Connected() {
			n++
		}
	}
	return n
}

// Stop stops every agent and waits.
func (a *Agents) Stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, e := range a.edges {
		if e.cancel != nil {
			e.cancel()
		}
	}
	for _, e := range a.edges {
		if e.done != nil {
			<-e.done
		}
	}
}

// Connected counts the hosts whose AgentConnected is True.
func Connected(ctx context.Context, c client.Client, ns string) (int, error) {
	hosts := &infrav1.EdgeHostList{}
	if err := c.List(ctx, hosts, client.InNamespace(ns)); err != nil {
		return 0, err
	}
	n := 0
	for _, h := range hosts.Items {
		if apimeta.IsStatusConditionTrue(h.Status.Conditions, infrav1.AgentConnectedCondition) {
			n++
		}
	}
	return n, nil
}

// Requests reads the hub's own count of API requests by method (client-go's
// rest_client_requests_total).
func (h *Hub) Requests(ctx context.Context) (map[string]float64, error) {
	m, err := h.Metrics(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for k, v := range m {
		if !strings.HasPrefix(k, "rest_client_requests_total{") {
			continue
		}
		if i := strings.Index(k, `method="`); i >= 0 {
			method := k[i+len(`method="`):]
			out[method[:strings.IndexByte(method, '"')]] += v
		}
	}
	if len(out) == 0 {
		return nil, errors.New("the hub exposes no rest_client_requests_total")
	}
	return out, nil
}

// Sessions reads the hub's gauge of open agent sessions.
func (h *Hub) Sessions(ctx context.Context) (int, error) {
	m, err := h.Metrics(ctx)
	if err != nil {
		return 0, err
	}
	if v, ok := m["fleet_gateway_connected_agents"]; ok {
		return int(v), nil
	}
	return 0, errors.New("no fleet_gateway_connected_agents metric")
}

// WaitSessions waits until the hub holds want sessions, calling progress
// with the count every second; it returns how long it took.
func (h *Hub) WaitSessions(ctx context.Context, want int, timeout time.Duration, progress func(int, time.Duration)) (time.Duration, error) {
	start := time.Now()
	for {
		n, err := h.Sessions(ctx)
		if err == nil && n >= want {
			return time.Since(start), nil
		}
		if progress != nil {
			progress(n, time.Since(start))
		}
		if time.Since(start) > timeout {
			return time.Since(start), fmt.Errorf("%d of %d sessions after %s (last error %v)", n, want, timeout, err)
		}
		select {
		case <-ctx.Done():
			return time.Since(start), ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
