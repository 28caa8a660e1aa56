package bench

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/bench/load"
	"github.com/edgefleet/fleet/bench/results"
	"github.com/edgefleet/fleet/pkg/agent"
	"github.com/edgefleet/fleet/pkg/agent/provision"
	"github.com/edgefleet/fleet/pkg/clustertemplate"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/hub/embedded/clusterapi"
	"github.com/edgefleet/fleet/test/nodesim/sim"
)

var (
	machineCount    = flag.Int("machines", 500, "Worker machines BenchmarkProvisioning scales its MachineDeployment to.")
	capiConcurrency = flag.Int("capi-concurrency", 50, "Workers per Cluster API reconciler in BenchmarkProvisioning (capi-controller-manager's defaults: 100 machine, 50 machineset/machinedeployment; CABPK 100).")
)

// stackPeriod is how often BenchmarkProvisioning samples the MachineSet
// worker's stack.
const stackPeriod = time.Second

// Cluster API's managers can start once per process (their informer
// names are global).
var capiOnce sync.Once

// BenchmarkProvisioning scales a MachineDeployment from 0 to -machines
// with the real Cluster API core and kubeadm bootstrap reconcilers (in
// this process), a real fleet-hub process and -machines+1 real agents (in
// this process) whose provisioner runs the real CABPK cloud-config and the
// node simulator for kubeadm. The workload cluster is the same API server
// (a kubeconfig Secret pointing at it). It records, every second, how many
// machines have passed each stage, and writes a plot.
//
//	go test ./bench -run '^$' -bench Provisioning -benchtime 1x -timeout 60m -args -machines=500
func BenchmarkProvisioning(b *testing.B) {
	if _, err := load.RaiseFileLimit(); err != nil {
		b.Fatal(err)
	}
	ctrl.SetLogger(logr.Discard())
	startClusterAPI(b)
	bin := buildHub(b)
	for range b.N {
		provisioning(b, bin, *machineCount)
	}
}

// startClusterAPI runs the real Cluster API core and kubeadm bootstrap
// reconcilers in this process, once.
func startClusterAPI(b *testing.B) {
	b.Helper()
	ctx := context.Background()
	// Cluster API as its own binaries talk to the API server (the in-memory
	// provider's scale tests use the same 100/200).
	capiCfg := rest.CopyConfig(env.Config)
	capiCfg.QPS, capiCfg.Burst = 100, 200
	capiOnce.Do(func() {
		// As a management cluster runs them for fleet (docs/INSTALL.md):
		// the Runtime SDK and in-place updates, behind gates.
		if err := clusterapi.EnableFeatureGates(); err != nil {
			b.Fatal(err)
		}
		o := clusterapi.Options{Name: "capi-bench", Concurrency: *capiConcurrency, ConnectionRetryInterval: 2 * time.Second,
			GracefulShutdownTimeout: 5 * time.Second, SkipNameValidation: true, Logger: logr.Discard()}
		core, err := clusterapi.NewCoreManager(ctx, capiCfg, env.Scheme, o)
		if err != nil {
			b.Fatal(err)
		}
		o.Name = "cabpk-bench"
		cabpk, err := clusterapi.NewKubeadmBootstrapManager(ctx, capiCfg, env.Scheme, o)
		if err != nil {
			b.Fatal(err)
		}
		go func() { _ = core.Start(ctx) }()
		go func() { _ = cabpk.Start(ctx) }()
	})
}

// agentStateDir is where the driver's agents keep their state: on a
// memory file system when the machine has one. Each agent syncs its state
// files to disk as it would on its own machine; ten thousand of them on
// this one's disk would queue behind and in front of etcd's log syncs,
// and the figures would measure the disk, not the hub.
func agentStateDir(b *testing.B, dir string) string {
	b.Helper()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		d, err := os.MkdirTemp("/dev/shm", "fleet-bench-agents-")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = os.RemoveAll(d) })
		return d
	}
	return filepath.Join(dir, "agents")
}

// buildHub builds fleet-hub into a temporary directory.
func buildHub(b *testing.B) string { return goBuild(b, "./cmd/fleet-hub", "fleet-hub") }

// goBuild builds the command pkg (relative to the module's root) into a
// temporary directory as name, the process name the CPU tables show.
func goBuild(b *testing.B, pkg, name string) string {
	b.Helper()
	bin := filepath.Join(b.TempDir(), name)
	build := exec.Command("go", "build", "-o", bin, pkg)
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("building %s: %v\n%s", pkg, err, out)
	}
	return bin
}

func provisioning(b *testing.B, bin string, n int) {
	ctx := context.Background()
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "[%s] machines=%d: %s\n", time.Now().Format("15:04:05"), n, fmt.Sprintf(format, args...))
	}
	dir := b.TempDir()
	ns := fmt.Sprintf("prov-%d", time.Now().UnixNano()%100000)
	hub, err := load.StartHub(ctx, env.Client, load.HubOptions{Binary: bin, Dir: filepath.Join(dir, "hub"), Config: env.Config, Namespace: ns,
		Args: []string{"--enroll-rate", "1000", "--enroll-burst", "1000", "--proxy-bind-address", "0"}})
	if err != nil {
		b.Fatal(err)
	}
	defer hub.Stop()

	workload := rest.CopyConfig(env.Config)
	workload.QPS, workload.Burst = 1000, 2000
	cs, err := kubernetes.NewForConfig(workload)
	if err != nil {
		b.Fatal(err)
	}
	role := func(i int) string {
		if i == 0 {
			return "control-plane"
		}
		return "worker"
	}
	agents, err := load.NewAgents(ctx, env.Client, hub, load.AgentOptions{N: n + 1, Dir: agentStateDir(b, dir), NamePrefix: ns,
		HostLabels: func(i int) map[string]string { return map[string]string{"fleet.bench/role": role(i)} },
		Provisioner: func(_ int, cfg agent.Config) agent.Provisioner {
			return provision.New(provision.Options{Root: cfg.RootDir, StateDir: cfg.StateDir,
				Runner: load.SimRunner{Sim: &sim.Simulator{Client: cs, Root: cfg.RootDir}}})
		}})
	if err != nil {
		b.Fatal(err)
	}
	defer agents.Stop()
	logf("starting %d agents", n+1)
	agents.Start(0)
	if _, err := hub.WaitSessions(ctx, n+1, 10*time.Minute, nil); err != nil {
		b.Fatal(err)
	}

	// The cluster: one control-plane Machine (kubeadm init on the
	// simulator), and a MachineDeployment at 0.
	objs := clustertemplate.Objects(clustertemplate.Spec{Name: "prov", Namespace: ns, KubernetesVersion: "v1.36.3", ControlPlane: "machines",
		ControlPlaneMachines: 1, WorkerMachines: 0,
		ControlPlaneSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet.bench/role": "control-plane"}},
		WorkerSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"fleet.bench/role": "worker"}},
		Endpoint:             infrav1.APIEndpoint{Host: "prov." + ns + ".fleet.internal", Port: 6443}})
	for _, o := range objs {
		if c, ok := o.(*clusterv1.Cluster); ok {
			c.Annotations = map[string]string{infrav1.EdgeReachAnnotation: "disabled"}
		}
		if err := env.Client.Create(ctx, o); err != nil {
			b.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
		if c, ok := o.(*clusterv1.Cluster); ok {
			// The workload cluster is this API server: Cluster API reads
			// Nodes through this kubeconfig.
			if err := env.CreateKubeconfigSecret(ctx, c); err != nil {
				b.Fatal(err)
			}
		}
	}

	// Count stages from an informer cache: polling lists of thousands of
	// objects every second would load the API server being measured.
	cc, err := cache.New(env.Config, cache.Options{Scheme: env.Scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		b.Fatal(err)
	}
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = cc.Start(cctx) }()
	if !cc.WaitForCacheSync(cctx) {
		b.Fatal("cache did not sync")
	}
	// Informers for the kinds read below.
	for _, l := range []client.ObjectList{&clusterv1.MachineList{}, &infrav1.EdgeMachineList{}} {
		if err := cc.List(ctx, l); err != nil {
			b.Fatal(err)
		}
	}
	logf("waiting for the control plane")
	if _, err := waitStages(ctx, cc, ns, 1, 10*time.Minute, nil); err != nil {
		b.Fatalf("control plane: %v", err)
	}

	logf("scaling the MachineDeployment 0 → %d", n)
	fsyncs0, fsyncSecs0, fsyncErr := load.EtcdFsync(ctx, env.EtcdURL())
	// Where the time goes, with evidence: every process's CPU, this
	// process's CPU profile (Cluster API, CABPK, the agents and the node
	// simulator all run in it) and the API server's requests and their
	// latencies, over the scale.
	profDir := filepath.Join(dir, "profiles")
	if *profileDir != "" {
		profDir = filepath.Join(*profileDir, fmt.Sprintf("provisioning-%05d", n))
	}
	cpu0 := load.CPUByProgram(cpuPrograms...)
	api0, apiErr := load.ReadAPIServerLoad(ctx, env.Config)
	stopProfile, profErr := profileDriver(filepath.Join(profDir, "driver-cpu.pb.gz"))
	if profErr != nil {
		logf("CPU profile: %v", profErr)
	}
	// Deferred too, so a run that fails early leaves no profile running
	// for the next one (both stops are safe to call twice).
	defer stopProfile()
	msWaits := &load.StackSampler{Goroutine: "machineset.(*Reconciler).createMachines", Classes: machineSetWaits}
	sctx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	go msWaits.Run(sctx, stackPeriod)
	b.ResetTimer()
	start := time.Now()
	md := &clusterv1.MachineDeployment{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "prov-md-0"}, md); err != nil {
		b.Fatal(err)
	}
	patch := client.MergeFrom(md.DeepCopy())
	md.Spec.Replicas = ptr.To(int32(n))
	if err := env.Client.Patch(ctx, md, patch); err != nil {
		b.Fatal(err)
	}
	lines, err := waitStages(ctx, cc, ns, n+1, 30*time.Minute, func(s stageCounts, el time.Duration) {
		logf("%s: %+v", el.Round(time.Second), s)
	})
	took := time.Since(start)
	b.StopTimer()
	stopSampling()
	stopProfile()
	cpu1 := load.CPUByProgram(cpuPrograms...)
	if err != nil {
		b.Fatal(err)
	}
	var api *load.APIServerLoad
	if api1, err := load.ReadAPIServerLoad(ctx, env.Config); err == nil && apiErr == nil {
		api = api1.Since(api0)
	}

	name := fmt.Sprintf("provisioning-%05d", n)
	if *etcdNoFsync {
		name += "-nofsync"
	}
	title := fmt.Sprintf("Provisioning: a MachineDeployment scaled 0 → %s", commas(n))
	if *etcdNoFsync {
		title += " (etcd without fsync)"
	}
	rep := results.New(name, "provisioning", title,
		fmt.Sprintf("go test ./bench -run '^$' -bench Provisioning -benchtime 1x -timeout 60m -args -machines=%d -capi-concurrency=%d%s", n, *capiConcurrency,
			map[bool]string{true: " -etcd-no-fsync", false: ""}[*etcdNoFsync]))
	rep.Size = n
	rep.Add(results.Figure{Key: "all-running-s", Name: fmt.Sprintf("all %s worker Machines Running (nodeRef set) after the scale", commas(n)), Value: took.Seconds(), Unit: "s",
		Target: "≤ 300 s", Limit: results.Limit(300), Below: true})
	rep.Add(results.Figure{Key: "machines-per-minute", Name: "throughput", Value: float64(n) / took.Minutes(), Unit: "Machines/min"})
	if fsyncs1, fsyncSecs1, err := load.EtcdFsync(ctx, env.EtcdURL()); err == nil && fsyncErr == nil && fsyncs1 > fsyncs0 {
		rep.Add(results.Figure{Key: "etcd-fsync-ms", Name: fmt.Sprintf("etcd WAL fsync, mean over the %d during the scale (this machine's disk%s)", int(fsyncs1-fsyncs0), map[bool]string{true: "; --unsafe-no-fsync", false: ""}[*etcdNoFsync]),
			Value: 1000 * (fsyncSecs1 - fsyncSecs0) / (fsyncs1 - fsyncs0), Unit: "ms"})
	}
	t := results.Table{Title: "Where the time goes: when the last Machine passed each stage (seconds after the scale)", Header: []string{"stage", "who", "all done at"}}
	for _, l := range lines {
		done := "—"
		if at, ok := reached(l.line, n+1); ok {
			done = fmt.Sprintf("%.1f s", at)
		}
		t.Rows = append(t.Rows, []string{l.line.Name, l.who, done})
	}
	rep.Tables = append(rep.Tables, t)
	if created, ok := reached(lines[0].line, n+1); ok && created > 0 {
		interval := created / float64(n)
		rep.Add(results.Figure{Key: "machineset-create-interval-ms", Name: "Cluster API's MachineSet controller: time per Machine created (when the last was created ÷ " + commas(n) + "; its worker creates them one after another)",
			Value: 1000 * interval, Unit: "ms"})
		if api != nil {
			path, parts := creationPath(api)
			rep.Add(results.Figure{Key: "machineset-create-writes-ms", Name: "the API server's mean time for the five writes that create one Machine, summed (each a mean over every request of that verb and resource during the scale, whoever made it: " + parts + ")",
				Value: float64(path) / float64(time.Millisecond), Unit: "ms"})
		}
	}
	rep.Tables = append(rep.Tables, waitTable(fmt.Sprintf("Where Cluster API's MachineSet worker spent the scale: its goroutine's stack, sampled every %s (wall clock)", stackPeriod), msWaits, stackPeriod))
	rep.Tables = append(rep.Tables, cpuTable(fmt.Sprintf("Where the machine's CPU went during the scale (%.0f s on %d cores; /proc/PID/stat)", took.Seconds(), runtime.NumCPU()),
		"benchmark process (Cluster API core, CABPK, "+commas(n+1)+" agents, the node simulator)", cpu0, cpu1, took))
	if profErr == nil {
		rep.Tables = append(rep.Tables, componentTable(filepath.Join(profDir, "driver-cpu.pb.gz"), took))
	}
	if api != nil {
		t, _, _ := requestTableTimed(fmt.Sprintf("API requests during the scale (%.0f s), by verb and resource", took.Seconds()), "per Machine",
			api.Requests, float64(n), api.MeanLatency)
		rep.Tables = append(rep.Tables, t)
	}
	series := results.Series{Key: "stages", Title: fmt.Sprintf("%s Machines through their stages after the scale (the control plane's Machine included)", commas(n)),
		XLabel: "seconds after the scale", YLabel: "Machines"}
	for _, l := range lines {
		series.Lines = append(series.Lines, l.line)
	}
	rep.Series = append(rep.Series, series)
	rep.Notes = append(rep.Notes, fmt.Sprintf("Everything shares the 2 cores: the API server and etcd (also the workload cluster's), Cluster API core and CABPK "+
		"(in the benchmark process, %d workers per reconciler, 100 QPS), fleet-hub (its defaults), %s agents running the real provisioner on CABPK's "+
		"cloud-config with the node simulator for kubeadm.", *capiConcurrency, commas(n+1)))
	if _, err := rep.Write(*resultsDir); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(took.Seconds(), "s-all-running")
	logf("all running in %s", took.Round(time.Second))
}

// reached is when l first counted want.
func reached(l results.Line, want int) (float64, bool) {
	for _, p := range l.Points {
		if int(p[1]) >= want {
			return p[0], true
		}
	}
	return 0, false
}

// creationPath is the API server's mean time, summed, for the writes the
// MachineSet controller makes in turn to create one Machine: apply the
// KubeadmConfig and patch away its label and annotation ownership, the
// same for the EdgeMachine, then apply the Machine. parts names them.
func creationPath(api *load.APIServerLoad) (time.Duration, string) {
	steps := []load.Request{
		{Verb: "APPLY", Resource: "kubeadmconfigs"}, {Verb: "PATCH", Resource: "kubeadmconfigs"},
		{Verb: "APPLY", Resource: "edgemachines"}, {Verb: "PATCH", Resource: "edgemachines"},
		{Verb: "APPLY", Resource: "machines"},
	}
	var total time.Duration
	var parts []string
	for _, st := range steps {
		seen := false
		for r := range api.Requests {
			if r.Verb == st.Verb && r.Resource == st.Resource && r.Subresource == "" {
				d := api.MeanLatency(r)
				total += d
				seen = true
				parts = append(parts, fmt.Sprintf("%s %s %.0f ms", st.Verb, st.Resource, float64(d)/float64(time.Millisecond)))
			}
		}
		if !seen {
			parts = append(parts, fmt.Sprintf("no %s %s seen", st.Verb, st.Resource))
		}
	}
	return total, strings.Join(parts, ", ")
}

// machineSetWaits sorts what Cluster API's MachineSet worker is doing
// while it creates Machines, one after another.
var machineSetWaits = []load.WaitClass{
	{Name: "waiting for its client's rate limiter (client-side throttling)", Frames: []string{"rest.(*Request).tryThrottle", "util/flowcontrol."}},
	{Name: "inside an HTTP request to the API server (sending it, waiting, reading the answer, or runnable on busy cores)", Frames: []string{"net/http.", "golang.org/x/net/http2."}},
	{Name: "waiting to record an event", Frames: []string{"tools/record."}},
}

// waitTable is a StackSampler's counts as a table.
func waitTable(title string, s *load.StackSampler, period time.Duration) results.Table {
	t := results.Table{Title: title, Header: []string{"what the goroutine was doing", "samples", "share", "≈ seconds"}}
	counts, samples, absent := s.Result()
	names := make([]string, 0, len(counts))
	for k := range counts {
		names = append(names, k)
	}
	slices.SortFunc(names, func(a, b string) int { return counts[b] - counts[a] })
	row := func(name string, c int) {
		t.Rows = append(t.Rows, []string{name, strconv.Itoa(c), fmt.Sprintf("%.0f %%", 100*float64(c)/float64(max(samples, 1))),
			fmt.Sprintf("%.0f", float64(c)*period.Seconds())})
	}
	for _, k := range names {
		row(k, counts[k])
	}
	row("not creating Machines (no such goroutine)", absent)
	return t
}

// provisioningComponents are what the benchmark process runs during the
// scale, in the order samples are charged to them: a sample counts for
// the first whose code is on its stack (the node simulator runs under an
// agent's provisioner, so it comes before the agents; the measuring runs
// in bench/load, so it comes before them too).
var provisioningComponents = []load.Component{
	{Name: "the benchmark measuring (stack sampler, stage counter)", Prefixes: []string{"github.com/edgefleet/fleet/bench/load.(*StackSampler)", "runtime/pprof.", "github.com/edgefleet/fleet/bench.waitStages"}},
	{Name: "node simulator (kubeadm and kubelet stand-in)", Prefixes: []string{"github.com/edgefleet/fleet/test/nodesim"}},
	{Name: "agents (sessions, TLS, provisioner)", Prefixes: []string{"github.com/edgefleet/fleet/pkg/", "github.com/edgefleet/fleet/bench/load", "github.com/hashicorp/yamux", "github.com/gorilla/websocket"}},
	{Name: "Cluster API MachineSet", Prefixes: []string{"sigs.k8s.io/cluster-api/core/reconcilers/machineset."}},
	{Name: "Cluster API MachineDeployment", Prefixes: []string{"sigs.k8s.io/cluster-api/core/reconcilers/machinedeployment."}},
	{Name: "Cluster API Machine", Prefixes: []string{"sigs.k8s.io/cluster-api/core/reconcilers/machine."}},
	{Name: "CABPK (KubeadmConfig)", Prefixes: []string{"sigs.k8s.io/cluster-api/bootstrap/kubeadm"}},
	{Name: "Cluster API, other (Cluster, ClusterCache, KCP, …)", Prefixes: []string{"sigs.k8s.io/cluster-api/"}},
	{Name: "informers: decoding watch events into caches (every manager's)", Prefixes: []string{"k8s.io/client-go/tools/cache.", "k8s.io/client-go/tools/watch.", "k8s.io/apimachinery/pkg/watch."}},
	{Name: "Go garbage collector", Prefixes: []string{"runtime.gcBgMarkWorker"}},
}

// componentTable is the benchmark process's CPU profile charged to
// provisioningComponents.
func componentTable(profile string, took time.Duration) results.Table {
	t := results.Table{Title: "The benchmark process's CPU during the scale by component (its CPU profile; a sample counts for the first component, in this table's order, with a function on its stack)",
		Header: []string{"component", "CPU seconds", "share of the process", "share of the machine"}}
	by, total, err := load.CPUByComponent(profile, provisioningComponents)
	if err != nil || total == 0 {
		t.Rows = append(t.Rows, []string{fmt.Sprintf("(no profile: %v)", err), "", "", ""})
		return t
	}
	machine := took.Seconds() * float64(runtime.NumCPU())
	for _, c := range by {
		t.Rows = append(t.Rows, []string{c.Name, fmt.Sprintf("%.1f", c.CPU.Seconds()),
			fmt.Sprintf("%.0f %%", 100*c.CPU.Seconds()/total.Seconds()), fmt.Sprintf("%.0f %%", 100*c.CPU.Seconds()/machine)})
	}
	return t
}

type stageCounts struct {
	Created, BootstrapReady, Claimed, Provisioned, Running int
}

type stageLine struct {
	who  string
	line results.Line
}

// waitStages samples the stages every second until want Machines are
// Running.
func waitStages(ctx context.Context, c client.Reader, ns string, want int, timeout time.Duration, progress func(stageCounts, time.Duration)) ([]stageLine, error) {
	lines := []stageLine{
		{"Cluster API (MachineSet)", results.Line{Name: "Machine created"}},
		{"CABPK", results.Line{Name: "bootstrap data ready"}},
		{"fleet hub", results.Line{Name: "host claimed"}},
		{"agent + hub", results.Line{Name: "bootstrap run, infrastructure provisioned"}},
		{"Cluster API (Node seen)", results.Line{Name: "Running"}},
	}
	start := time.Now()
	last := time.Time{}
	for {
		var s stageCounts
		machines := &clusterv1.MachineList{}
		if err := c.List(ctx, machines, client.InNamespace(ns)); err != nil {
			return nil, err
		}
		for _, m := range machines.Items {
			s.Created++
			if ptr.Deref(m.Status.Initialization.BootstrapDataSecretCreated, false) {
				s.BootstrapReady++
			}
			if ptr.Deref(m.Status.Initialization.InfrastructureProvisioned, false) {
				s.Provisioned++
			}
			if m.Status.Phase == string(clusterv1.MachinePhaseRunning) {
				s.Running++
			}
		}
		ems := &infrav1.EdgeMachineList{}
		if err := c.List(ctx, ems, client.InNamespace(ns)); err != nil {
			return nil, err
		}
		for _, em := range ems.Items {
			if em.Status.HostRef != "" {
				s.Claimed++
			}
		}
		el := time.Since(start)
		for i, v := range []int{s.Created, s.BootstrapReady, s.Claimed, s.Provisioned, s.Running} {
			lines[i].line.Points = append(lines[i].line.Points, [2]float64{el.Seconds(), float64(v)})
		}
		if s.Running >= want {
			return lines, nil
		}
		if el > timeout {
			return lines, fmt.Errorf("%+v after %s, want %d Running", s, el, want)
		}
		if progress != nil && time.Since(last) > 10*time.Second {
			progress(s, el)
			last = time.Now()
		}
		time.Sleep(time.Second)
	}
}
