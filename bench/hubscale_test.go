package bench

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/bench/load"
	"github.com/edgefleet/fleet/bench/results"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
)

var (
	agentCounts    = flag.String("agents", "1000", "Comma-separated agent counts for BenchmarkHubScale (e.g. 1000,2000,5000,10000).")
	idleWindow     = flag.Duration("idle", 10*time.Minute, "How long BenchmarkHubScale counts the idle fleet's API requests.")
	startRate      = flag.Float64("start-rate", 25, "New agents BenchmarkHubScale starts per second for their first enrollment.")
	latencyRate    = flag.Float64("latency-rate", 5, "Assignments per second BenchmarkHubScale makes while timing them.")
	latencySamples = flag.Int("latency-samples", 300, "Host assignments BenchmarkHubScale times from API write to agent (at most one per agent).")
	resultsDir     = flag.String("results", "../docs/perf", "Where the scale benchmarks write their JSON results (bench/report makes docs/PERFORMANCE.md and plots from them).")
	hubArgs        = flag.String("hub-args", "", "Extra fleet-hub flags for BenchmarkHubScale, space-separated (e.g. \"--kube-api-qps 200\").")
	hubEnv         = flag.String("hub-env", "", "Extra environment for the fleet-hub process of BenchmarkHubScale, space-separated (e.g. \"GOGC=50\").")
	coldStarts     = flag.Int("cold-starts", 1, "How many times BenchmarkHubScale makes the cold start (each after every host reads disconnected again), to show its spread; the slowest is a figure of its own.")
	profileDir     = flag.String("profiles", "", "Where BenchmarkHubScale keeps the hub's heap and goroutine profiles (default: a temporary directory).")
)

// BenchmarkHubScale measures a real fleet-hub process (against the real
// API server) under N real agent sessions over TLS websockets from this
// process, in phases:
//
//  1. memory per idle agent (RSS and Go heap above the empty hub), with a
//     breakdown from the hub's heap and goroutine profiles;
//  2. API server load of the idle fleet over -idle, by verb, from the API
//     server's own counters;
//  3. desired-state latency: from the API write that assigns a host to its
//     agent holding the new desired state;
//  4. cold start: every agent, holding its identity, connects at once to
//     hosts the hub has recorded disconnected (a fleet back from a
//     site-wide outage);
//  5. reconnect storm: the hub is killed (SIGKILL) and restarted under N
//     connected agents; all must reconnect and be resynced.
//
// One run per N (-benchtime 1x); results go to -results as JSON.
//
//	go test ./bench -run '^$' -bench HubScale -benchtime 1x -timeout 120m -args -agents=10000
func BenchmarkHubScale(b *testing.B) {
	if _, err := load.RaiseFileLimit(); err != nil {
		b.Fatal(err)
	}
	if os.Getenv("GOGC") == "" {
		// The driver stands in for the fleet's machines, and shares the
		// cores with the hub: less of its time in garbage collection.
		// The hub keeps its own setting (--gc-percent; load.StartHub).
		debug.SetGCPercent(200)
	}
	dir := b.TempDir()
	bin := buildHub(b)
	for _, s := range strings.Split(*agentCounts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			b.Fatalf("-agents: %q is not a positive number", s)
		}
		b.Run(fmt.Sprintf("agents=%d", n), func(b *testing.B) {
			for range b.N {
				s := &hubScale{b: b, bin: bin, dir: filepath.Join(dir, fmt.Sprintf("n%d", n)), n: n}
				s.run()
			}
		})
	}
}

type hubScale struct {
	b   *testing.B
	bin string
	dir string
	n   int

	hub    *load.Hub
	agents *load.Agents
	rep    *results.Report
	// steadyRSS is the hub's RSS with every agent connected and idle.
	steadyRSS int64
	// empty is the hub's memory with no agent.
	empty hubMemory
	// emptyWatches are the watches open on the API server before any
	// agent connected.
	emptyWatches float64
	// coldStarts are the cold starts made, in order.
	coldStarts []coldStartRun

	// Desired-state latency samples: agent index → what it waits for.
	waitMu  sync.Mutex
	waiting map[int]*latencySample
}

type latencySample struct {
	claim   types.UID
	written time.Time
	acked   time.Time    // the API server answered the write
	watched atomic.Int64 // UnixNano when a watch of this process saw it
	got     atomic.Int64 // UnixNano when the agent held it
}

// fatalf fails the run with the tail of the hub's log.
func (s *hubScale) fatalf(format string, args ...any) {
	s.b.Helper()
	log, _ := os.ReadFile(filepath.Join(s.dir, "hub", "hub.log"))
	if len(log) > 8<<10 {
		log = log[len(log)-8<<10:]
	}
	s.b.Fatalf("%s\nfleet-hub log (tail):\n%s", fmt.Sprintf(format, args...), log)
}

func (s *hubScale) logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%s] agents=%d: %s\n", time.Now().Format("15:04:05"), s.n, fmt.Sprintf(format, args...))
}

func (s *hubScale) run() {
	b, ctx := s.b, context.Background()
	timeout := "120m"
	if f := flag.Lookup("test.timeout"); f != nil {
		timeout = f.Value.String()
	}
	cmd := fmt.Sprintf("go test ./bench -run '^$' -bench HubScale -benchtime 1x -timeout %s -args -agents=%d -idle=%s", timeout, s.n, *idleWindow)
	// The other flags given, and the driver's GOGC: the command must
	// repeat the run.
	flag.Visit(func(f *flag.Flag) {
		if f.Name != "agents" && f.Name != "idle" && f.Name != "profiles" && f.Name != "results" && !strings.HasPrefix(f.Name, "test.") {
			cmd += fmt.Sprintf(" -%s=%s", f.Name, f.Value)
		}
	})
	if gc := os.Getenv("GOGC"); gc != "" {
		cmd = "GOGC=" + gc + " " + cmd
	}
	s.rep = results.New(fmt.Sprintf("hub-%05d", s.n), "hub", fmt.Sprintf("The hub under %s agents", commas(s.n)), cmd)
	s.rep.Size = s.n
	ns := fmt.Sprintf("load-%d-%d", s.n, time.Now().UnixNano()%100000)
	var err error
	s.hub, err = load.StartHub(ctx, env.Client, load.HubOptions{Binary: s.bin, Dir: filepath.Join(s.dir, "hub"), Config: env.Config, Namespace: ns,
		Args: append([]string{"--enroll-rate", "1000", "--enroll-burst", "1000"}, strings.Fields(*hubArgs)...), Env: strings.Fields(*hubEnv)})
	if err != nil {
		b.Fatal(err)
	}
	defer s.hub.Stop()
	// A run that fails part-way still leaves what it measured, under a
	// name of its own (a complete run's results stay).
	defer func() {
		if b.Failed() {
			s.rep.Name += "-incomplete"
			s.rep.Title += " (stopped early: the phases after the last figure failed; see the benchmark's log)"
			if p, err := s.rep.Write(*resultsDir); err == nil {
				s.logf("what was measured is in %s", p)
			}
		}
	}()
	time.Sleep(5 * time.Second) // settle the empty hub
	empty := s.memory()
	empty.live = s.saveProfiles(s.profiles("empty"))
	s.empty = empty
	if l, err := load.ReadAPIServerLoad(ctx, env.Config); err == nil {
		s.emptyWatches = l.TotalWatches()
	} else {
		b.Fatal(err)
	}

	s.waiting = map[int]*latencySample{}
	s.agents, err = load.NewAgents(ctx, env.Client, s.hub, load.AgentOptions{N: s.n, Dir: agentStateDir(s.b, s.dir),
		Sources: 1 + s.n/250, OnDesired: s.desired})
	if err != nil {
		b.Fatal(err)
	}
	defer s.agents.Stop()
	b.ResetTimer()

	// Enrollment and first connection.
	// New agents start at -start-rate a second: every one of them enrolls
	// (two TLS handshakes and a key) and connects, all in this process on
	// the cores the hub and the API server use too; all at once, the
	// driver's own TLS work would starve it (handshakes time out).
	s.logf("enrolling and connecting (%g new agents a second)", *startRate)
	go s.agents.Start(time.Duration(float64(s.n) / *startRate * float64(time.Second)))
	took, line := s.waitAll("enroll", func() int { n, _ := s.hub.Sessions(ctx); return n })
	s.rep.Add(results.Figure{Key: "enroll-s", Name: fmt.Sprintf("new agents (started %g a second, one token per 100) all enrolled and connected", *startRate), Value: took.Seconds(), Unit: "s"})
	s.rep.Series = append(s.rep.Series, results.Series{Key: "enroll", Title: fmt.Sprintf("%s new agents enroll and connect", commas(s.n)),
		XLabel: "seconds", YLabel: "sessions", Lines: []results.Line{line}})

	s.settle("enrollment")
	hosts := &infrav1.EdgeHostList{}
	if err := env.Client.List(ctx, hosts, client.InNamespace(ns)); err != nil {
		b.Fatal(err)
	}
	s.rep.Add(results.Figure{Key: "extra-hosts", Name: "EdgeHosts beyond one per agent (an enrollment made twice: a host no agent holds)",
		Value: float64(len(hosts.Items) - s.n), Target: "0", Limit: results.Limit(0), Below: true})
	s.idleMemory(empty)
	s.apiLoad()
	s.latency()
	s.coldStart()
	if *coldStarts > 1 {
		s.coldStartAgain()
	}
	s.storm()
	b.StopTimer()

	p, err := s.rep.Write(*resultsDir)
	if err != nil {
		b.Fatal(err)
	}
	for _, f := range s.rep.Figures {
		b.ReportMetric(f.Value, strings.ReplaceAll(f.Key, " ", "-"))
	}
	s.logf("results in %s", p)
}

// desired is every agent's OnDesired: it completes latency samples.
func (s *hubScale) desired(i int, d *wire.DesiredState) {
	if d.Assignment == nil {
		return
	}
	s.waitMu.Lock()
	w := s.waiting[i]
	s.waitMu.Unlock()
	if w != nil && d.Assignment.ClaimUID == w.claim {
		w.got.CompareAndSwap(0, time.Now().UnixNano())
	}
}

type hubMemory struct {
	rss, heap, stack int64
	goroutines       float64
	live             int64 // live heap after a forced GC, from a profile
}

func (s *hubScale) memory() hubMemory {
	rss, err := s.hub.RSS()
	if err != nil {
		s.b.Fatal(err)
	}
	m, err := s.hub.Metrics(context.Background())
	if err != nil {
		s.b.Fatal(err)
	}
	return hubMemory{rss: rss, heap: int64(m["go_memstats_heap_inuse_bytes"]), stack: int64(m["go_memstats_stack_inuse_bytes"]),
		goroutines: m["go_goroutines"]}
}

// waitAll samples count every 250 ms until it reaches N and returns how
// long that took and the samples as a line to plot.
func (s *hubScale) waitAll(what string, count func() int) (time.Duration, results.Line) {
	start := time.Now()
	line := results.Line{Name: what}
	last := time.Time{}
	reasons := s.agents.Disconnects.Snapshot()
	for {
		n := count()
		el := time.Since(start)
		line.Points = append(line.Points, [2]float64{el.Seconds(), float64(n)})
		if n >= s.n {
			return el, line
		}
		// Enrollment on this machine runs at 5–15 agents a second.
		if limit := max(15*time.Minute, time.Duration(s.n)*time.Second/4); el > limit {
			s.b.Fatalf("%s: %d of %d after %s", what, n, s.n, el)
		}
		if time.Since(last) > 10*time.Second {
			s.logf("%s: %d of %d after %s%s", what, n, s.n, el.Round(time.Second), topReasons(s.agents.Disconnects.Since(reasons), 3))
			last = time.Now()
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// topReasons shows the first n reasons agents' sessions ended for.
func topReasons(c []load.Count, n int) string {
	var b strings.Builder
	for i, r := range c[:min(n, len(c))] {
		sep := "; "
		if i == 0 {
			sep = "; sessions ended: "
		}
		fmt.Fprintf(&b, "%s%d× %q", sep, r.N, r.Reason)
	}
	return b.String()
}

// disconnectTable shows why the agents' sessions ended (or their attempts
// failed) since before, a Snapshot.
func (s *hubScale) disconnectTable(title string, before map[string]int) results.Table {
	t := results.Table{Title: title, Header: []string{"reason (the agent's log line; addresses and numbers blanked)", "count"}}
	for i, c := range s.agents.Disconnects.Since(before) {
		if i == 12 {
			break
		}
		t.Rows = append(t.Rows, []string{"`" + c.Reason + "`", strconv.Itoa(c.N)})
	}
	if len(t.Rows) == 0 {
		t.Rows = append(t.Rows, []string{"(none)", "0"})
	}
	return t
}

const kib = 1024.0

// lastSeenInterval is fleet-hub's --last-seen-interval default, which the
// benchmark's hub runs with.
const lastSeenInterval = 5 * time.Minute

// idleMemory measures memory per agent and where it goes.
func (s *hubScale) idleMemory(empty hubMemory) {
	full := s.memory()
	n := float64(s.n)
	s.logf("memory: empty RSS %d MiB, with agents %d MiB", empty.rss>>20, full.rss>>20)
	s.rep.Add(results.Figure{Key: "rss-per-agent", Name: "hub RSS per idle agent", Value: float64(full.rss-empty.rss) / n / kib, Unit: "KiB",
		Target: "≤ 32 KiB at 10,000 agents", Limit: results.Limit(32), Below: true})
	dir := s.profiles("idle")
	live := s.saveProfiles(dir)
	s.rep.Add(results.Figure{Key: "heap-per-agent", Name: "Go heap in use per idle agent (as the hub's metric reads it, garbage included)",
		Value: float64(full.heap-empty.heap) / n / kib, Unit: "KiB"})
	s.rep.Add(results.Figure{Key: "live-per-agent", Name: "live Go heap per idle agent (heap profile after a forced GC)",
		Value: float64(live-empty.live) / n / kib, Unit: "KiB"})
	s.rep.Add(results.Figure{Key: "stack-per-agent", Name: "goroutine stacks per idle agent", Value: float64(full.stack-empty.stack) / n / kib, Unit: "KiB"})
	s.rep.Add(results.Figure{Key: "goroutines-per-session", Name: "hub goroutines per idle session", Value: (full.goroutines - empty.goroutines) / n})
	s.rep.Add(results.Figure{Key: "rss-steady", Name: "hub RSS with every agent connected and idle", Value: float64(full.rss) / (1 << 20), Unit: "MiB"})
	s.rep.Add(results.Figure{Key: "rss-empty", Name: "hub RSS with no agent", Value: float64(empty.rss) / (1 << 20), Unit: "MiB"})
	s.steadyRSS = full.rss
	s.rep.Tables = append(s.rep.Tables, heapTable(filepath.Join(dir, "heap.pb.gz"), s.n), goroutineTable(filepath.Join(dir, "goroutine.txt"), s.n))
}

// profiles is where this run's profiles of a phase go.
func (s *hubScale) profiles(phase string) string {
	dir := *profileDir
	if dir == "" {
		dir = s.dir
	}
	return filepath.Join(dir, fmt.Sprintf("agents-%d", s.n), phase)
}

// saveProfiles keeps the hub's heap profile (after a forced GC) and
// goroutine dump, and returns the live heap in bytes.
func (s *hubScale) saveProfiles(dir string) int64 {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		s.b.Fatal(err)
	}
	for _, p := range []struct{ url, file string }{{"heap?gc=1", "heap.pb.gz"}, {"goroutine?debug=1", "goroutine.txt"}} {
		resp, err := http.Get(s.hub.PprofURL + "/" + p.url)
		if err != nil {
			s.b.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			s.b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p.file), body, 0o644); err != nil {
			s.b.Fatal(err)
		}
	}
	live, err := heapTotal(filepath.Join(dir, "heap.pb.gz"))
	if err != nil {
		s.b.Fatal(err)
	}
	return live
}

// heapTotal reads the total in-use heap from `pprof -top`'s header
// ("Showing nodes accounting for …, …% of 43135.65kB total").
func heapTotal(profile string) (int64, error) {
	out, err := exec.Command("go", "tool", "pprof", "-sample_index=inuse_space", "-top", "-nodecount=1", profile).Output()
	if err != nil {
		return 0, fmt.Errorf("reading the heap profile %s: %w", profile, err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if i := strings.Index(l, "% of "); i > 0 && strings.HasSuffix(l, " total") {
			return parseSize(strings.TrimSuffix(l[i+len("% of "):], " total")), nil
		}
	}
	return 0, fmt.Errorf("no total in pprof's output for %s", profile)
}

// heapTable is the top allocation sites of the live heap, per agent.
func heapTable(profile string, n int) results.Table {
	t := results.Table{Title: fmt.Sprintf("Live heap by allocation site (`go tool pprof -sample_index=inuse_space -top` of the hub's heap profile after a forced GC, %s agents)", commas(n)),
		Header: []string{"site", "in use", "÷ agents (the empty hub's share included)"}}
	lines, err := pprofTop(profile, 12, "-sample_index=inuse_space")
	if err != nil {
		t.Rows = append(t.Rows, []string{"(pprof failed: " + err.Error() + ")", "", ""})
		return t
	}
	for _, f := range lines {
		bytes := parseSize(f[0])
		t.Rows = append(t.Rows, []string{"`" + strings.Join(f[5:], " ") + "`", f[0], fmt.Sprintf("%.1f KiB", float64(bytes)/float64(n)/kib)})
	}
	return t
}

// pprofTop runs `go tool pprof -top` on profile and returns its first n
// rows, each split into fields: flat, flat%, sum%, cum, cum%, then the
// function's name.
func pprofTop(profile string, n int, args ...string) ([][]string, error) {
	args = append(append([]string{"tool", "pprof"}, args...), "-top", fmt.Sprintf("-nodecount=%d", n), profile)
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		return nil, err
	}
	var rows [][]string
	started := false
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) >= 5 && f[0] == "flat" {
			started = true
			continue
		}
		if started && len(f) >= 6 {
			rows = append(rows, f)
		}
	}
	return rows, nil
}

func parseSize(s string) int64 {
	mult := 1.0
	for _, u := range []struct {
		suffix string
		m      float64
	}{{"GB", 1 << 30}, {"MB", 1 << 20}, {"kB", 1 << 10}, {"B", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.m
			break
		}
	}
	v, _ := strconv.ParseFloat(s, 64)
	return int64(v * mult)
}

// goroutineTable groups the hub's goroutines by the function that started
// them (the last frame of each stack in a debug=1 dump).
func goroutineTable(dump string, n int) results.Table {
	t := results.Table{Title: "Hub goroutines by what started them (`/debug/pprof/goroutine?debug=1`)", Header: []string{"started by", "goroutines", "÷ agents"}}
	f, err := os.Open(dump)
	if err != nil {
		t.Rows = append(t.Rows, []string{err.Error(), "", ""})
		return t
	}
	defer f.Close()
	counts := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	count, entry := 0, ""
	flush := func() {
		if count > 0 && entry != "" {
			counts[entry] += count
		}
		count, entry = 0, ""
	}
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.Contains(l, " @ 0x"):
			flush()
			count, _ = strconv.Atoi(strings.Fields(l)[0])
		case strings.HasPrefix(l, "#\t"):
			if fs := strings.Fields(l); len(fs) >= 3 {
				entry = fs[2]
				if i := strings.LastIndex(entry, "+0x"); i > 0 {
					entry = entry[:i]
				}
			}
		}
	}
	flush()
	type kv struct {
		k string
		v int
	}
	var all []kv
	for k, v := range counts {
		all = append(all, kv{k, v})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].v > all[j].v })
	for i, e := range all {
		if i == 8 {
			break
		}
		t.Rows = append(t.Rows, []string{"`" + e.k + "`", strconv.Itoa(e.v), fmt.Sprintf("%.2f", float64(e.v)/float64(n))})
	}
	return t
}

// settle waits until the fleet is quiet: the first status reports and
// reconciles after a wave of connections are written (API writes in 10 s
// fewer than 1 % of the agents above what the lastSeenTime refreshes of a
// fleet connected for over 5 minutes cost), at most 10 minutes.
func (s *hubScale) settle(after string) {
	ctx := context.Background()
	start := time.Now()
	writes := func() float64 {
		l, err := load.ReadAPIServerLoad(ctx, env.Config)
		if err != nil {
			s.b.Fatal(err)
		}
		var w float64
		for r, v := range l.Requests {
			if r.Write() {
				w += v
			}
		}
		return w
	}
	last := writes()
	for {
		time.Sleep(10 * time.Second)
		now := writes()
		if now-last < float64(s.n)/100+float64(s.n)*10/lastSeenInterval.Seconds() || time.Since(start) > 10*time.Minute {
			s.logf("settled %s after %s (%d API writes in the last 10 s)", after, time.Since(start).Round(time.Second), int(now-last))
			s.rep.Add(results.Figure{Key: "settle-" + after + "-s", Name: fmt.Sprintf("quiet after the %s (API writes in 10 s below 1 %% of the agents plus their lastSeenTime refreshes)", after),
				Value: time.Since(start).Seconds(), Unit: "s"})
			return
		}
		last = now
	}
}

// apiLoad counts the API requests of the idle fleet over -idle, from the
// API server's own counters (nothing else talks to it meanwhile).
func (s *hubScale) apiLoad() {
	ctx := context.Background()
	s.logf("counting API requests of the idle fleet for %s", *idleWindow)
	// Each counter's window is timed as read: the scrapes around the
	// sleep add a fraction of a second, in which a 10,000-agent fleet's
	// lastSeenTime refreshes (33 a second) put an extra write or two.
	apiStart := time.Now()
	before, err := load.ReadAPIServerLoad(ctx, env.Config)
	if err != nil {
		s.b.Fatal(err)
	}
	hubStart := time.Now()
	hubBefore, err := s.hub.Requests(ctx)
	if err != nil {
		s.b.Fatal(err)
	}
	cpu0, err := s.hub.CPU()
	if err != nil {
		s.b.Fatal(err)
	}
	time.Sleep(*idleWindow)
	if cpu1, err := s.hub.CPU(); err == nil {
		s.rep.Add(results.Figure{Key: "idle-cpu-pct", Name: fmt.Sprintf("hub CPU with %s idle agents (%s)", commas(s.n), *idleWindow),
			Value: 100 * (cpu1 - cpu0).Seconds() / idleWindow.Seconds(), Unit: "% of one core"})
	}
	after, err := load.ReadAPIServerLoad(ctx, env.Config)
	if err != nil {
		s.b.Fatal(err)
	}
	apiWindow := time.Since(apiStart)
	hubAfter, err := s.hub.Requests(ctx)
	if err != nil {
		s.b.Fatal(err)
	}
	hubWindow := time.Since(hubStart)
	var hubWrites, hubReads float64
	for method, v := range hubAfter {
		switch d := v - hubBefore[method]; method {
		case "POST", "PUT", "PATCH", "DELETE":
			hubWrites += d
		default:
			hubReads += d
		}
	}
	d := after.Since(before)
	perAgentPer5 := func(v float64, window time.Duration) float64 { return v / float64(s.n) / (window.Minutes() / 5) }
	per5 := func(v float64) float64 { return perAgentPer5(v, apiWindow) }
	var writes, fleetWrites, reads float64
	t := results.Table{Title: fmt.Sprintf("API requests of %s idle agents over %s, by verb and resource (the API server's `apiserver_request_total`; this includes the API server's own housekeeping)", commas(s.n), *idleWindow),
		Header: []string{"request", "count", "per agent per 5 min"}}
	keys := make([]load.Request, 0, len(d.Requests))
	for r := range d.Requests {
		keys = append(keys, r)
	}
	sort.Slice(keys, func(i, j int) bool { return d.Requests[keys[i]] > d.Requests[keys[j]] })
	for _, r := range keys {
		v := d.Requests[r]
		if r.Write() {
			writes += v
			if r.Group == infrav1.GroupVersion.Group {
				fleetWrites += v
			}
		} else if r.Verb != "WATCH" {
			reads += v
		}
		t.Rows = append(t.Rows, []string{r.String(), strconv.Itoa(int(v)), fmt.Sprintf("%.3f", per5(v))})
	}
	s.rep.Tables = append(s.rep.Tables, t)
	s.rep.Add(results.Figure{Key: "hub-writes-per-agent-5min", Name: fmt.Sprintf("the hub's API writes per idle agent per 5 minutes (its client's `rest_client_requests_total`, over %s)", *idleWindow),
		Value: perAgentPer5(hubWrites, hubWindow), Target: "≤ 1", Limit: results.Limit(1), Below: true})
	s.rep.Add(results.Figure{Key: "hub-reads-per-agent-5min", Name: "the hub's API reads per idle agent per 5 minutes", Value: perAgentPer5(hubReads, hubWindow)})
	s.rep.Add(results.Figure{Key: "writes-per-agent-5min", Name: "all writes the API server counted, per idle agent per 5 minutes (its own housekeeping included)", Value: per5(writes)})
	s.rep.Add(results.Figure{Key: "fleet-writes-per-agent-5min", Name: "of which on fleet objects (EdgeHosts …)", Value: per5(fleetWrites)})
	s.rep.Add(results.Figure{Key: "reads-per-agent-5min", Name: "API reads (GET/LIST) per idle agent per 5 minutes", Value: per5(reads)})
	var watches float64
	wt := results.Table{Title: "Watches open on the API server at the end of the window (`apiserver_longrunning_requests{verb=\"WATCH\"}`): none per agent",
		Header: []string{"resource", "watches"}}
	wkeys := make([]load.Request, 0, len(d.Watches))
	for r, v := range d.Watches {
		if v > 0 {
			wkeys = append(wkeys, r)
		}
	}
	sort.Slice(wkeys, func(i, j int) bool { return wkeys[i].String() < wkeys[j].String() })
	for _, r := range wkeys {
		watches += d.Watches[r]
		wt.Rows = append(wt.Rows, []string{r.String(), strconv.Itoa(int(d.Watches[r]))})
	}
	s.rep.Tables = append(s.rep.Tables, wt)
	s.rep.Add(results.Figure{Key: "watches", Name: "watches open on the API server (all clients)", Value: watches})
	s.rep.Add(results.Figure{Key: "watches-added", Name: fmt.Sprintf("watches added by %s connected agents (against the empty hub's %d)", commas(s.n), int(s.emptyWatches)),
		Value: watches - s.emptyWatches, Target: "0: no per-agent watches", Limit: results.Limit(0), Below: true})
	s.logf("API load: hub %.3f writes per agent per 5 min (API server: %.3f), %v watches", per5(hubWrites), per5(writes), watches)
	for _, row := range t.Rows[:min(len(t.Rows), 6)] {
		s.logf("  %s", strings.Join(row, "  "))
	}
}

// latency assigns hosts to their agents one after another (20 a second)
// and times each from the API write to the agent holding the assignment.
func (s *hubScale) latency() {
	ctx := context.Background()
	m := min(*latencySamples, s.n)
	if m <= 0 {
		return
	}
	ns := s.hub.Namespace
	s.logf("timing %d assignments", m)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bench-bootstrap"},
		Data: map[string][]byte{"value": []byte("#cloud-config\n"), "format": []byte("cloud-config")}}
	if err := env.Client.Create(ctx, secret); client.IgnoreAlreadyExists(err) != nil {
		s.b.Fatal(err)
	}
	idx := make([]int, m)
	for k := range m {
		idx[k] = k * s.n / m
	}
	samples := make([]*latencySample, m)
	// The EdgeMachines first (not timed): a claim names one.
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for k, i := range idx {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			em := &infrav1.EdgeMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bench-" + s.agents.Host(i)}}
			if err := env.Client.Create(ctx, em); err != nil {
				s.b.Error(err)
				return
			}
			samples[k] = &latencySample{claim: em.UID}
		}()
	}
	wg.Wait()
	if s.b.Failed() {
		s.b.FailNow()
	}
	// A watch of our own tells how long the API server takes to announce
	// the write: the hub's informer cannot hear it sooner.
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		s.b.Fatal(err)
	}
	byClaim := map[types.UID]*latencySample{}
	for _, w := range samples {
		byClaim[w.claim] = w
	}
	watch, err := wc.Watch(ctx, &infrav1.EdgeHostList{}, client.InNamespace(ns))
	if err != nil {
		s.b.Fatal(err)
	}
	defer watch.Stop()
	go func() {
		for ev := range watch.ResultChan() {
			if h, ok := ev.Object.(*infrav1.EdgeHost); ok && h.Spec.ClaimRef != nil {
				if w := byClaim[h.Spec.ClaimRef.UID]; w != nil {
					w.watched.CompareAndSwap(0, time.Now().UnixNano())
				}
			}
		}
	}()
	apiBefore, err := load.ReadAPIServerLoad(ctx, env.Config)
	if err != nil {
		s.b.Fatal(err)
	}
	fsyncs0, fsyncSecs0, fsyncErr := load.EtcdFsync(ctx, env.EtcdURL())
	tick := time.NewTicker(time.Duration(float64(time.Second) / *latencyRate))
	defer tick.Stop()
	for k, i := range idx {
		<-tick.C
		w := samples[k]
		s.waitMu.Lock()
		s.waiting[i] = w
		s.waitMu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			host := &infrav1.EdgeHost{}
			key := client.ObjectKey{Namespace: ns, Name: s.agents.Host(i)}
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				if err := env.Client.Get(ctx, key, host); err != nil {
					return err
				}
				host.Spec.ClaimRef = &infrav1.HostClaimReference{Name: "bench-" + s.agents.Host(i), UID: w.claim, BootstrapDataSecretName: secret.Name}
				w.written = time.Now()
				err := env.Client.Update(ctx, host)
				w.acked = time.Now()
				return err
			})
			if err != nil {
				s.b.Errorf("assigning %s: %v", key, err)
			}
		}()
	}
	wg.Wait()
	if s.b.Failed() {
		s.b.FailNow()
	}
	deadline := time.Now().Add(2 * time.Minute)
	var ms, writes, watched []float64
	for {
		ms, writes, watched = ms[:0], writes[:0], watched[:0]
		for _, w := range samples {
			if got := w.got.Load(); got != 0 {
				ms = append(ms, float64(got-w.written.UnixNano())/1e6)
				writes = append(writes, float64(w.acked.Sub(w.written))/1e6)
				if seen := w.watched.Load(); seen != 0 {
					watched = append(watched, float64(seen-w.written.UnixNano())/1e6)
				}
			}
		}
		if len(ms) == m || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Let the provisioning each assignment starts finish, then count what
	// an assignment costs the API server.
	time.Sleep(10 * time.Second)
	if apiAfter, err := load.ReadAPIServerLoad(ctx, env.Config); err == nil {
		t, w, all := requestTable(fmt.Sprintf("API requests during the %d timed assignments, by verb and resource", m), "per assignment", apiAfter.Since(apiBefore).Requests, float64(m))
		s.rep.Tables = append(s.rep.Tables, t)
		if fsyncs1, fsyncSecs1, err := load.EtcdFsync(ctx, env.EtcdURL()); err == nil && fsyncErr == nil && fsyncs1 > fsyncs0 {
			s.rep.Add(results.Figure{Key: "etcd-fsync-ms", Name: fmt.Sprintf("etcd WAL fsync during the assignments, mean of %d (this machine's disk)", int(fsyncs1-fsyncs0)),
				Value: 1000 * (fsyncSecs1 - fsyncSecs0) / (fsyncs1 - fsyncs0), Unit: "ms"})
		}
		s.rep.Add(results.Figure{Key: "requests-per-assignment", Name: "API requests per assignment (all clients: the bench's write, the hub's reads and writes as the agent provisions and reports)", Value: all / float64(m)})
		s.rep.Add(results.Figure{Key: "writes-per-assignment", Name: "of which writes", Value: w / float64(m)})
	}
	if len(ms) < m {
		for k, w := range samples {
			if w.got.Load() == 0 {
				i := idx[k]
				host := &infrav1.EdgeHost{}
				_ = env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: s.agents.Host(i)}, host)
				s.logf("agent %d (%s) never received claim %s: connected %v; host generation %d, claim %+v, status %+v",
					i, s.agents.Host(i), w.claim, s.agents.IsConnected(i), host.Generation, host.Spec.ClaimRef, host.Status)
			}
		}
		s.fatalf("desired-state latency: only %d of %d agents received their assignment within 2 minutes", len(ms), m)
	}
	slices.Sort(ms)
	// Nearest rank: the smallest value with at least p of the samples at
	// or below it.
	q := func(p float64) float64 { return ms[max(0, int(math.Ceil(p*float64(len(ms))))-1)] }
	s.rep.Add(results.Figure{Key: "latency-p50-ms", Name: fmt.Sprintf("desired-state latency p50 (%d assignments, %g/s, API write → agent)", m, *latencyRate), Value: q(0.50), Unit: "ms",
		Target: "≤ 50 ms at 1,000", Limit: results.Limit(50), Below: true})
	s.rep.Add(results.Figure{Key: "latency-p90-ms", Name: "desired-state latency p90", Value: q(0.90), Unit: "ms"})
	s.rep.Add(results.Figure{Key: "latency-p99-ms", Name: "desired-state latency p99", Value: q(0.99), Unit: "ms",
		Target: "≤ 250 ms at 1,000", Limit: results.Limit(250), Below: true})
	s.rep.Add(results.Figure{Key: "latency-max-ms", Name: "desired-state latency max", Value: ms[len(ms)-1], Unit: "ms"})
	slices.Sort(writes)
	s.rep.Add(results.Figure{Key: "latency-write-p50-ms", Name: "of which the API write itself (the API server's answer to the Update), p50", Value: writes[len(writes)/2], Unit: "ms"})
	if len(watched) > 0 {
		slices.Sort(watched)
		s.rep.Add(results.Figure{Key: "latency-watch-p50-ms", Name: "of which until a watch hears of the write (the earliest the hub's informer can), p50", Value: watched[len(watched)/2], Unit: "ms"})
	}
	s.rep.Series = append(s.rep.Series, results.Series{Key: "latency", Kind: "histogram", Title: fmt.Sprintf("desired-state latency, %d assignments with %s agents connected", m, commas(s.n)),
		XLabel: "milliseconds from the API write to the agent", YLabel: "assignments", Values: slices.Clone(ms)})
	if m, err := s.hub.Metrics(ctx); err == nil && m["fleet_gateway_push_latency_seconds_count"] > 0 {
		s.rep.Add(results.Figure{Key: "hub-push-mean-ms", Name: "of which in the hub: mean from the EdgeHost event to the desired state sent (`fleet_gateway_push_latency_seconds`)",
			Value: 1000 * m["fleet_gateway_push_latency_seconds_sum"] / m["fleet_gateway_push_latency_seconds_count"], Unit: "ms"})
	}
	s.logf("latency p50 %.1f ms p99 %.1f ms", q(0.5), q(0.99))
}

// coldStart stops every agent and starts them all at once: each holds its
// identity, so this is N handshakes through the hub's admission limit.
func (s *hubScale) coldStart() {
	ctx := context.Background()
	s.logf("cold start")
	m0 := s.stopAll("cold start")
	dir := s.profiles("cold-start")
	stopDriverProfile, hubProfiled := s.profileCPU(dir, hubProfileWindow)
	api0, err := load.ReadAPIServerLoad(ctx, env.Config)
	if err != nil {
		s.b.Fatal(err)
	}
	reasons := s.agents.Disconnects.Snapshot()
	run := s.startAll("cold start", m0)
	stopDriverProfile()
	defer func() {
		<-hubProfiled
		s.rep.Tables = append(s.rep.Tables, profileTable(fmt.Sprintf("Hub CPU during the cold start by function (`go tool pprof -top` of the hub's %.0f s CPU profile from the start)", hubProfileWindow.Seconds()), filepath.Join(dir, "hub-cpu.pb.gz")))
	}()
	s.rep.Tables = append(s.rep.Tables, cpuTable(fmt.Sprintf("Where the machine's CPU went while %s agents connected (cold start, %.1f s on %d cores; /proc/PID/stat)", commas(s.n), run.took.Seconds(), runtime.NumCPU()),
		"load driver (the agents: TLS client, sessions)", run.cpu0, run.cpu1, run.took),
		profileTable("Load driver CPU during the cold start by function (the agents' side: `go tool pprof -top` of the driver's CPU profile until all connected)", filepath.Join(dir, "driver-cpu.pb.gz")),
		s.disconnectTable("Why agents' attempts or sessions ended during the cold start (each then retried)", reasons))
	if api1, err := load.ReadAPIServerLoad(ctx, env.Config); err == nil {
		t, _, _ := requestTable(fmt.Sprintf("API requests from the cold start until every host read connected (%.0f s), by verb and resource", run.recordedTook.Seconds()),
			"per agent", api1.Since(api0).Requests, float64(s.n))
		s.rep.Tables = append(s.rep.Tables, t)
	}
	s.rep.Add(results.Figure{Key: "cold-start-s", Name: "cold start: agents holding identities all connected", Value: run.took.Seconds(), Unit: "s",
		Target: "≤ 30 s at 10,000", Limit: results.Limit(30), Below: true})
	s.rep.Add(results.Figure{Key: "handshake-rate", Name: "cold start: handshakes per second", Value: float64(s.n) / run.took.Seconds(), Unit: "/s"})
	s.rep.Add(results.Figure{Key: "cold-start-cpu-per-agent", Name: "cold start: CPU per agent, all processes (driver, hub, API server, etcd)",
		Value: run.cpuPerAgent(), Unit: "ms"})
	s.rep.Add(results.Figure{Key: "cold-start-hub-cpu-per-agent", Name: "cold start: the hub's CPU per agent",
		Value: (run.cpu1["fleet-hub"] - run.cpu0["fleet-hub"]).Seconds() * 1000 / float64(s.n), Unit: "ms"})
	s.rep.Add(results.Figure{Key: "cold-start-busy", Name: "cold start: handshakes turned away by the admission limit (503, retried)", Value: run.busy})
	s.rep.Add(results.Figure{Key: "cold-start-tls-unserved", Name: "cold start: connections closed after waiting for a TLS handshake place (each retried by its agent)", Value: run.tlsBusy})
	s.rep.Add(results.Figure{Key: "cold-start-tls-failed", Name: "cold start: TLS handshakes begun and not finished (timed out, or the agent gave up)", Value: run.tlsFailed})
	s.rep.Add(results.Figure{Key: "cold-start-wave-delayed", Name: "cold start: AgentConnected writes held back until the wave passed (--wave-status-delay)", Value: run.waveDelayed})
	s.rep.Add(results.Figure{Key: "cold-start-recorded-s", Name: "cold start: every host recorded connected in the API (AgentConnected, one write each)", Value: run.recordedTook.Seconds(), Unit: "s"})
	s.rep.Series = append(s.rep.Series, results.Series{Key: "cold-start", Title: fmt.Sprintf("cold start: %s agents holding identities connect at once to hosts that read disconnected", commas(s.n)),
		XLabel: "seconds", YLabel: "agents", Lines: []results.Line{run.sessions, run.recorded}})
	s.coldStarts = append(s.coldStarts, run)
	s.settle("cold start")
	after := s.memory()
	s.steadyRSS = after.rss
	s.rep.Add(results.Figure{Key: "rss-per-agent-after-cold-start", Name: "hub RSS per idle agent after the cold start (sessions made on a heap the enrollment wave left)",
		Value: float64(after.rss-s.empty.rss) / float64(s.n) / kib, Unit: "KiB", Target: "≤ 32 KiB at 10,000 agents", Limit: results.Limit(32), Below: true})
	s.rep.Add(results.Figure{Key: "heap-per-agent-after-cold-start", Name: "Go heap in use per idle agent after the cold start",
		Value: float64(after.heap-s.empty.heap) / float64(s.n) / kib, Unit: "KiB"})
}

// coldStartAgain repeats the cold start -cold-starts times in all, to show
// how much its time varies from one to the next on the same code: the
// cores are shared by the agents, the hub and the API server, and how the
// first seconds go decides how many connections wait out their place and
// come back.
func (s *hubScale) coldStartAgain() {
	for i := len(s.coldStarts); i < *coldStarts; i++ {
		what := fmt.Sprintf("cold start %d", i+1)
		s.logf("%s", what)
		m0 := s.stopAll(what)
		s.coldStarts = append(s.coldStarts, s.startAll(what, m0))
		s.settle(fmt.Sprintf("cold-start-%d", i+1))
	}
	t := results.Table{Title: fmt.Sprintf("The cold start of %s agents, %d times on the same hub (the first is the one above)", commas(s.n), len(s.coldStarts)),
		Header: []string{"run", "all connected (s)", "connections closed waiting for a TLS place", "TLS handshakes not finished", "AgentConnected writes held for the wave", "CPU per agent, all processes (ms)"}}
	worst := 0.0
	for i, r := range s.coldStarts {
		worst = max(worst, r.took.Seconds())
		t.Rows = append(t.Rows, []string{strconv.Itoa(i + 1), fmt.Sprintf("%.1f", r.took.Seconds()), fmt.Sprintf("%.0f", r.tlsBusy),
			fmt.Sprintf("%.0f", r.tlsFailed), fmt.Sprintf("%.0f", r.waveDelayed), fmt.Sprintf("%.2f", r.cpuPerAgent())})
	}
	s.rep.Tables = append(s.rep.Tables, t)
	s.rep.Add(results.Figure{Key: "cold-start-worst-s", Name: fmt.Sprintf("cold start: the slowest of %d", len(s.coldStarts)), Value: worst, Unit: "s",
		Target: "≤ 30 s at 10,000", Limit: results.Limit(30), Below: true})
}

// coldStartRun is what one cold start measured.
type coldStartRun struct {
	took, recordedTook                    time.Duration
	cpu0, cpu1                            map[string]time.Duration
	busy, tlsBusy, tlsFailed, waveDelayed float64
	sessions, recorded                    results.Line
	n                                     int
}

// cpuPerAgent is what the cold start cost, apart from how the processes
// shared the cores: the floor of its time on this machine is all of it
// divided by the cores, and the hub's part is what a hub with cores of
// its own would spend.
func (r coldStartRun) cpuPerAgent() float64 {
	var machineCPU time.Duration
	for _, p := range measuredPrograms {
		machineCPU += r.cpu1[p] - r.cpu0[p]
	}
	return machineCPU.Seconds() * 1000 / float64(r.n)
}

// Hub metrics the cold start reads.
const (
	disconnectedWrites = `fleet_gateway_status_writes_total{cause="disconnected"}`
	connectedWrites    = `fleet_gateway_status_writes_total{cause="connected"}`
)

// stopAll stops every agent and waits until the hub has recorded every
// host disconnected; it returns the hub's metrics from then.
func (s *hubScale) stopAll(what string) map[string]float64 {
	ctx := context.Background()
	// Counted from before the agents stop: stopping 10,000 of them takes
	// longer than the disconnect grace, so the first disconnects are
	// recorded before the last session ends.
	m0, err := s.hub.Metrics(ctx)
	if err != nil {
		s.b.Fatal(err)
	}
	s.agents.Stop()
	for start := time.Now(); ; {
		n, err := s.hub.Sessions(ctx)
		if err == nil && n == 0 {
			break
		}
		if time.Since(start) > 5*time.Minute {
			s.fatalf("%s: the hub still holds %d sessions 5 minutes after every agent stopped (%v)", what, n, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	// Agents back within the hub's disconnect grace would find their
	// hosts still connected and cost nothing: a cold start is a fleet
	// coming back to hosts that read disconnected (after a site-wide
	// outage), so wait until the hub has recorded every one.
	for start, last := time.Now(), time.Now(); ; {
		m, err := s.hub.Metrics(ctx)
		if err == nil && m[disconnectedWrites]-m0[disconnectedWrites] >= float64(s.n) {
			break
		}
		if time.Since(last) > 30*time.Second {
			s.logf("%s: %v of %d hosts recorded disconnected", what, m[disconnectedWrites]-m0[disconnectedWrites], s.n)
			last = time.Now()
		}
		if time.Since(start) > 10*time.Minute {
			s.fatalf("%s: %v of %d hosts recorded disconnected after 10 minutes (%v)", what, m[disconnectedWrites]-m0[disconnectedWrites], s.n, err)
		}
		time.Sleep(time.Second)
	}
	s.logf("%s: every host recorded disconnected", what)
	m0, err = s.hub.Metrics(ctx)
	if err != nil {
		s.b.Fatal(err)
	}
	return m0
}

// startAll starts every agent at once and waits until all hold a session,
// then until the hub has recorded every host connected.
func (s *hubScale) startAll(what string, m0 map[string]float64) coldStartRun {
	ctx := context.Background()
	// Start builds every agent first and lets them all go as it returns:
	// the CPU is counted from there, like the time, so building 10,000
	// agent objects in one process (which real agents do not share) is
	// not charged to the cold start.
	s.agents.Start(0)
	run := coldStartRun{n: s.n, cpu0: load.CPUByProgram(cpuPrograms...), recorded: results.Line{Name: "recorded connected in the API"}}
	start := time.Now()
	run.took, run.sessions = s.waitAll(what, func() int {
		if m, err := s.hub.Metrics(ctx); err == nil {
			run.recorded.Points = append(run.recorded.Points, [2]float64{time.Since(start).Seconds(), m[connectedWrites] - m0[connectedWrites]})
		}
		n, _ := s.hub.Sessions(ctx)
		return n
	})
	run.sessions.Name = "sessions"
	run.cpu1 = load.CPUByProgram(cpuPrograms...)
	m1, err := s.hub.Metrics(ctx)
	if err != nil {
		s.b.Fatal(err)
	}
	since := func(k string) float64 { return m1[k] - m0[k] }
	run.busy = since(`fleet_gateway_handshakes_total{result="busy"}`)
	run.tlsBusy = since(`fleet_gateway_tls_handshakes_total{result="busy"}`)
	run.tlsFailed = since(`fleet_gateway_tls_handshakes_total{result="failed"}`)
	run.waveDelayed = since(`fleet_gateway_status_writes_wave_delayed_total{cause="connected"}`)
	s.logf("%s: all connected in %.1f s; %.0f connections closed waiting for a TLS place, %.0f TLS handshakes not finished, %.0f connected writes held for the wave, %.2f ms CPU per agent",
		what, run.took.Seconds(), run.tlsBusy, run.tlsFailed, run.waveDelayed, run.cpuPerAgent())
	for {
		m, err := s.hub.Metrics(ctx)
		el := time.Since(start)
		if err == nil {
			run.recorded.Points = append(run.recorded.Points, [2]float64{el.Seconds(), m[connectedWrites] - m0[connectedWrites]})
			if m[connectedWrites]-m0[connectedWrites] >= float64(s.n) {
				run.recordedTook = el
				break
			}
		}
		if el > 15*time.Minute {
			s.fatalf("%s: %v of %d hosts recorded connected after %s (%v)", what, m[connectedWrites]-m0[connectedWrites], s.n, el, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	return run
}

// hubProfileWindow is how long the hub's CPU is profiled from the start
// of the cold start: long enough to cover a 10,000-agent one.
const hubProfileWindow = 60 * time.Second

// requestTable shows the most frequent API requests (watches aside) and
// each per unit, and returns the writes and all requests counted.
func requestTable(title, perHeader string, d map[load.Request]float64, units float64) (t results.Table, writes, all float64) {
	return requestTableTimed(title, perHeader, d, units, nil)
}

// requestTableTimed is requestTable with, when latency is given, each
// request's mean time in the API server.
func requestTableTimed(title, perHeader string, d map[load.Request]float64, units float64, latency func(load.Request) time.Duration) (t results.Table, writes, all float64) {
	t = results.Table{Title: title, Header: []string{"request", "count", perHeader}}
	if latency != nil {
		t.Header = append(t.Header, "mean time in the API server")
	}
	keys := make([]load.Request, 0, len(d))
	for r, v := range d {
		if r.Verb == "WATCH" {
			continue
		}
		all += v
		if r.Write() {
			writes += v
		}
		keys = append(keys, r)
	}
	sort.Slice(keys, func(i, j int) bool { return d[keys[i]] > d[keys[j]] })
	for _, r := range keys[:min(len(keys), 12)] {
		row := []string{r.String(), strconv.Itoa(int(d[r])), fmt.Sprintf("%.2f", d[r]/units)}
		if latency != nil {
			row = append(row, fmt.Sprintf("%.1f ms", float64(latency(r))/float64(time.Millisecond)))
		}
		t.Rows = append(t.Rows, row)
	}
	return t, writes, all
}

// cpuPrograms are the processes that share the machine in a benchmark
// besides the driver.
var cpuPrograms = []string{"fleet-hub", "kube-apiserver", "etcd"}

// measuredPrograms are the driver ("driver", load.CPUByProgram's name for
// this process) and cpuPrograms: everything a benchmark runs.
var measuredPrograms = append([]string{"driver"}, cpuPrograms...)

// cpuTable shows each program's CPU between two samples, and its share of
// the machine over took; driver names what runs in this process.
func cpuTable(title, driver string, before, after map[string]time.Duration, took time.Duration) results.Table {
	t := results.Table{Title: title, Header: []string{"process", "CPU seconds", "share of the machine"}}
	machine := took.Seconds() * float64(runtime.NumCPU())
	var total float64
	for _, p := range measuredPrograms {
		d := (after[p] - before[p]).Seconds()
		total += d
		name := p
		if p == "driver" {
			name = driver
		}
		t.Rows = append(t.Rows, []string{name, fmt.Sprintf("%.1f", d), fmt.Sprintf("%.0f %%", 100*d/machine)})
	}
	t.Rows = append(t.Rows, []string{"all", fmt.Sprintf("%.1f", total), fmt.Sprintf("%.0f %%", 100*total/machine)})
	return t
}

// profileCPU takes, into dir, the hub's CPU profile for d in the background
// (hubDone closes when it is written) and the driver's own until
// stopDriver.
func (s *hubScale) profileCPU(dir string, d time.Duration) (stopDriver func(), hubDone <-chan struct{}) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		s.b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := http.Get(fmt.Sprintf("%s/profile?seconds=%d", s.hub.PprofURL, int(d.Seconds())))
		if err != nil {
			s.logf("hub CPU profile: %v", err)
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, "hub-cpu.pb.gz"), body, 0o644)
		}
		if err != nil {
			s.logf("hub CPU profile: %v", err)
		}
	}()
	stop, err := profileDriver(filepath.Join(dir, "driver-cpu.pb.gz"))
	if err != nil {
		s.logf("driver CPU profile: %v", err)
	}
	return stop, done
}

// profileDriver writes this process's CPU profile to path until stop.
func profileDriver(path string) (stop func(), err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return func() {}, err
	}
	f, err := os.Create(path)
	if err != nil {
		return func() {}, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return func() {}, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			pprof.StopCPUProfile()
			_ = f.Close()
		})
	}, nil
}

// profileTable is the top functions of a CPU profile by flat time.
func profileTable(title, profile string) results.Table {
	t := results.Table{Title: title, Header: []string{"function", "flat", "flat %", "cum %"}}
	lines, err := pprofTop(profile, 15)
	if err != nil {
		t.Rows = append(t.Rows, []string{"(pprof failed: " + err.Error() + ")", "", "", ""})
		return t
	}
	for _, f := range lines {
		t.Rows = append(t.Rows, []string{"`" + strings.Join(f[5:], " ") + "`", f[0], f[1], f[4]})
	}
	return t
}

// storm kills the hub under N connected agents and restarts it.
func (s *hubScale) storm() {
	ctx := context.Background()
	s.logf("reconnect storm")
	reasons := s.agents.Disconnects.Snapshot()
	killed := time.Now()
	s.hub.Kill()
	if err := s.hub.Restart(); err != nil {
		s.b.Fatal(err)
	}
	// Sessions are sampled from the restart; the plot counts from the kill.
	off := time.Since(killed)
	var peak int64
	resynced := results.Line{Name: "resynced (received a desired state)"}
	took, line := s.waitAll("storm", func() int {
		if r, err := s.hub.RSS(); err == nil && r > peak {
			peak = r
		}
		n, _ := s.hub.Sessions(ctx)
		return n
	})
	line.Name = "sessions on the restarted hub"
	// Resynced: every agent received a desired state after the kill.
	var resyncTook time.Duration
	for {
		n := s.agents.DesiredSince(killed)
		el := time.Since(killed)
		resynced.Points = append(resynced.Points, [2]float64{el.Seconds(), float64(n)})
		if n >= s.n {
			resyncTook = el
			break
		}
		if el > 15*time.Minute {
			s.b.Fatalf("storm: %d of %d agents resynced after %s", n, s.n, el)
		}
		time.Sleep(250 * time.Millisecond)
	}
	took += off
	s.rep.Tables = append(s.rep.Tables, s.disconnectTable("Why agents' sessions or attempts ended during the reconnect storm (the kill ends every session once; each then retried)", reasons))
	s.rep.Add(results.Figure{Key: "storm-s", Name: "reconnect storm: all sessions back after the hub is killed and restarted", Value: took.Seconds(), Unit: "s",
		Target: "≤ 60 s", Limit: results.Limit(60), Below: true})
	s.rep.Add(results.Figure{Key: "storm-resync-s", Name: "reconnect storm: every agent resynced (holds a fresh desired state)", Value: resyncTook.Seconds(), Unit: "s",
		Target: "≤ 60 s", Limit: results.Limit(60), Below: true})
	s.rep.Add(results.Figure{Key: "storm-peak-ratio", Name: fmt.Sprintf("reconnect storm: hub peak RSS (%d MiB) / steady RSS (%d MiB)", peak>>20, s.steadyRSS>>20),
		Value: float64(peak) / float64(s.steadyRSS), Unit: "×", Target: "≤ 2", Limit: results.Limit(2), Below: true})
	gaveUp := s.n - s.agents.Connected()
	s.rep.Add(results.Figure{Key: "storm-gave-up", Name: "reconnect storm: agents not connected at the end", Value: float64(gaveUp),
		Target: "0", Limit: results.Limit(0), Below: true})
	for i := range line.Points {
		line.Points[i][0] += off.Seconds()
	}
	s.rep.Series = append(s.rep.Series, results.Series{Key: "storm", Title: fmt.Sprintf("reconnect storm: fleet-hub killed (SIGKILL) and restarted under %s agents", commas(s.n)),
		XLabel: "seconds since the kill", YLabel: "agents", Lines: []results.Line{line, resynced}})
	s.logf("storm: sessions back in %s, resynced in %s, peak RSS %d MiB", took.Round(time.Millisecond), resyncTook.Round(time.Millisecond), peak>>20)
}

func commas(n int) string {
	s := strconv.Itoa(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
