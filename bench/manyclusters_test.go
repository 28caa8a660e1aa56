package bench

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/secret"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/bench/load"
	"github.com/edgefleet/fleet/bench/results"
	"github.com/edgefleet/fleet/pkg/agent"
	"github.com/edgefleet/fleet/pkg/agent/provision"
	"github.com/edgefleet/fleet/pkg/clustertemplate"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/pki"
	"github.com/edgefleet/fleet/test/nodesim/sim"
)

var (
	clusterCount = flag.Int("clusters", 500, "One-host clusters BenchmarkManyClusters makes from the ClusterClass edge.")
	clustersIdle = flag.Duration("clusters-idle", 10*time.Minute, "How long BenchmarkManyClusters counts the API writes and CPU of its clusters at rest.")
)

// siteAPIAddr is where an agent dials its cluster's endpoint on a
// control-plane host: the hub resolves the endpoint to 127.0.0.1 there.
const siteAPIAddr = "127.0.0.1:6443"

// clustersTimeout bounds the wait for every cluster to be Available.
const clustersTimeout = 60 * time.Minute

// BenchmarkManyClusters makes -clusters one-host clusters from fleet's
// ClusterClass edge, each a Cluster with spec.topology (v1.36.3, one
// control-plane machine, no workers, variables site, controlPlaneSchedulable
// and etcdExternal) on a host of its own, and waits until Cluster API calls
// every one Available; then it measures them at rest for -clusters-idle.
//
// Everything is real but the nodes: the API server and etcd, a fleet-hub
// process (gateway, reconcilers, edge-reach proxy), Cluster API's core
// (with topology), kubeadm bootstrap and KubeadmControlPlane reconcilers
// and webhooks in a process of their own (bench/capimanager), and one real
// agent per host in this process, running CABPK's cloud-config with the
// node simulator for kubeadm and the kubelet. Every cluster's API server is
// played by one stand-in kube-apiserver behind a front that tells the
// clusters apart (load.SiteAPI); Cluster API reaches it only through edge
// reach: its kubeconfig Secret's proxy-url, the hub's proxy, the agent's
// tunnel.
//
//	go test ./bench -run '^$' -bench ManyClusters -benchtime 1x -timeout 120m -args -clusters=500 -clusters-idle=10m
func BenchmarkManyClusters(b *testing.B) {
	if _, err := load.RaiseFileLimit(); err != nil {
		b.Fatal(err)
	}
	ctrl.SetLogger(logr.Discard())
	hubBin := buildHub(b)
	capiBin := goBuild(b, "./bench/capimanager", "capi-manager")
	for range b.N {
		m := &manyClusters{b: b, n: *clusterCount, hubBin: hubBin, capiBin: capiBin, dir: b.TempDir()}
		m.run()
	}
}

type manyClusters struct {
	b               *testing.B
	n               int
	hubBin, capiBin string
	dir             string
	ns              string

	hub    *load.Hub
	capi   *capiProcess
	site   *load.SiteAPI
	agents *load.Agents
	cache  cache.Cache
	rep    *results.Report
}

func (m *manyClusters) logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%s] clusters=%d: %s\n", time.Now().Format("15:04:05"), m.n, fmt.Sprintf(format, args...))
}

// name is cluster i's name, which is also its host's (the agents'
// hostnames, load.NewAgents) and so its node's.
func (m *manyClusters) name(i int) string { return fmt.Sprintf("%s-%05d", m.ns, i) }

func (m *manyClusters) run() {
	b := m.b
	ctx := context.Background()
	m.ns = fmt.Sprintf("mc%d", time.Now().UnixNano()%100000)
	names := map[string]bool{}
	for i := range m.n {
		names[m.name(i)] = true
	}

	// The sites' API server: one stand-in behind a front at the address
	// the agents dial, showing each cluster its own certificate (from the
	// CA Cluster API generates for it) and its own objects.
	domain := "." + m.ns + "." + infrav1.EndpointDomain
	clusterOf := func(serverName string) (string, bool) {
		c, ok := strings.CutSuffix(serverName, domain)
		return c, ok && names[c]
	}
	site, err := load.StartSiteAPI(load.SiteAPIOptions{BinDir: k8sBinDir(), Addr: siteAPIAddr, Node: clusterOf,
		CA: func(ctx context.Context, serverName string) ([]byte, []byte, error) {
			c, _ := clusterOf(serverName)
			s := &corev1.Secret{}
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: m.ns, Name: secret.Name(c, secret.ClusterCA)}, s); err != nil {
				return nil, nil, err
			}
			return s.Data[secret.TLSCrtDataName], s.Data[secret.TLSKeyDataName], nil
		}})
	if err != nil {
		b.Fatal(err)
	}
	m.site = site
	defer func() { _ = site.Stop() }()

	m.hub, err = load.StartHub(ctx, env.Client, load.HubOptions{Binary: m.hubBin, Dir: filepath.Join(m.dir, "hub"), Config: env.Config, Namespace: m.ns,
		// Each cluster holds a few tunnels (one per Cluster API client
		// connected to it): room for them beyond the default 4096.
		Args: []string{"--enroll-rate", "1000", "--enroll-burst", "1000", "--proxy-max-tunnels", strconv.Itoa(max(4096, 16*m.n))}})
	if err != nil {
		b.Fatal(err)
	}
	defer m.hub.Stop()
	m.capi, err = startCAPI(ctx, m.capiBin, filepath.Join(m.dir, "capi"), *capiConcurrency)
	if err != nil {
		b.Fatal(err)
	}
	defer m.capi.stop()

	class, err := clustertemplate.ClassObjects(m.ns)
	if err != nil {
		b.Fatal(err)
	}
	for _, o := range class {
		if err := env.Client.Create(ctx, o); err != nil {
			b.Fatalf("installing the class: %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}

	siteCfg := rest.CopyConfig(site.Config)
	siteCfg.QPS, siteCfg.Burst = 1000, 2000
	m.agents, err = load.NewAgents(ctx, env.Client, m.hub, load.AgentOptions{N: m.n, Dir: agentStateDir(b, m.dir), NamePrefix: m.ns,
		HostLabels: func(i int) map[string]string { return map[string]string{"site": m.name(i)} },
		Provisioner: func(i int, cfg agent.Config) agent.Provisioner {
			// The simulated kubeadm and kubelet of host i talk to their
			// own cluster's API server.
			cs, err := kubernetes.NewForConfig(load.ScopedConfig(siteCfg, m.name(i)))
			if err != nil {
				panic(err)
			}
			return provision.New(provision.Options{Root: cfg.RootDir, StateDir: cfg.StateDir,
				Runner: load.SimRunner{Sim: &sim.Simulator{Client: cs, Root: cfg.RootDir}}})
		}})
	if err != nil {
		b.Fatal(err)
	}
	defer m.agents.Stop()
	m.logf("starting %d agents", m.n)
	m.agents.Start(0)
	if _, err := m.hub.WaitSessions(ctx, m.n, 10*time.Minute, nil); err != nil {
		b.Fatal(err)
	}

	m.cache, err = cache.New(env.Config, cache.Options{Scheme: env.Scheme, DefaultNamespaces: map[string]cache.Config{m.ns: {}}})
	if err != nil {
		b.Fatal(err)
	}
	cctx, stopCache := context.WithCancel(ctx)
	defer stopCache()
	go func() { _ = m.cache.Start(cctx) }()
	if !m.cache.WaitForCacheSync(cctx) {
		b.Fatal("cache did not sync")
	}
	for _, l := range []client.ObjectList{&clusterv1.ClusterList{}, &clusterv1.MachineList{}, &infrav1.EdgeMachineList{}} {
		if err := m.cache.List(ctx, l); err != nil {
			b.Fatal(err)
		}
	}

	m.rep = results.New(fmt.Sprintf("clusters-%05d", m.n), "clusters", fmt.Sprintf("%s one-host clusters from the ClusterClass edge", commas(m.n)),
		fmt.Sprintf("go test ./bench -run '^$' -bench ManyClusters -benchtime 1x -timeout 120m -args -clusters=%d -clusters-idle=%s -capi-concurrency=%d",
			m.n, *clustersIdle, *capiConcurrency))
	m.rep.Size = m.n
	cpu0 := m.cpu()
	api0, apiErr := load.ReadAPIServerLoad(ctx, env.Config)
	b.ResetTimer()
	start := time.Now()
	written, err := m.createClusters(ctx)
	if err != nil {
		b.Fatal(err)
	}
	m.logf("%d Clusters written in %s", m.n, written.Round(time.Second))
	lines, waitErr := m.waitAvailable(ctx, start)
	took := time.Since(start)
	b.StopTimer()
	cpu1 := m.cpu()
	if waitErr == nil {
		m.logf("all %d Available after %s", m.n, took.Round(time.Second))
		m.rep.Add(results.Figure{Key: "all-available-s", Name: fmt.Sprintf("all %s Clusters Available (Cluster API's `Available` condition True) after the first was written", commas(m.n)),
			Value: took.Seconds(), Unit: "s", Target: "≤ 600 s at 500", Limit: limitAt(m.n, 500, 600), Below: true})
		m.rep.Add(results.Figure{Key: "clusters-per-minute", Name: "throughput", Value: float64(m.n) / took.Minutes(), Unit: "Clusters/min"})
	}
	m.rep.Add(results.Figure{Key: "clusters-written-s", Name: fmt.Sprintf("the last of the %s Clusters (and its two external-etcd Secrets) written", commas(m.n)), Value: written.Seconds(), Unit: "s"})
	t := results.Table{Title: "Where the time goes: when the last Cluster passed each stage (seconds after the first was written)", Header: []string{"stage", "who", "all done at", "done at the end"}}
	series := results.Series{Key: "stages", Title: fmt.Sprintf("%s Clusters through their stages", commas(m.n)), XLabel: "seconds after the first Cluster was written", YLabel: "Clusters"}
	for _, l := range lines {
		done := "—"
		if at, ok := reached(l.line, m.n); ok {
			done = fmt.Sprintf("%.1f s", at)
		}
		final := 0
		if len(l.line.Points) > 0 {
			final = int(l.line.Points[len(l.line.Points)-1][1])
		}
		t.Rows = append(t.Rows, []string{l.line.Name, l.who, done, strconv.Itoa(final)})
		series.Lines = append(series.Lines, l.line)
	}
	m.rep.Tables = append(m.rep.Tables, t, m.cpuTable(fmt.Sprintf("Where the machine's CPU went while the clusters were made (%.0f s on %d cores; /proc/PID/stat)", took.Seconds(), runtime.NumCPU()), cpu0, cpu1, took))
	if api1, err := load.ReadAPIServerLoad(ctx, env.Config); err == nil && apiErr == nil {
		api := api1.Since(api0)
		t, _, _ := requestTableTimed(fmt.Sprintf("Requests the management API server counted while the clusters were made (%.0f s), by verb and resource", took.Seconds()), "per cluster",
			api.Requests, float64(m.n), api.MeanLatency)
		m.rep.Tables = append(m.rep.Tables, t)
	}
	m.rep.Series = append(m.rep.Series, series)
	if waitErr != nil {
		// What was reached is kept: the largest N a machine holds is a
		// result too.
		if _, err := m.rep.Write(*resultsDir); err != nil {
			b.Log(err)
		}
		b.Fatal(waitErr)
	}

	m.atRest(ctx)
	m.rep.Notes = append(m.rep.Notes, fmt.Sprintf("Everything shares the %d cores: the management API server and etcd, fleet-hub (its defaults; edge reach on), "+
		"Cluster API core with topology, CABPK and KCP in one process (bench/capimanager: %d workers per reconciler, 100 QPS, production ClusterCache settings), "+
		"%s agents running the real provisioner on CABPK's cloud-config with the node simulator for kubeadm and the kubelet, and the sites' stand-in "+
		"API server (one kube-apiserver and etcd for every cluster, behind a front that shows each cluster its own certificate, node, pods and kubeadm-config).",
		runtime.NumCPU(), *capiConcurrency, commas(m.n)))
	if _, err := m.rep.Write(*resultsDir); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(took.Seconds(), "s-all-available")
}

// limitAt is limit when the run is of size want, nil (no target) otherwise.
func limitAt(n, want int, limit float64) *float64 {
	if n != want {
		return nil
	}
	return results.Limit(limit)
}

// k8sBinDir is where kube-apiserver and etcd are.
func k8sBinDir() string {
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		return d
	}
	return filepath.Join("..", "bin", "k8s")
}

// createClusters writes every cluster: the two Secrets a user provides
// for an external etcd (its CA, without key, and the API server's client
// pair; Cluster API generates neither), then the Cluster. It returns when
// the last was written.
func (m *manyClusters) createClusters(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	etcdCA, err := pki.NewCA("etcd-ca", 10*365*24*time.Hour)
	if err != nil {
		return 0, err
	}
	etcdClient, err := pki.NewCA("kube-apiserver-etcd-client", 10*365*24*time.Hour)
	if err != nil {
		return 0, err
	}
	work := make(chan int)
	errs := make(chan error, m.n)
	var wg sync.WaitGroup
	// A few writers at once, as a GitOps controller applying a fleet's
	// clusters would.
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				errs <- m.createCluster(ctx, m.name(i), etcdCA, etcdClient)
			}
		}()
	}
	for i := range m.n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		if err != nil {
			all = append(all, err)
		}
	}
	return time.Since(start), errors.Join(all...)
}

func (m *manyClusters) createCluster(ctx context.Context, name string, etcdCA, etcdClient *pki.CA) error {
	for purpose, data := range map[secret.Purpose]map[string][]byte{
		secret.EtcdCA:              {secret.TLSCrtDataName: etcdCA.CertPEM},
		secret.APIServerEtcdClient: {secret.TLSCrtDataName: etcdClient.CertPEM, secret.TLSKeyDataName: etcdClient.KeyPEM},
	} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secret.Name(name, purpose), Namespace: m.ns,
			Labels: map[string]string{clusterv1.ClusterNameLabel: name}}, Type: clusterv1.ClusterSecretType, Data: data}
		if err := env.Client.Create(ctx, s); err != nil {
			return fmt.Errorf("writing Secret %s: %w", s.Name, err)
		}
	}
	// The simulated cluster's etcd is external, as it is in fact (the
	// stand-in API server keeps its data in an etcd of its own, on no
	// node): KubeadmControlPlane then judges the control plane by the
	// static pods' mirror pods and dials no etcd member it cannot have.
	v := func(s string) apiextensionsv1.JSON { return apiextensionsv1.JSON{Raw: []byte(s)} }
	c := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: m.ns},
		Spec: clusterv1.ClusterSpec{Topology: clusterv1.Topology{
			ClassRef:     clusterv1.ClusterClassRef{Name: clustertemplate.ClassName},
			Version:      "v1.36.3",
			ControlPlane: clusterv1.ControlPlaneTopology{Replicas: ptr.To(int32(1))},
			Variables: []clusterv1.ClusterVariable{
				{Name: "site", Value: v(strconv.Quote(name))},
				{Name: "controlPlaneSchedulable", Value: v("true")},
				{Name: "etcdExternal", Value: v(`{"endpoints":["https://127.0.0.1:2379"],"caFile":"/etc/kubernetes/pki/etcd/ca.crt",` +
					`"certFile":"/etc/kubernetes/pki/apiserver-etcd-client.crt","keyFile":"/etc/kubernetes/pki/apiserver-etcd-client.key"}`)},
			},
		}}}
	if err := env.Client.Create(ctx, c); err != nil {
		return fmt.Errorf("writing Cluster %s: %w", name, err)
	}
	return nil
}

// waitAvailable samples the clusters' stages every second until all are
// Available.
func (m *manyClusters) waitAvailable(ctx context.Context, start time.Time) ([]stageLine, error) {
	lines := []stageLine{
		{"the benchmark", results.Line{Name: "Cluster written"}},
		{"Cluster API (topology, KCP)", results.Line{Name: "control-plane Machine created"}},
		{"fleet hub + agent", results.Line{Name: "EdgeMachine provisioned (host claimed, bootstrap run, node registered)"}},
		{"Cluster API (Node seen through edge reach)", results.Line{Name: "Machine Running (nodeRef)"}},
		{"KCP (kubeadm-config seen through edge reach)", results.Line{Name: "Cluster ControlPlaneInitialized"}},
		{"Cluster API", results.Line{Name: "Cluster Available"}},
	}
	last := time.Time{}
	for {
		clusters := &clusterv1.ClusterList{}
		if err := m.cache.List(ctx, clusters, client.InNamespace(m.ns)); err != nil {
			return nil, err
		}
		machines := &clusterv1.MachineList{}
		if err := m.cache.List(ctx, machines, client.InNamespace(m.ns)); err != nil {
			return nil, err
		}
		counts := make([]int, len(lines))
		counts[0] = len(clusters.Items)
		for i := range clusters.Items {
			c := &clusters.Items[i]
			if conditions.IsTrue(c, clusterv1.ClusterControlPlaneInitializedCondition) {
				counts[4]++
			}
			if conditions.IsTrue(c, clusterv1.ClusterAvailableCondition) {
				counts[5]++
			}
		}
		ems := &infrav1.EdgeMachineList{}
		if err := m.cache.List(ctx, ems, client.InNamespace(m.ns)); err != nil {
			return nil, err
		}
		for i := range ems.Items {
			if ptr.Deref(ems.Items[i].Status.Initialization.Provisioned, false) {
				counts[2]++
			}
		}
		for i := range machines.Items {
			mc := &machines.Items[i]
			counts[1]++
			if mc.Status.Phase == string(clusterv1.MachinePhaseRunning) {
				counts[3]++
			}
		}
		el := time.Since(start)
		for i, v := range counts {
			lines[i].line.Points = append(lines[i].line.Points, [2]float64{el.Seconds(), float64(v)})
		}
		if counts[5] >= m.n {
			return lines, nil
		}
		if el > clustersTimeout {
			return lines, fmt.Errorf("%v after %s, want %d Available", counts, el, m.n)
		}
		if time.Since(last) > 10*time.Second {
			m.logf("%s: written %d, machines %d, provisioned %d, running %d, initialized %d, available %d", el.Round(time.Second),
				counts[0], counts[1], counts[2], counts[3], counts[4], counts[5])
			last = time.Now()
		}
		time.Sleep(time.Second)
	}
}

// restSample is what atRest reads at each end of its window.
type restSample struct {
	at      time.Time
	cpu     map[string]time.Duration
	api     *load.APIServerLoad
	hub     map[string]float64 // the hub's metrics
	capi    map[string]float64 // Cluster API's metrics
	site    map[string]float64 // requests the sites' API server answered
	hubRSS  int64
	capiRSS int64
}

func (m *manyClusters) sample(ctx context.Context) restSample {
	s := restSample{at: time.Now(), cpu: m.cpu(), site: m.site.Requests()}
	var err error
	if s.api, err = load.ReadAPIServerLoad(ctx, env.Config); err != nil {
		m.b.Fatal(err)
	}
	if s.hub, err = m.hub.Metrics(ctx); err != nil {
		m.b.Fatal(err)
	}
	if s.capi, err = load.Scrape(ctx, m.capi.metricsURL); err != nil {
		m.b.Fatal(err)
	}
	if s.hubRSS, err = m.hub.RSS(); err != nil {
		m.b.Fatal(err)
	}
	if s.capiRSS, err = load.ProcessRSS(m.capi.pid()); err != nil {
		m.b.Fatal(err)
	}
	return s
}

// atRest measures the Available clusters, left alone, for -clusters-idle:
// memory, CPU, tunnels, and the API writes per cluster split by writer.
func (m *manyClusters) atRest(ctx context.Context) {
	// The last conditions settle within seconds of Available; a minute
	// keeps them out of the window.
	time.Sleep(time.Minute)
	m.logf("at rest: measuring for %s", *clustersIdle)
	s0 := m.sample(ctx)
	time.Sleep(*clustersIdle)
	s1 := m.sample(ctx)
	window := s1.at.Sub(s0.at)
	per5 := func(v float64) float64 { return v / float64(m.n) / (window.Minutes() / 5) }
	mib := func(v int64) float64 { return float64(v) / (1 << 20) }
	pct := func(p string) float64 { return 100 * (s1.cpu[p] - s0.cpu[p]).Seconds() / window.Seconds() }

	m.rep.Add(results.Figure{Key: "hub-rss-mib", Name: fmt.Sprintf("fleet-hub RSS at rest (%s clusters, %s hosts connected)", commas(m.n), commas(m.n)), Value: mib(s1.hubRSS), Unit: "MiB"})
	m.rep.Add(results.Figure{Key: "hub-cpu-pct", Name: fmt.Sprintf("fleet-hub CPU at rest (over %s)", *clustersIdle), Value: pct("fleet-hub"), Unit: "% of one core"})
	m.rep.Add(results.Figure{Key: "capi-rss-mib", Name: "Cluster API RSS at rest (core with topology, CABPK and KCP in one process, their ClusterCaches connected to every cluster)", Value: mib(s1.capiRSS), Unit: "MiB"})
	m.rep.Add(results.Figure{Key: "capi-cpu-pct", Name: "Cluster API CPU at rest", Value: pct("capi-manager"), Unit: "% of one core"})
	m.rep.Add(results.Figure{Key: "apiserver-cpu-pct", Name: "the management cluster's kube-apiserver CPU at rest", Value: pct("kube-apiserver"), Unit: "% of one core"})
	m.rep.Add(results.Figure{Key: "etcd-cpu-pct", Name: "the management cluster's etcd CPU at rest", Value: pct("etcd"), Unit: "% of one core"})
	m.rep.Add(results.Figure{Key: "site-apiserver-cpu-pct", Name: "the sites' stand-in kube-apiserver and etcd CPU at rest (every cluster's API server, not the management cluster's)", Value: pct("site-apiserver"), Unit: "% of one core"})

	open := s1.hub["fleet_reach_tunnels_open"]
	m.rep.Add(results.Figure{Key: "tunnels-open", Name: "edge-reach tunnels open at rest (`fleet_reach_tunnels_open`)", Value: open, Unit: "tunnels"})
	m.rep.Add(results.Figure{Key: "tunnels-per-cluster", Name: "of which per cluster (Cluster API's connections to it: the ClusterCaches of core, CABPK and KCP)", Value: open / float64(m.n)})
	m.rep.Add(results.Figure{Key: "tunnels-opened-at-rest", Name: fmt.Sprintf("tunnels opened during the %s at rest (`fleet_reach_tunnels_total`)", *clustersIdle),
		Value: s1.hub["fleet_reach_tunnels_total"] - s0.hub["fleet_reach_tunnels_total"], Unit: "tunnels"})

	mgmt := hostPort(env.Config.Host)
	fleetW, fleetR := clientRequests(s0.hub, s1.hub, func(string) bool { return true })
	capiW, capiR := clientRequests(s0.capi, s1.capi, func(h string) bool { return h == mgmt })
	siteW, siteR := clientRequests(s0.capi, s1.capi, func(h string) bool { return h != mgmt })
	d := s1.api.Since(s0.api)
	var apiW, fleetObjW float64
	for r, v := range d.Requests {
		if r.Write() {
			apiW += v
			if r.Group == infrav1.GroupVersion.Group {
				fleetObjW += v
			}
		}
	}
	m.rep.Add(results.Figure{Key: "fleet-writes-per-cluster-5min", Name: fmt.Sprintf("fleet's own API writes per cluster per 5 minutes at rest (the hub's client's `rest_client_requests_total`, over %s)", *clustersIdle),
		Value: per5(fleetW), Target: "≤ 1", Limit: results.Limit(1), Below: true})
	m.rep.Add(results.Figure{Key: "capi-writes-per-cluster-5min", Name: "Cluster API's API writes per cluster per 5 minutes at rest (its clients' `rest_client_requests_total` to the management cluster)", Value: per5(capiW)})
	m.rep.Add(results.Figure{Key: "writes-per-cluster-5min", Name: "all writes the management API server counted, per cluster per 5 minutes at rest (its own housekeeping included)", Value: per5(apiW)})
	m.rep.Add(results.Figure{Key: "fleet-object-writes-per-cluster-5min", Name: "of which on fleet's objects (EdgeHosts, EdgeMachines, EdgeClusters), whoever wrote them", Value: per5(fleetObjW)})
	m.rep.Add(results.Figure{Key: "fleet-reads-per-cluster-5min", Name: "fleet's API reads per cluster per 5 minutes at rest", Value: per5(fleetR)})
	m.rep.Add(results.Figure{Key: "capi-reads-per-cluster-5min", Name: "Cluster API's API reads per cluster per 5 minutes at rest (management cluster)", Value: per5(capiR)})
	m.rep.Add(results.Figure{Key: "capi-site-requests-per-cluster-5min", Name: "Cluster API's requests to each workload cluster per 5 minutes at rest, through its tunnel (reads; writes)",
		Value: per5(siteR), Unit: fmt.Sprintf("reads; %.2f writes", per5(siteW))})
	var siteAll float64
	for _, v := range s1.site {
		siteAll += v
	}
	for _, v := range s0.site {
		siteAll -= v
	}
	m.rep.Add(results.Figure{Key: "site-requests-per-cluster-5min", Name: "requests each site's API server answered per 5 minutes at rest (the front's count, watches included)", Value: per5(siteAll)})
	t, _, _ := requestTable(fmt.Sprintf("Requests the management API server counted at rest (%s), by verb and resource", *clustersIdle), "per cluster per 5 min", d.Requests, float64(m.n)*window.Minutes()/5)
	m.rep.Tables = append(m.rep.Tables, t, m.cpuTable(fmt.Sprintf("Where the machine's CPU went at rest (%s on %d cores)", *clustersIdle, runtime.NumCPU()), s0.cpu, s1.cpu, window))
	m.logf("at rest: fleet %.3f writes per cluster per 5 min, Cluster API %.3f, API server %.3f; %v tunnels; hub %.0f MiB, Cluster API %.0f MiB",
		per5(fleetW), per5(capiW), per5(apiW), open, mib(s1.hubRSS), mib(s1.capiRSS))
}

// clientRequests is the change in a process's client-go
// `rest_client_requests_total` between two scrapes, writes and reads
// apart, counting only the API servers host accepts.
func clientRequests(before, after map[string]float64, host func(string) bool) (writes, reads float64) {
	for k, v := range after {
		if !strings.HasPrefix(k, "rest_client_requests_total{") {
			continue
		}
		l := promLabels(k)
		if !host(l["host"]) {
			continue
		}
		d := v - before[k]
		switch l["method"] {
		case "POST", "PUT", "PATCH", "DELETE":
			writes += d
		default:
			reads += d
		}
	}
	return writes, reads
}

// hostPort is the host:port of an API server's URL.
func hostPort(server string) string {
	if u, err := url.Parse(server); err == nil && u.Host != "" {
		return u.Host
	}
	return server
}

// promLabels are the labels of a series name{a="x",b="y"}.
func promLabels(series string) map[string]string {
	out := map[string]string{}
	i, j := strings.IndexByte(series, '{'), strings.LastIndexByte(series, '}')
	if i < 0 || j < i {
		return out
	}
	for _, kv := range strings.Split(series[i+1:j], ",") {
		k, v, ok := strings.Cut(kv, "=")
		if ok {
			out[k] = strings.Trim(v, `"`)
		}
	}
	return out
}

// cpu is the CPU time used so far by each process of the benchmark: the
// driver (agents, node simulator, the sites' front), fleet-hub, Cluster
// API, the management API server and etcd, and the sites' stand-in.
func (m *manyClusters) cpu() map[string]time.Duration {
	out := map[string]time.Duration{}
	if d, err := load.ProcessCPU(os.Getpid()); err == nil {
		out["driver"] = d
	}
	if d, err := m.hub.CPU(); err == nil {
		out["fleet-hub"] = d
	}
	if d, err := load.ProcessCPU(m.capi.pid()); err == nil {
		out["capi-manager"] = d
	}
	// Other API servers may run on the machine: each of the four is told
	// by its port.
	port := func(host string) string { _, p, _ := net.SplitHostPort(hostPort(host)); return p }
	owners := []struct{ program, flag, name string }{
		{"kube-apiserver", "--secure-port=" + port(env.Config.Host), "kube-apiserver"},
		{"etcd", env.EtcdURL(), "etcd"},
		{"kube-apiserver", "--secure-port=" + port(m.site.Config.Host), "site-apiserver"},
		{"etcd", m.site.EtcdURL(), "site-apiserver"},
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		for _, o := range owners {
			if filepath.Base(exe) != o.program || o.flag == "" || !strings.Contains(string(cmdline), o.flag+"\x00") {
				continue
			}
			if d, err := load.ProcessCPU(pid); err == nil {
				out[o.name] += d
			}
			break
		}
	}
	return out
}

// cpuTable shows each process's CPU between two samples.
func (m *manyClusters) cpuTable(title string, before, after map[string]time.Duration, took time.Duration) results.Table {
	t := results.Table{Title: title, Header: []string{"process", "CPU seconds", "share of the machine"}}
	machine := took.Seconds() * float64(runtime.NumCPU())
	names := map[string]string{
		"driver":         fmt.Sprintf("benchmark process (%s agents, the node simulator, the sites' front)", commas(m.n)),
		"fleet-hub":      "fleet-hub",
		"capi-manager":   "Cluster API (core with topology, CABPK, KCP)",
		"kube-apiserver": "management kube-apiserver",
		"etcd":           "management etcd",
		"site-apiserver": "the sites' stand-in kube-apiserver and etcd",
	}
	keys := make([]string, 0, len(names))
	for k := range names {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return after[keys[i]]-before[keys[i]] > after[keys[j]]-before[keys[j]] })
	var total float64
	for _, k := range keys {
		d := (after[k] - before[k]).Seconds()
		total += d
		t.Rows = append(t.Rows, []string{names[k], fmt.Sprintf("%.1f", d), fmt.Sprintf("%.0f %%", 100*d/machine)})
	}
	t.Rows = append(t.Rows, []string{"all", fmt.Sprintf("%.1f", total), fmt.Sprintf("%.0f %%", 100*total/machine)})
	return t
}

// capiProcess is bench/capimanager running.
type capiProcess struct {
	cmd        *exec.Cmd
	metricsURL string
	log        *os.File
}

func (p *capiProcess) pid() int { return p.cmd.Process.Pid }

// startCAPI runs Cluster API's reconcilers against the benchmark's API
// server and waits until their webhooks are installed.
func startCAPI(ctx context.Context, bin, dir string, concurrency int) (*capiProcess, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "capi.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, "--kubeconfig", kubeconfig, "--concurrency", strconv.Itoa(concurrency))
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting capimanager: %w", err)
	}
	p := &capiProcess{cmd: cmd, log: logf}
	ready := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			if u, ok := strings.CutPrefix(s.Text(), "ready "); ok {
				ready <- u
			}
		}
		close(ready)
	}()
	select {
	case u, ok := <-ready:
		if !ok {
			p.stop()
			tail, _ := os.ReadFile(logf.Name())
			return nil, fmt.Errorf("capimanager exited before it was ready: %s", tail[max(0, len(tail)-2000):])
		}
		p.metricsURL = u
		return p, nil
	case <-time.After(3 * time.Minute):
		p.stop()
		return nil, fmt.Errorf("capimanager not ready after 3 minutes (log %s)", logf.Name())
	}
}

func (p *capiProcess) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
	_ = p.log.Close()
}
