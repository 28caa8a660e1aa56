package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgefleet/fleet/pkg/enrolltoken"
	"github.com/edgefleet/fleet/pkg/hub/enrollment"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/kubeconfig"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/edgefleet/fleet/bench/load"
	"github.com/edgefleet/fleet/bench/results"
	"github.com/edgefleet/fleet/internal/testkit"
	"github.com/edgefleet/fleet/internal/testkit/testhost"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/hub"
	"github.com/edgefleet/fleet/pkg/hub/gateway"
	"github.com/edgefleet/fleet/pkg/hub/reach"
	hubreconcilers "github.com/edgefleet/fleet/pkg/hub/reconcilers"
)

var realNodesIdle = flag.Duration("realnodes-idle", time.Minute, "How long BenchmarkRealNodes lets the cluster sit Available before it measures the hosts' idle cost.")

const (
	// realNodesCPUWindow is how long the idle CPU is counted over.
	realNodesCPUWindow = 30 * time.Second
	// realNodesWait bounds each wait of BenchmarkRealNodes.
	realNodesWait = 10 * time.Minute
	// fleetShareTarget is what fleet's own steps (hub and agent) may add
	// to a cluster's creation, both machines together.
	fleetShareTarget = 2.0
	realNodesCluster = "rn"
	realNodesVersion = "v1.36.3"
)

// BenchmarkRealNodes times `kubectl fleet create cluster --wait` on two
// real edge hosts (internal/testkit/testhost: boxes booted from the edge
// image under real systemd, behind a site's NAT, reached by the hub only
// through edge reach) with the real Cluster API core, CABPK and KCP
// reconcilers, and splits the time into Cluster API's, the hub's, the
// agent's, kubeadm's and the kubelet's shares from timestamps taken on
// this machine's clock: the hub's objects as a watch delivers them, the
// agents' journals. Then it measures the hosts' memory and CPU at idle.
// It needs root and bin/edge-image (make test-image).
//
//	go test ./bench -run '^$' -bench RealNodes -benchtime 1x -timeout 30m
func BenchmarkRealNodes(b *testing.B) {
	kit := realNodesKit(b)
	ctrl.SetLogger(logr.Discard())
	startClusterAPI(b)
	startKubeadmControlPlane(b)
	for range b.N {
		realNodes(b, kit)
	}
}

// realNodesBinaries is what the benchmark builds and finds.
type realNodesBinaries struct {
	image        string // the edge image's root file system (make test-image)
	agent        string // fleet-agent, over the image's
	kubectlFleet string // kubectl-fleet
}

// realNodesKit finds what real hosts need on this machine, or skips.
func realNodesKit(b *testing.B) realNodesBinaries {
	b.Helper()
	image, err := filepath.Abs(filepath.Join("..", "bin", "edge-image", "rootfs"))
	must(b, err)
	testhost.Require(b, image, "BenchmarkRealNodes's hosts")
	return realNodesBinaries{image: image, agent: goBuild(b, "./cmd/fleet-agent", "fleet-agent"),
		kubectlFleet: goBuild(b, "./cmd/kubectl-fleet", "kubectl-fleet")}
}

// role is a machine's part in the cluster.
type role string

const (
	controlPlane role = "control plane"
	worker       role = "worker"
)

var roles = []role{controlPlane, worker}

// Milestones of one machine, as keys of marks.
const (
	mMachine        = "Machine created"
	mBootstrapData  = "bootstrap data ready (KubeadmConfig dataSecretName)"
	mMachineData    = "Machine has its bootstrap data (spec.bootstrap.dataSecretName)"
	mClaimed        = "host claimed (EdgeHost claimRef)"
	mClaimData      = "bootstrap data on the host's claim (EdgeHost claimRef)"
	mProvisioning   = "agent: Provisioning"
	mFirstRuncmd    = "agent: runcmd 1 starts"
	mSentinel       = "agent: runcmd done, sentinel"
	mProvisioned    = "agent: Provisioned"
	mHostReported   = "EdgeHost reports the bootstrap Succeeded (hub wrote the report)"
	mEMProvisioned  = "EdgeMachine provisioned (providerID, initialization.provisioned)"
	mMachineRunning = "Machine Running (nodeRef)"
	mNode           = "Node registered"
	mNodeReady      = "Node Ready"
)

var milestones = []string{mMachine, mBootstrapData, mMachineData, mClaimed, mClaimData, mProvisioning, mFirstRuncmd,
	mNode, mNodeReady, mSentinel, mProvisioned, mHostReported, mEMProvisioned, mMachineRunning}

// marks holds the first time each milestone was seen, per role.
type marks struct {
	mu sync.Mutex
	t  map[role]map[string]time.Time
}

func newMarks() *marks {
	return &marks{t: map[role]map[string]time.Time{controlPlane: {}, worker: {}}}
}

func (m *marks) mark(r role, what string, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.t[r][what]; !ok {
		m.t[r][what] = at
	}
}

func (m *marks) get(r role, what string) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.t[r][what]
	return t, ok
}

func roleOf(o client.Object) role {
	if _, ok := o.GetLabels()[clusterv1.MachineControlPlaneLabel]; ok {
		return controlPlane
	}
	return worker
}

func realNodes(b *testing.B, kit realNodesBinaries) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := env.Client
	ns, err := env.CreateNamespace(ctx, "realnodes")
	must(b, err)
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "[%s] real nodes: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}

	// The hub, with edge reach; the site's router forwards to its gateway.
	const lan = "10.95.0"
	gw := startRealNodesHub(ctx, b, ns, lan+".1")
	site, err := testhost.NewSite(fmt.Sprintf("frb-%d", os.Getpid()%100000), lan)
	must(b, err)
	b.Cleanup(func() {
		if err := site.Close(); err != nil {
			b.Error(err)
		}
	})
	fwd, err := site.Forward(net.JoinHostPort(site.Router, "8443"), gw.Addr())
	must(b, err)
	hubURL := "https://" + fwd

	// Two hosts, enrolled with their role as a label.
	prefix := fmt.Sprintf("rb%d", os.Getpid()%100000)
	hostNames := map[role]string{controlPlane: prefix + "-cp", worker: prefix + "-w"}
	roleLabel := map[role]string{controlPlane: "control-plane", worker: "worker"}
	hosts := map[role]*testhost.Host{}
	for _, r := range roles {
		token, _, err := enrollment.CreateToken(ctx, c, ns, enrolltoken.Options{TTL: time.Hour, HostNamespace: ns,
			HostLabels: map[string]string{"fleet.bench/role": roleLabel[r]}}, time.Now())
		must(b, err)
		h, err := site.NewHost(ctx, testhost.HostOptions{Name: hostNames[r], Image: kit.image, Agent: kit.agent, Dir: b.TempDir()})
		must(b, err)
		b.Cleanup(func() {
			if b.Failed() {
				b.Log(h.Logs())
			}
			if err := h.Close(); err != nil {
				b.Error(err)
			}
		})
		// The journal's timestamps to the nanosecond: the agent's default
		// encoding is to the second, too coarse for the shares measured here.
		must(b, h.WriteFile("etc/systemd/system/fleet-agent.service.d/20-bench-timestamps.conf", ("[Service]\nExecStart=\nExecStart=/usr/bin/fleet-agent --config /etc/fleet-agent/config.yaml --zap-time-encoding=rfc3339nano\n"), 0o644))
		// As with systemd, a new drop-in counts after a daemon-reload.
		if out, err := h.Command(ctx, "systemctl", "daemon-reload").CombinedOutput(); err != nil {
			b.Fatalf("systemctl daemon-reload on %s: %v: %s", h.Name, err, out)
		}
		must(b, h.StartAgent(ctx, testhost.AgentConfig{Hub: hubURL, Token: token, CACertHash: gw.CA().Pin(), ResyncInterval: "2s"}))
		hosts[r] = h
	}
	waitUntil(b, "both hosts enrolled and Available", func() error {
		for _, r := range roles {
			h := &infrav1.EdgeHost{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: hostNames[r]}, h); err != nil {
				return err
			}
			if h.Status.Phase != infrav1.HostAvailable {
				return fmt.Errorf("host %s is %q", h.Name, h.Status.Phase)
			}
		}
		return nil
	})
	logf("hosts %s and %s Available", hostNames[controlPlane], hostNames[worker])

	// Watch the hub's objects; every milestone is the first time a watch
	// delivers it.
	m := newMarks()
	var clusterAvailable time.Time
	var clusterMu sync.Mutex
	nodeRole := map[string]role{hostNames[controlPlane]: controlPlane, hostNames[worker]: worker}
	watchHub(ctx, b, ns, nodeRole, m, func(at time.Time) {
		clusterMu.Lock()
		defer clusterMu.Unlock()
		if clusterAvailable.IsZero() {
			clusterAvailable = at
		}
	})
	go watchNodes(ctx, ns, nodeRole, m)

	// The operator's command.
	hubKC := filepath.Join(b.TempDir(), "hub.kubeconfig")
	must(b, os.WriteFile(hubKC, kubeconfig.FromEnvTestConfig(env.Config, &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "hub"}}), 0o600))
	args := []string{"create", "cluster", realNodesCluster, "--kubernetes-version", realNodesVersion,
		"--control-plane=kubeadm", "--control-plane-machines", "1", "--worker-machines", "1",
		"--kubeadm-config", "docs/templates/kubeadm-cgroupv1-test-hosts.yaml",
		"--control-plane-host-selector", "fleet.bench/role=control-plane", "--worker-host-selector", "fleet.bench/role=worker",
		"--wait", "--timeout", "15m"}
	cmd := exec.CommandContext(ctx, kit.kubectlFleet, append(args, "--kubeconfig", hubKC, "-n", ns)...)
	cmd.Dir = ".."
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	load0 := loadAverage()
	logf("kubectl fleet %s", strings.Join(args, " "))
	start := time.Now()
	if err := cmd.Run(); err != nil {
		b.Fatalf("kubectl fleet create cluster: %v\n%s", err, out.String())
	}
	waited := time.Since(start)
	logf("kubectl fleet create cluster --wait returned after %s", waited.Round(time.Millisecond))
	var ready time.Time
	waitUntil(b, "Cluster Available and both Nodes Ready", func() error {
		clusterMu.Lock()
		avail := clusterAvailable
		clusterMu.Unlock()
		if avail.IsZero() {
			return errors.New("Cluster not Available")
		}
		ready = avail
		for _, r := range roles {
			t, ok := m.get(r, mNodeReady)
			if !ok {
				return fmt.Errorf("%s Node not Ready", r)
			}
			if t.After(ready) {
				ready = t
			}
		}
		return nil
	})
	load1 := loadAverage()
	logf("Cluster Available and both Nodes Ready %s after the command started", ready.Sub(start).Round(time.Millisecond))

	// The agents' journals.
	for _, r := range roles {
		if err := readJournal(hosts[r].UnitLog("fleet-agent.service"), start, r, m); err != nil {
			b.Fatalf("host %s: %v", hostNames[r], err)
		}
	}

	rep := results.New("realnodes", "realnodes", "A cluster on real nodes",
		"go test ./bench -run '^$' -bench RealNodes -benchtime 1x -timeout 30m` (as root), which times `kubectl fleet "+strings.Join(args, " "))
	rep.Add(results.Figure{Key: "create-wait-s", Name: "`kubectl fleet create cluster --wait` (1 control plane + 1 worker, real kubeadm): returns when every Machine is Running",
		Value: waited.Seconds(), Unit: "s"})
	rep.Add(results.Figure{Key: "ready-s", Name: "from the same start to Cluster Available=True and both Nodes Ready",
		Value: ready.Sub(start).Seconds(), Unit: "s"})
	b.ReportMetric(waited.Seconds(), "s-create-wait")
	b.ReportMetric(ready.Sub(start).Seconds(), "s-ready")

	fleetShare, shares := shareTables(b, rep, m, start)
	rep.Add(results.Figure{Key: "fleet-share-s", Name: "fleet's share, both machines: the hub's (bootstrap data → claim → pushed; report → EdgeHost → EdgeMachine) and the agent's (files and units; sentinel, PKI expiry, report)",
		Value: fleetShare, Unit: "s", Target: fmt.Sprintf("≤ %g s", fleetShareTarget), Limit: results.Limit(fleetShareTarget), Below: true})
	for _, s := range shares {
		if slices.Contains([]string{"cp-fleet-s", "worker-fleet-s", "cp-kubeadm-s", "worker-kubeadm-s", "cp-kubelet-ready-s", "worker-kubelet-ready-s"}, s.Key) {
			rep.Add(s)
		}
	}
	b.ReportMetric(fleetShare, "s-fleet-share")
	met := "met"
	if fleetShare > fleetShareTarget {
		met = "MISSED"
	}
	logf("fleet's share %.3f s of %.1f s: target ≤ %g s %s", fleetShare, ready.Sub(start).Seconds(), fleetShareTarget, met)

	// Idle cost.
	logf("idle for %s before measuring the hosts", *realNodesIdle)
	time.Sleep(*realNodesIdle)
	idleCost(b, rep, hosts)

	rep.Notes = append(rep.Notes,
		fmt.Sprintf("Load average (1 min) of the machine when the command started: %s; when the cluster was Ready: %s. "+
			"Everything shares this machine's cores: the hub's API server and etcd, Cluster API's and fleet's reconcilers (in the benchmark's process), "+
			"both hosts (each with its containerd, kubelet and, on the control plane, etcd and the API server), and whatever else runs on the machine.", load0, load1),
		"How the shares are measured: every time is this machine's clock. The hub's objects (Machine, KubeadmConfig, EdgeHost, EdgeMachine, Cluster) and the "+
			"workload's Nodes (through edge reach) are watched, and a milestone is the moment a watch delivered it; the agent's steps are its journal lines "+
			"(`Provisioning`, `Bootstrap step` … `runcmd 1/N`, `sentinel`, `Provisioned`). The agent logs times to the second by default; the benchmark "+
			"starts it with `--zap-time-encoding=rfc3339nano` (a unit drop-in). fleet's share is the sum, over both machines, of the rows marked hub and "+
			"agent. The worker's Cluster API share includes waiting for the control plane: CABPK makes join data only once the control plane is "+
			"initialized. The control plane's kubeadm row includes the kubelet's start and its Node's registration (kubeadm init waits for both).",
		pathNote(m),
		"`kubectl fleet create cluster --wait` output:\n\n```\n"+tailString(out.String(), 4000)+"\n```")

	if _, err := rep.Write(*resultsDir); err != nil {
		b.Fatal(err)
	}

	// Delete the cluster; the hosts are reset before they are closed.
	must(b, c.Delete(ctx, &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: realNodesCluster}}))
	waitUntil(b, "the cluster deleted and both hosts Available", func() error {
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: realNodesCluster}, &clusterv1.Cluster{})
		if err == nil {
			return errors.New("the Cluster is still there")
		}
		if client.IgnoreNotFound(err) != nil {
			return err
		}
		for _, r := range roles {
			h := &infrav1.EdgeHost{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: hostNames[r]}, h); err != nil {
				return err
			}
			if h.Status.Phase != infrav1.HostAvailable {
				return fmt.Errorf("host %s is %q", h.Name, h.Status.Phase)
			}
		}
		return nil
	})
	logf("cluster deleted, hosts Available")
}

// startRealNodesHub runs fleet's hub with edge reach in this process; its
// certificate names the site router's address, where the hosts reach it.
func startRealNodesHub(ctx context.Context, b *testing.B, ns, router string) *gateway.Server {
	b.Helper()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Logger: logr.Discard(), Cache: cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}}})
	must(b, err)
	// The proxy advertises its own address: it needs a fixed port.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(b, err)
	proxyAddr := ln.Addr().String()
	ln.Close()
	h, err := hub.Setup(ctx, mgr, hub.Options{Reconcilers: hubreconcilers.Options{Concurrency: 4, SkipNameValidation: true},
		Gateway: &gateway.Options{Addr: "127.0.0.1:0", HubNamespace: ns, IPs: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(router)}},
		Reach:   &reach.SetupOptions{Options: reach.Options{Addr: proxyAddr}}})
	must(b, err)
	gw, proxy := h.Gateway, h.Proxy
	mctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(mctx) }()
	b.Cleanup(func() { stop(); <-done })
	<-gw.Ready()
	<-proxy.Ready()
	return gw
}

// watchHub records the hub-side milestones from informers on ns;
// available is called when the Cluster is Available.
func watchHub(ctx context.Context, b *testing.B, ns string, hostRole map[string]role, m *marks, available func(time.Time)) {
	b.Helper()
	cc, err := cache.New(env.Config, cache.Options{Scheme: env.Scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	must(b, err)
	on := func(obj client.Object, fn func(client.Object, time.Time)) {
		inf, err := cc.GetInformer(ctx, obj)
		must(b, err)
		handle := func(o any) {
			if co, ok := o.(client.Object); ok {
				fn(co, time.Now())
			}
		}
		_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { handle(o) },
			UpdateFunc: func(_, o any) { handle(o) },
		})
		must(b, err)
	}
	on(&clusterv1.Machine{}, func(o client.Object, at time.Time) {
		mc := o.(*clusterv1.Machine)
		r := roleOf(mc)
		m.mark(r, mMachine, at)
		if mc.Spec.Bootstrap.DataSecretName != nil {
			m.mark(r, mMachineData, at)
		}
		if mc.Status.NodeRef.IsDefined() {
			m.mark(r, mMachineRunning, at)
		}
	})
	on(&bootstrapv1.KubeadmConfig{}, func(o client.Object, at time.Time) {
		if o.(*bootstrapv1.KubeadmConfig).Status.DataSecretName != "" {
			m.mark(roleOf(o), mBootstrapData, at)
		}
	})
	on(&infrav1.EdgeMachine{}, func(o client.Object, at time.Time) {
		em := o.(*infrav1.EdgeMachine)
		if ptr.Deref(em.Status.Initialization.Provisioned, false) {
			m.mark(roleOf(em), mEMProvisioned, at)
		}
	})
	on(&infrav1.EdgeHost{}, func(o client.Object, at time.Time) {
		h := o.(*infrav1.EdgeHost)
		r, ok := hostRole[h.Name]
		if !ok {
			return
		}
		if h.Spec.ClaimRef != nil {
			m.mark(r, mClaimed, at)
			if h.Spec.ClaimRef.BootstrapDataSecretName != "" {
				m.mark(r, mClaimData, at)
			}
		}
		if p := h.Status.Provisioning; p != nil && p.State == infrav1.ProvisioningSucceeded {
			m.mark(r, mHostReported, at)
		}
	})
	on(&clusterv1.Cluster{}, func(o client.Object, at time.Time) {
		if conditions.IsTrue(o.(*clusterv1.Cluster), clusterv1.ClusterAvailableCondition) {
			available(at)
		}
	})
	go func() { _ = cc.Start(ctx) }()
	if !cc.WaitForCacheSync(ctx) {
		b.Fatal("the hub watch did not sync")
	}
}

// watchNodes watches the workload cluster's Nodes through edge reach (its
// kubeconfig Secret, once the hub has put its proxy in it) and records
// when each registers and becomes Ready.
func watchNodes(ctx context.Context, ns string, nodeRole map[string]role, m *marks) {
	see := func(n *corev1.Node, at time.Time) {
		r, ok := nodeRole[n.Name]
		if !ok {
			return
		}
		m.mark(r, mNode, at)
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				m.mark(r, mNodeReady, at)
			}
		}
	}
	for ctx.Err() == nil {
		cs, err := workloadClient(ctx, ns)
		if err == nil {
			var nodes *corev1.NodeList
			nodes, err = cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			if err == nil {
				for i := range nodes.Items {
					see(&nodes.Items[i], time.Now())
				}
				var w watch.Interface
				w, err = cs.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{ResourceVersion: nodes.ResourceVersion})
				if err == nil {
					for ev := range w.ResultChan() {
						if n, ok := ev.Object.(*corev1.Node); ok {
							see(n, time.Now())
						}
					}
					w.Stop()
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// workloadClient is a client of the workload cluster as Cluster API
// reaches it: the <cluster>-kubeconfig Secret with the hub's proxy-url.
func workloadClient(ctx context.Context, ns string) (*kubernetes.Clientset, error) {
	s := &corev1.Secret{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: realNodesCluster + "-kubeconfig"}, s); err != nil {
		return nil, err
	}
	if !bytes.Contains(s.Data["value"], []byte("proxy-url")) {
		return nil, errors.New("no proxy-url in the kubeconfig yet")
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(s.Data["value"])
	if err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = 0
	return kubernetes.NewForConfig(cfg)
}

// journalLine is a line of the agent's JSON log.
type journalLine struct {
	TS   string `json:"ts"`
	Msg  string `json:"msg"`
	Step string `json:"step"`
}

// readJournal records the agent's steps from its journal (lines after
// since).
func readJournal(journal string, since time.Time, r role, m *marks) error {
	sc := bufio.NewScanner(strings.NewReader(journal))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte("{")) {
			continue
		}
		var l journalLine
		if json.Unmarshal(line, &l) != nil {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, l.TS)
		if err != nil || at.Before(since) {
			continue
		}
		switch {
		case l.Msg == "Provisioning":
			m.mark(r, mProvisioning, at)
		case l.Msg == "Bootstrap step" && strings.HasPrefix(l.Step, "runcmd 1/"):
			m.mark(r, mFirstRuncmd, at)
		case l.Msg == "Bootstrap step" && l.Step == "sentinel":
			m.mark(r, mSentinel, at)
		case l.Msg == "Provisioned":
			m.mark(r, mProvisioned, at)
		}
	}
	for _, want := range []string{mProvisioning, mFirstRuncmd, mSentinel, mProvisioned} {
		if _, ok := m.get(r, want); !ok {
			return fmt.Errorf("the agent's journal has no %q line after %s", want, since.Format(time.RFC3339Nano))
		}
	}
	return nil
}

// pathNote says whether the worker's chain waited for the control
// plane's whole chain, fleet's rows included: then both machines' rows
// are on the way to Ready and their sum is fleet's share of it.
func pathNote(m *marks) string {
	cpRunning, ok1 := m.get(controlPlane, mMachineRunning)
	workerData, ok2 := m.get(worker, mBootstrapData)
	if !ok1 || !ok2 {
		return ""
	}
	d := workerData.Sub(cpRunning).Seconds()
	if d >= 0 {
		return fmt.Sprintf("The worker's join data came %.2f s after the control-plane Machine was Running: the worker's chain started after the "+
			"control plane's had ended, fleet's rows included, so both machines' hub and agent rows lie on the way to Ready.", d)
	}
	return fmt.Sprintf("The worker's join data came %.2f s before the control-plane Machine was Running: the two chains overlapped, "+
		"and the sum of both machines' hub and agent rows is more than fleet's share of the way to Ready.", -d)
}

// share is one segment of a machine's way from the command to Ready.
type share struct {
	key, who, what string
	from, to       string
	fleet          bool
}

var sharesOf = []share{
	{"capi-machine", "Cluster API", "command start → Machine created (KCP / MachineSet)", "", mMachine, false},
	{"capi-bootstrap", "Cluster API", "Machine created → bootstrap data ready (CABPK)", mMachine, mBootstrapData, false},
	{"capi-machine-data", "Cluster API", "bootstrap data ready → on the Machine (core's Machine controller)", mBootstrapData, mMachineData, false},
	{"hub-claim", "hub", "Machine's bootstrap data → on the host's claim (EdgeMachine reconciler)", mMachineData, mClaimData, true},
	{"hub-push", "hub", "claim with bootstrap data → agent `Provisioning` (desired state read and pushed)", mClaimData, mProvisioning, true},
	{"agent-prepare", "agent", "`Provisioning` → runcmd 1 (bootcmd, files, units)", mProvisioning, mFirstRuncmd, true},
	{"kubeadm", "kubeadm", "runcmd (kubeadm init / join)", mFirstRuncmd, mSentinel, false},
	{"agent-finish", "agent", "runcmd done → `Provisioned` (sentinel, PKI expiry, report)", mSentinel, mProvisioned, true},
	{"hub-report", "hub", "`Provisioned` → EdgeHost reports it (status received and written)", mProvisioned, mHostReported, true},
	{"hub-machine", "hub", "EdgeHost reports it → EdgeMachine provisioned (providerID; EdgeMachine reconciler)", mHostReported, mEMProvisioned, true},
	{"capi-running", "Cluster API", "EdgeMachine provisioned → Machine Running (nodeRef)", mEMProvisioned, mMachineRunning, false},
}

// shareTables adds the per-machine tables and figures, and returns
// fleet's share (both machines).
func shareTables(b *testing.B, rep *results.Report, m *marks, start time.Time) (float64, []results.Figure) {
	b.Helper()
	at := func(r role, what string) (time.Time, bool) {
		if what == "" {
			return start, true
		}
		return m.get(r, what)
	}
	short := map[role]string{controlPlane: "cp", worker: "worker"}
	var fleet float64
	var figs []results.Figure
	t := results.Table{Title: "Where the time goes, per machine (seconds; every time on this machine's clock)",
		Header: []string{"who", "segment", "control plane", "worker"}}
	for _, s := range sharesOf {
		row := []string{s.who, s.what}
		for _, r := range roles {
			from, ok1 := at(r, s.from)
			to, ok2 := at(r, s.to)
			if !ok1 || !ok2 {
				b.Fatalf("%s: no time for %q or %q", r, s.from, s.to)
			}
			d := to.Sub(from).Seconds()
			if d < 0 {
				// Marks out of order: a clock read too coarsely (say, the
				// journal without its nanoseconds) would make shares up.
				b.Fatalf("%s: %q came %.3f s before %q", r, s.to, -d, s.from)
			}
			row = append(row, strconv.FormatFloat(d, 'f', 3, 64))
			if s.fleet {
				fleet += d
			}
			figs = append(figs, results.Figure{Key: short[r] + "-" + s.key + "-s", Name: fmt.Sprintf("%s: %s", r, s.what), Value: d, Unit: "s"})
			b.ReportMetric(d, "s-"+short[r]+"-"+s.key)
		}
		t.Rows = append(t.Rows, row)
	}
	kubelet := []string{"kubelet", "Node registered → Ready"}
	for _, r := range roles {
		n, ok1 := m.get(r, mNode)
		ready, ok2 := m.get(r, mNodeReady)
		if !ok1 || !ok2 {
			b.Fatalf("%s: Node registered or Ready not seen", r)
		}
		kubelet = append(kubelet, strconv.FormatFloat(ready.Sub(n).Seconds(), 'f', 3, 64))
		figs = append(figs, results.Figure{Key: short[r] + "-kubelet-ready-s", Name: fmt.Sprintf("%s: Node registered → Ready (kubelet)", r),
			Value: ready.Sub(n).Seconds(), Unit: "s"})
	}
	t.Rows = append(t.Rows, kubelet)
	fl := []string{"**fleet**", "hub + agent rows above"}
	for _, r := range roles {
		var sum float64
		for _, s := range sharesOf {
			if s.fleet {
				from, _ := at(r, s.from)
				to, _ := at(r, s.to)
				sum += to.Sub(from).Seconds()
			}
		}
		fl = append(fl, "**"+strconv.FormatFloat(sum, 'f', 3, 64)+"**")
		figs = append(figs, results.Figure{Key: short[r] + "-fleet-s", Name: fmt.Sprintf("%s: fleet's share (its hub and agent rows below)", r), Value: sum, Unit: "s"})
		b.ReportMetric(sum, "s-"+short[r]+"-fleet")
	}
	t.Rows = append(t.Rows, fl)
	rep.Tables = append(rep.Tables, t)

	tl := results.Table{Title: "Timeline: seconds after the command started, first seen (the Node rows overlap kubeadm's: init and join register the Node)",
		Header: []string{"milestone", "control plane", "worker"}}
	for _, what := range milestones {
		row := []string{what}
		for _, r := range roles {
			if x, ok := m.get(r, what); ok {
				row = append(row, strconv.FormatFloat(x.Sub(start).Seconds(), 'f', 3, 64))
			} else {
				row = append(row, "—")
			}
		}
		tl.Rows = append(tl.Rows, row)
	}
	rep.Tables = append(rep.Tables, tl)
	return fleet, figs
}

// idleCost measures each host's memory and CPU, with the control plane's
// broken down by program.
func idleCost(b *testing.B, rep *results.Report, hosts map[role]*testhost.Host) {
	b.Helper()
	short := map[role]string{controlPlane: "cp", worker: "worker"}
	type sample struct {
		cpu   int64 // cpuacct.usage, ns
		procs map[int]procSample
	}
	take := func(h *testhost.Host) sample {
		u, err := readInt(filepath.Join("/sys/fs/cgroup/cpuacct", "fleet-"+h.Name, "cpuacct.usage"))
		must(b, err)
		return sample{cpu: u, procs: cgroupProcs(filepath.Join("/sys/fs/cgroup/memory", "fleet-"+h.Name))}
	}
	before := map[role]sample{}
	for _, r := range roles {
		before[r] = take(hosts[r])
	}
	t0 := time.Now()
	time.Sleep(realNodesCPUWindow)
	window := time.Since(t0)
	for _, r := range roles {
		h := hosts[r]
		after := take(h)
		cores := float64(after.cpu-before[r].cpu) / float64(window.Nanoseconds())
		var rss int64
		for _, p := range after.procs {
			rss += p.rssKiB
		}
		stat := memStat(filepath.Join("/sys/fs/cgroup/memory", "fleet-"+h.Name, "memory.stat"))
		usage, _ := readInt(filepath.Join("/sys/fs/cgroup/memory", "fleet-"+h.Name, "memory.usage_in_bytes"))
		rep.Add(results.Figure{Key: short[r] + "-idle-rss-mib", Name: fmt.Sprintf("%s host at idle: RSS (sum of VmRSS over its cgroup's %d processes)", r, len(after.procs)),
			Value: float64(rss) / 1024, Unit: "MiB"})
		rep.Add(results.Figure{Key: short[r] + "-idle-anon-mib", Name: fmt.Sprintf("%s host at idle: its cgroup's anonymous memory (memory.stat total_rss; shared pages once)", r),
			Value: float64(stat["total_rss"]) / (1 << 20), Unit: "MiB"})
		rep.Add(results.Figure{Key: short[r] + "-idle-usage-mib", Name: fmt.Sprintf("%s host at idle: its cgroup's memory.usage_in_bytes (page cache included)", r),
			Value: float64(usage) / (1 << 20), Unit: "MiB"})
		rep.Add(results.Figure{Key: short[r] + "-idle-cpu-cores", Name: fmt.Sprintf("%s host at idle: CPU (cpuacct.usage over %s)", r, window.Round(time.Second)),
			Value: cores, Unit: "cores"})
		b.ReportMetric(float64(rss)/1024, "MiB-"+short[r]+"-idle-RSS")
		b.ReportMetric(cores, "cores-"+short[r]+"-idle")

		byProgram := map[string]*procSample{}
		for pid, p := range after.procs {
			agg := byProgram[p.program]
			if agg == nil {
				agg = &procSample{program: p.program}
				byProgram[p.program] = agg
			}
			agg.count++
			agg.rssKiB += p.rssKiB
			if p0, ok := before[r].procs[pid]; ok {
				agg.cpu += p.cpu - p0.cpu
			} else {
				agg.cpu += p.cpu
			}
		}
		names := make([]string, 0, len(byProgram))
		for n := range byProgram {
			names = append(names, n)
		}
		slices.SortFunc(names, func(a, c string) int { return int(byProgram[c].rssKiB - byProgram[a].rssKiB) })
		t := results.Table{Title: fmt.Sprintf("The %s host at idle, by program (VmRSS now; CPU from /proc/<pid>/stat over the same %s)", r, window.Round(time.Second)),
			Header: []string{"program", "processes", "RSS MiB", "CPU cores"}}
		for _, n := range names {
			p := byProgram[n]
			t.Rows = append(t.Rows, []string{n, strconv.Itoa(p.count), strconv.FormatFloat(float64(p.rssKiB)/1024, 'f', 1, 64),
				strconv.FormatFloat(p.cpu.Seconds()/window.Seconds(), 'f', 3, 64)})
		}
		t.Rows = append(t.Rows, []string{"**total**", strconv.Itoa(len(after.procs)), "**" + strconv.FormatFloat(float64(rss)/1024, 'f', 1, 64) + "**",
			"**" + strconv.FormatFloat(cores, 'f', 3, 64) + "** (cgroup)"})
		rep.Tables = append(rep.Tables, t)
	}
}

// procSample is one process (or, summed, one program) of a host.
type procSample struct {
	program string
	count   int
	rssKiB  int64
	cpu     time.Duration
}

// cgroupProcs reads every process of a cgroup and its children.
func cgroupProcs(dir string) map[int]procSample {
	out := map[int]procSample{}
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		b, _ := os.ReadFile(p)
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				continue
			}
			if s, ok := readProc(pid); ok {
				out[pid] = s
			}
		}
		return nil
	})
	return out
}

func readProc(pid int) (procSample, bool) {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return procSample{}, false
	}
	s := procSample{program: strings.TrimSuffix(filepath.Base(exe), " (deleted)"), count: 1}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procSample{}, false
	}
	for _, l := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				s.rssKiB, _ = strconv.ParseInt(f[0], 10, 64)
			}
		}
	}
	s.cpu, _ = load.ProcessCPU(pid)
	return s, true
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

func memStat(path string) map[string]int64 {
	out := map[string]int64{}
	b, _ := os.ReadFile(path)
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 2 {
			out[f[0]], _ = strconv.ParseInt(f[1], 10, 64)
		}
	}
	return out
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return "unknown"
}

func tailString(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// waitUntil polls cond every 100 ms for up to realNodesWait.
func waitUntil(b *testing.B, what string, cond func() error) {
	b.Helper()
	testkit.Eventually(b, realNodesWait, 100*time.Millisecond, what, cond)
}
