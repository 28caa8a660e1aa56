package bench

import (
	"bytes"
	"cmp"
	"context"
	"flag"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	"sigs.k8s.io/cluster-api/util/kubeconfig"
	"sigs.k8s.io/cluster-api/util/secret"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/edgefleet/fleet/bench/load"
	"github.com/edgefleet/fleet/bench/results"
	"github.com/edgefleet/fleet/pkg/agent"
	"github.com/edgefleet/fleet/pkg/agent/provision"
	"github.com/edgefleet/fleet/pkg/clustertemplate"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/hub"
	"github.com/edgefleet/fleet/pkg/hub/embedded/clusterapi"
	"github.com/edgefleet/fleet/pkg/hub/gateway"
	"github.com/edgefleet/fleet/pkg/hub/inplace"
	hubreconcilers "github.com/edgefleet/fleet/pkg/hub/reconcilers"
	"github.com/edgefleet/fleet/pkg/pki"
	"github.com/edgefleet/fleet/test/nodesim/sim"
)

var (
	upgradeHosts          = flag.Int("upgrade-hosts", 100, "Simulated hosts BenchmarkSimulatedUpgrade moves to a new Kubernetes version in place: the control plane's (see -upgrade-control-plane), the rest workers of one MachineDeployment.")
	upgradeMaxUnavailable = flag.Int("upgrade-max-unavailable", 1, "maxUnavailable of BenchmarkSimulatedUpgrade's MachineDeployment (kubectl fleet create cluster makes 1).")
	upgradeControlPlane   = flag.String("upgrade-control-plane", "machines", "BenchmarkSimulatedUpgrade's control plane: \"machines\" (one plain Machine, as kubectl fleet create cluster --control-plane=machines makes it) or \"kcp\" (a KubeadmControlPlane of three with maxSurge 0, which Cluster API updates in place through the hooks; its etcd external).")
)

// BenchmarkSimulatedUpgrade times how long the hub takes to carry
// -upgrade-hosts hosts of one site from v1.35.4 to v1.36.3 in place:
// `kubectl fleet upgrade cluster --wait` on a cluster of one control-plane
// Machine and a MachineDeployment (maxSurge 0, maxUnavailable
// -upgrade-max-unavailable) of the rest, made on v1.35.4.
//
// Everything is real but the nodes: the API server and etcd, Cluster
// API's core (with the Runtime SDK and in-place updates) and kubeadm
// bootstrap reconcilers, fleet's hub with its in-place update hooks, and
// one real agent per host running its real in-place upgrader (journal,
// backup, kubeadm, binary swap, kubelet restart, readiness wait). kubeadm
// and the kubelet are the node simulator's: `kubeadm upgrade apply|node`
// moves the cluster's configuration and the static pods, and the Node
// reports the new version only once the kubelet binary is swapped and the
// kubelet restarted, as on a real host.
//
//	go test ./bench -run '^$' -bench SimulatedUpgrade -benchtime 1x -timeout 60m -args -upgrade-hosts=100
func BenchmarkSimulatedUpgrade(b *testing.B) {
	if _, err := load.RaiseFileLimit(); err != nil {
		b.Fatal(err)
	}
	ctrl.SetLogger(logr.Discard())
	kcp := *upgradeControlPlane == "kcp"
	if !kcp && *upgradeControlPlane != "machines" {
		b.Fatalf("-upgrade-control-plane=%q: want machines or kcp", *upgradeControlPlane)
	}
	startClusterAPI(b)
	if kcp {
		startKubeadmControlPlane(b)
	}
	cli := goBuild(b, "./cmd/kubectl-fleet", "kubectl-fleet")
	for range b.N {
		simulatedUpgrade(b, cli, *upgradeHosts, *upgradeMaxUnavailable, kcp)
	}
}

// kcpOnce: the KubeadmControlPlane reconciler can start once per process,
// like the others (capiOnce).
var kcpOnce sync.Once

// startKubeadmControlPlane runs the real KubeadmControlPlane reconciler in
// this process, once.
func startKubeadmControlPlane(b *testing.B) {
	b.Helper()
	kcpOnce.Do(func() {
		m, err := clusterapi.NewKubeadmControlPlaneManager(context.Background(), env.Config, env.Scheme, clusterapi.Options{Name: "kcp-bench",
			Concurrency: 4, ConnectionRetryInterval: 2 * time.Second, GracefulShutdownTimeout: 5 * time.Second,
			SkipNameValidation: true, Logger: logr.Discard()})
		if err != nil {
			b.Fatal(err)
		}
		go func() { _ = m.Start(context.Background()) }()
	})
}

// hostUpgrade is when one host passed the stages of its upgrade.
type hostUpgrade struct {
	ordered, running, done time.Time
}

func simulatedUpgrade(b *testing.B, cli string, n, maxUnavailable int, kcp bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "[%s] upgrade of %d simulated hosts: %s\n", time.Now().Format("15:04:05"), n, fmt.Sprintf(format, args...))
	}
	controlPlanes := 1
	if kcp {
		controlPlanes = 3
	}
	if n <= controlPlanes {
		b.Fatalf("-upgrade-hosts=%d: want %d control-plane hosts and at least one worker", n, controlPlanes)
	}
	dir := b.TempDir()
	ns, err := env.CreateNamespace(ctx, "upsim")
	must(b, err)
	gw := startHubWithHooks(ctx, b, ns)

	workload := rest.CopyConfig(env.Config)
	workload.QPS, workload.Burst = 1000, 2000
	cs, err := kubernetes.NewForConfig(workload)
	must(b, err)
	runner := func(cfg agent.Config) load.SimRunner {
		return load.SimRunner{Sim: &sim.Simulator{Client: cs, Root: cfg.RootDir}}
	}
	role := func(i int) string {
		if i < controlPlanes {
			return "control-plane"
		}
		return "worker"
	}
	agents, err := load.NewAgents(ctx, env.Client, &load.Hub{URL: "https://" + gw.Addr(), Pin: gw.CA().Pin(), Namespace: ns},
		load.AgentOptions{N: n, Dir: agentStateDir(b, dir), NamePrefix: ns,
			HostLabels: func(i int) map[string]string { return map[string]string{"fleet.bench/role": role(i)} },
			Provisioner: func(_ int, cfg agent.Config) agent.Provisioner {
				return provision.New(provision.Options{Root: cfg.RootDir, StateDir: cfg.StateDir, Runner: runner(cfg)})
			},
			Upgrader: func(_ int, cfg agent.Config) agent.Upgrader { return load.SimUpgrader(runner(cfg), cfg.StateDir) }})
	must(b, err)
	defer agents.Stop()
	// Each host as the edge image leaves it: its own version installed,
	// the one before staged beside it.
	for i := range n {
		must(b, load.SimKubernetes(agents.Root(i), upgradeTo, upgradeFrom, upgradeTo))
	}
	agents.Start(0)
	waitUntil(b, fmt.Sprintf("%d agents connected", n), func() error {
		got, err := load.Connected(ctx, env.Client, ns)
		if err == nil && got < n {
			err = fmt.Errorf("%d of %d connected", got, n)
		}
		return err
	})

	const cluster = "upsim"
	spec := clustertemplate.Spec{Name: cluster, Namespace: ns, KubernetesVersion: upgradeFrom, ControlPlane: "machines",
		ControlPlaneMachines: int32(controlPlanes), WorkerMachines: int32(n - controlPlanes),
		ControlPlaneSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet.bench/role": "control-plane"}},
		WorkerSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"fleet.bench/role": "worker"}},
		Endpoint:             infrav1.APIEndpoint{Host: cluster + "." + ns + ".fleet.internal", Port: 6443}}
	if kcp {
		spec.ControlPlane = "kubeadm"
		// The simulated cluster's etcd is external, as it is in fact:
		// KubeadmControlPlane then judges the control plane by the static
		// pods' mirror pods and dials no etcd member it cannot have.
		spec.Kubeadm.ClusterConfiguration.Etcd.External = bootstrapv1.ExternalEtcd{Endpoints: []string{"https://127.0.0.1:2379"},
			CAFile: "/etc/kubernetes/pki/etcd/ca.crt", CertFile: "/etc/kubernetes/pki/apiserver-etcd-client.crt", KeyFile: "/etc/kubernetes/pki/apiserver-etcd-client.key"}
		must(b, externalEtcdSecrets(ctx, ns, cluster))
	}
	for _, o := range clustertemplate.Objects(spec) {
		switch o := o.(type) {
		case *clusterv1.Cluster:
			o.Annotations = map[string]string{infrav1.EdgeReachAnnotation: "disabled"}
		case *clusterv1.MachineDeployment:
			o.Spec.Rollout.Strategy.RollingUpdate.MaxUnavailable = ptr.To(intstr.FromInt32(int32(maxUnavailable)))
		case *controlplanev1.KubeadmControlPlane:
			o.Spec.Rollout.Strategy = controlplanev1.KubeadmControlPlaneRolloutStrategy{Type: controlplanev1.RollingUpdateStrategyType,
				RollingUpdate: controlplanev1.KubeadmControlPlaneRolloutStrategyRollingUpdate{MaxSurge: ptr.To(intstr.FromInt32(0))}}
		}
		if err := env.Client.Create(ctx, o); err != nil {
			b.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
		if c, ok := o.(*clusterv1.Cluster); ok {
			// The workload cluster is this API server.
			must(b, env.CreateKubeconfigSecret(ctx, c))
		}
	}

	cc, err := cache.New(env.Config, cache.Options{Scheme: env.Scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	must(b, err)
	var mu sync.Mutex
	hosts := map[string]*hostUpgrade{}
	inf, err := cc.GetInformer(ctx, &infrav1.EdgeHost{})
	must(b, err)
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{UpdateFunc: func(_, o any) {
		h, ok := o.(*infrav1.EdgeHost)
		if !ok {
			return
		}
		at := time.Now()
		mu.Lock()
		defer mu.Unlock()
		u := hosts[h.Name]
		if u == nil {
			return // not yet counting
		}
		if u.ordered.IsZero() && h.Spec.ClaimRef != nil && h.Spec.ClaimRef.KubernetesVersion == upgradeTo {
			u.ordered = at
		}
		if u.running.IsZero() && h.Status.Upgrade != nil && h.Status.Upgrade.To == upgradeTo && h.Status.Upgrade.State == infrav1.UpgradeRunning {
			u.running = at
		}
		if u.done.IsZero() && h.Status.KubernetesVersion == upgradeTo {
			u.done = at
		}
	}})
	must(b, err)
	go func() { _ = cc.Start(ctx) }()
	if !cc.WaitForCacheSync(ctx) {
		b.Fatal("cache did not sync")
	}
	for _, l := range []client.ObjectList{&clusterv1.MachineList{}, &infrav1.EdgeMachineList{}} {
		must(b, cc.List(ctx, l))
	}
	logf("making the cluster on %s", upgradeFrom)
	if _, err := waitStages(ctx, cc, ns, n, 30*time.Minute, func(s stageCounts, el time.Duration) {
		logf("%s: %+v", el.Round(time.Second), s)
	}); err != nil {
		b.Fatal(err)
	}
	machinesBefore := map[string]bool{}
	waitUntil(b, fmt.Sprintf("every host running %s, every Node on it", upgradeFrom), func() error {
		list := &infrav1.EdgeHostList{}
		if err := env.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, h := range list.Items {
			if h.Status.KubernetesVersion != upgradeFrom || !slices.Contains(h.Status.Facts.KubernetesVersions, upgradeTo) {
				return fmt.Errorf("EdgeHost %s runs %q, staged %v", h.Name, h.Status.KubernetesVersion, h.Status.Facts.KubernetesVersions)
			}
		}
		machines := &clusterv1.MachineList{}
		if err := env.Client.List(ctx, machines, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, m := range machines.Items {
			if m.Status.NodeInfo == nil || m.Status.NodeInfo.KubeletVersion != upgradeFrom {
				return fmt.Errorf("Machine %s: node %+v", m.Name, m.Status.NodeInfo)
			}
			machinesBefore[m.Name] = true
		}
		return nil
	})
	mu.Lock()
	list := &infrav1.EdgeHostList{}
	must(b, env.Client.List(ctx, list, client.InNamespace(ns)))
	controlPlaneHosts := map[string]bool{}
	for _, h := range list.Items {
		hosts[h.Name] = &hostUpgrade{}
		if h.Labels["fleet.bench/role"] == "control-plane" {
			controlPlaneHosts[h.Name] = true
		}
	}
	mu.Unlock()

	hubKC := filepath.Join(dir, "hub.kubeconfig")
	must(b, os.WriteFile(hubKC, kubeconfig.FromEnvTestConfig(env.Config, &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "hub"}}), 0o600))
	api0, apiErr := load.ReadAPIServerLoad(ctx, env.Config)
	cpu0 := load.CPUByProgram(cpuPrograms...)
	logf("kubectl fleet upgrade cluster %s --kubernetes-version %s --wait", cluster, upgradeTo)
	b.ResetTimer()
	start := time.Now()
	cmd := exec.CommandContext(ctx, cli, "upgrade", "cluster", cluster, "--kubernetes-version", upgradeTo, "--wait", "--timeout", "50m",
		"--kubeconfig", hubKC, "-n", ns)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	took := time.Since(start)
	b.StopTimer()
	if err != nil {
		b.Fatalf("kubectl fleet upgrade cluster: %v\n%s", err, tailString(out.String(), 4000))
	}
	cpu1 := load.CPUByProgram(cpuPrograms...)
	var api *load.APIServerLoad
	if api1, err := load.ReadAPIServerLoad(ctx, env.Config); err == nil && apiErr == nil {
		api = api1.Since(api0)
	}
	logf("upgraded in %s", took.Round(time.Second))

	// In place: the same Machines, each on the new version with its Node.
	machines := &clusterv1.MachineList{}
	must(b, env.Client.List(ctx, machines, client.InNamespace(ns)))
	if len(machines.Items) != len(machinesBefore) {
		b.Fatalf("%d Machines after the upgrade, %d before", len(machines.Items), len(machinesBefore))
	}
	for _, m := range machines.Items {
		if !machinesBefore[m.Name] {
			b.Fatalf("Machine %s was made during the upgrade: a replacement, not in place", m.Name)
		}
		if m.Spec.Version != upgradeTo || m.Status.NodeInfo == nil || m.Status.NodeInfo.KubeletVersion != upgradeTo {
			b.Fatalf("Machine %s after the upgrade: version %s, node %+v", m.Name, m.Spec.Version, m.Status.NodeInfo)
		}
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	must(b, err)
	for _, nd := range nodes.Items {
		if strings.HasPrefix(nd.Name, ns) && nd.Status.NodeInfo.KubeletVersion != upgradeTo {
			b.Fatalf("Node %s runs %s", nd.Name, nd.Status.NodeInfo.KubeletVersion)
		}
	}

	mu.Lock()
	defer mu.Unlock()
	var orderToDone, agentTook []float64
	var cpDone time.Time
	ordered := results.Line{Name: "hosts ordered"}
	running := results.Line{Name: "hosts upgrading"}
	done := results.Line{Name: "hosts on " + upgradeTo}
	type mark struct {
		at   float64
		line *results.Line
		step float64
	}
	var marks []mark
	for name, u := range hosts {
		if u.ordered.IsZero() || u.done.IsZero() {
			b.Fatalf("host %s: ordered %v, done %v", name, u.ordered, u.done)
		}
		orderToDone = append(orderToDone, u.done.Sub(u.ordered).Seconds())
		if !u.running.IsZero() {
			agentTook = append(agentTook, u.done.Sub(u.running).Seconds())
			marks = append(marks, mark{u.running.Sub(start).Seconds(), &running, 1}, mark{u.done.Sub(start).Seconds(), &running, -1})
		}
		marks = append(marks, mark{u.ordered.Sub(start).Seconds(), &ordered, 1}, mark{u.done.Sub(start).Seconds(), &done, 1})
		if controlPlaneHosts[name] && u.done.After(cpDone) {
			cpDone = u.done
		}
	}
	slices.SortFunc(marks, func(x, y mark) int { return cmp.Compare(x.at, y.at) })
	count := map[*results.Line]float64{}
	for _, m := range marks {
		count[m.line] += m.step
		m.line.Points = append(m.line.Points, [2]float64{m.at, count[m.line]})
	}
	slices.Sort(orderToDone)
	slices.Sort(agentTook)
	q := func(xs []float64, p float64) float64 { return xs[max(0, int(math.Ceil(p*float64(len(xs))))-1)] }

	name, cpText, cpFlag := fmt.Sprintf("upgradesim-%05d-mu%d", n, maxUnavailable), "1 plain control-plane Machine", ""
	if kcp {
		name, cpText, cpFlag = fmt.Sprintf("upgradesim-%05d-kcp3-mu%d", n, maxUnavailable), "a KubeadmControlPlane of 3 with maxSurge 0", " -upgrade-control-plane=kcp"
	}
	rep := results.New(name, "upgradesim", fmt.Sprintf("An in-place upgrade of %s simulated hosts (%s, maxUnavailable %d)", commas(n), cpText, maxUnavailable),
		fmt.Sprintf("go test ./bench -run '^$' -bench SimulatedUpgrade -benchtime 1x -timeout 60m -args -upgrade-hosts=%d -upgrade-max-unavailable=%d%s", n, maxUnavailable, cpFlag))
	rep.Size = n
	rep.Add(results.Figure{Key: "upgrade-wait-s", Name: fmt.Sprintf("`kubectl fleet upgrade cluster --wait`, %s → %s: %s hosts (%s, %s workers, maxSurge 0, maxUnavailable %d), returns when every Node runs the new version",
		upgradeFrom, upgradeTo, commas(n), cpText, commas(n-controlPlanes), maxUnavailable), Value: took.Seconds(), Unit: "s"})
	if !cpDone.IsZero() {
		rep.Add(results.Figure{Key: "control-plane-s", Name: "of which the control plane's hosts (ordered first; the workers wait for them)", Value: cpDone.Sub(start).Seconds(), Unit: "s"})
		rep.Add(results.Figure{Key: "workers-per-minute", Name: "workers upgraded per minute after the control plane", Value: float64(n-controlPlanes) / (took - cpDone.Sub(start)).Minutes(), Unit: "hosts/min"})
	}
	rep.Add(results.Figure{Key: "order-done-p50-s", Name: "one host: the hub's order on its EdgeHost → the host reporting the new version, p50", Value: q(orderToDone, 0.5), Unit: "s"})
	rep.Add(results.Figure{Key: "order-done-p99-s", Name: "… p99", Value: q(orderToDone, 0.99), Unit: "s"})
	if len(agentTook) > 0 {
		rep.Add(results.Figure{Key: "agent-p50-s", Name: "of which the agent's upgrade (it reports Running → the new version), p50", Value: q(agentTook, 0.5), Unit: "s"})
	}
	if api != nil {
		t, writes, _ := requestTableTimed(fmt.Sprintf("API requests during the upgrade (%.0f s), by verb and resource", took.Seconds()), "per host",
			api.Requests, float64(n), api.MeanLatency)
		rep.Tables = append(rep.Tables, t)
		rep.Add(results.Figure{Key: "writes-per-host", Name: "API writes per host during the upgrade (everyone's: Cluster API, fleet, the simulated kubelets)", Value: writes / float64(n), Unit: "writes"})
	}
	rep.Tables = append(rep.Tables, cpuTable(fmt.Sprintf("Where the machine's CPU went during the upgrade (%.0f s on 2 cores; /proc/PID/stat)", took.Seconds()),
		"benchmark process (Cluster API core, CABPK, fleet's hub, "+commas(n)+" agents, the node simulator)", cpu0, cpu1, took))
	rep.Series = append(rep.Series, results.Series{Key: "hosts", Title: fmt.Sprintf("%s hosts through the upgrade", commas(n)),
		XLabel: "seconds after `kubectl fleet upgrade cluster`", YLabel: "hosts", Lines: []results.Line{ordered, running, done}})
	rep.Notes = append(rep.Notes,
		"Cluster API orders the hosts: the control plane first (kubectl fleet changes the Machine's or the KubeadmControlPlane's spec.version; "+
			"KubeadmControlPlane goes through the in-place hooks one Machine at a time), then the MachineDeployment's "+
			"Machines through the in-place update hooks, at most maxUnavailable at a time. The hub's part is the order on the EdgeHost and the status "+
			"back; the agent's is its real upgrader with the node simulator playing kubeadm and the kubelet.",
		"`kubectl fleet upgrade cluster --wait` output (end):\n\n```\n"+tailString(out.String(), 3000)+"\n```")
	if _, err := rep.Write(*resultsDir); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(took.Seconds(), "s-upgrade")
}

// externalEtcdSecrets writes what a user provides for an external etcd:
// its CA (without key) and the API server's client pair, which Cluster API
// does not generate.
func externalEtcdSecrets(ctx context.Context, ns, cluster string) error {
	etcdCA, err := pki.NewCA("etcd-ca", 10*365*24*time.Hour)
	if err != nil {
		return err
	}
	etcdClient, err := pki.NewCA("kube-apiserver-etcd-client", 10*365*24*time.Hour)
	if err != nil {
		return err
	}
	for purpose, data := range map[secret.Purpose]map[string][]byte{
		secret.EtcdCA:              {secret.TLSCrtDataName: etcdCA.CertPEM},
		secret.APIServerEtcdClient: {secret.TLSCrtDataName: etcdClient.CertPEM, secret.TLSKeyDataName: etcdClient.KeyPEM},
	} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secret.Name(cluster, purpose), Namespace: ns,
			Labels: map[string]string{clusterv1.ClusterNameLabel: cluster}}, Type: clusterv1.ClusterSecretType, Data: data}
		if err := env.Client.Create(ctx, s); err != nil {
			return fmt.Errorf("writing Secret %s: %w", s.Name, err)
		}
	}
	return nil
}

// startHubWithHooks runs fleet's hub in this process with its in-place
// update hooks, registered with Cluster API for ns alone.
func startHubWithHooks(ctx context.Context, b *testing.B, ns string) *gateway.Server {
	b.Helper()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Logger: logr.Discard(), Cache: cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}}})
	must(b, err)
	name := "fleet-" + ns
	loopback := []net.IP{net.IPv4(127, 0, 0, 1)}
	h, err := hub.Setup(ctx, mgr, hub.Options{Reconcilers: hubreconcilers.Options{Concurrency: 10, SkipNameValidation: true},
		Gateway: &gateway.Options{Addr: "127.0.0.1:0", HubNamespace: ns, IPs: loopback},
		InPlace: &inplace.Options{Addr: "127.0.0.1:0", Namespace: ns, IPs: loopback, Register: true, Name: name,
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}}})
	must(b, err)
	mctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(mctx) }()
	b.Cleanup(func() {
		stop()
		<-done
		_ = env.Client.Delete(context.Background(), &runtimev1.ExtensionConfig{ObjectMeta: metav1.ObjectMeta{Name: name}})
	})
	<-h.Gateway.Ready()
	return h.Gateway
}
