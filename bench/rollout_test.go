package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/bench/load"
	"github.com/edgefleet/fleet/bench/results"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/release"
)

var (
	rolloutAgents = flag.Int("rollout-agents", 1000, "Agents BenchmarkAgentRollout moves to a new release.")
	rolloutWave   = flag.String("rollout-wave", "10%", "BenchmarkAgentRollout's wave size.")
)

// BenchmarkAgentRollout moves N real agents (in this process, each with
// its own release store, restarting into the release as fleet-agent's
// launcher does) from v0.9.1 to a real fleet-agent binary signed as
// v0.9.2, through one real fleet-hub process, in waves (a canary, then
// -rollout-wave): the whole roll-out's time, each wave's, the bytes the
// hub sent, its memory and CPU during the transfers, and that no agent
// was lost.
//
//	go test ./bench -run '^$' -bench AgentRollout -benchtime 1x -timeout 60m -args -rollout-agents=1000
func BenchmarkAgentRollout(b *testing.B) {
	if _, err := load.RaiseFileLimit(); err != nil {
		b.Fatal(err)
	}
	for range b.N {
		agentRollout(b, buildHub(b), *rolloutAgents)
	}
}

func agentRollout(b *testing.B, bin string, n int) {
	ctx := context.Background()
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "[%s] rollout agents=%d: %s\n", time.Now().Format("15:04:05"), n, fmt.Sprintf(format, args...))
	}
	dir := b.TempDir()
	ns := fmt.Sprintf("rollout-%d", time.Now().UnixNano()%100000)

	// The release: a real fleet-agent binary, signed under a root the
	// agents hold.
	binary := filepath.Join(dir, "fleet-agent")
	build := exec.Command("go", "build", "-ldflags", "-s -w -X github.com/edgefleet/fleet/internal/version.Version=v0.9.2", "-o", binary, "./cmd/fleet-agent")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("building fleet-agent: %v\n%s", err, out)
	}
	raw, err := os.ReadFile(binary)
	if err != nil {
		b.Fatal(err)
	}
	rootPub, root, _ := release.GenerateKey()
	pub, key, _ := release.GenerateKey()
	cert, err := release.Certify(root, pub, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour), "bench")
	if err != nil {
		b.Fatal(err)
	}
	sum, size, _ := release.Digest(bytes.NewReader(raw))
	bundle, err := release.Sign(key, cert, release.Artifact{Name: release.AgentName, Version: "v0.9.2", OS: "linux", Arch: runtime.GOARCH,
		SHA256: sum, Size: size, Created: time.Now()})
	if err != nil {
		b.Fatal(err)
	}
	bundleJSON, _ := json.Marshal(bundle)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(raw) }))
	defer srv.Close()

	hub, err := load.StartHub(ctx, env.Client, load.HubOptions{Binary: bin, Dir: filepath.Join(dir, "hub"), Config: env.Config, Namespace: ns,
		Args: []string{"--enroll-rate", "1000", "--enroll-burst", "1000", "--proxy-bind-address", "0", "--release-cache-dir", filepath.Join(dir, "cache")}})
	if err != nil {
		b.Fatal(err)
	}
	defer hub.Stop()
	if err := env.Client.Create(ctx, &infrav1.EdgeAgentRelease{ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent-v0-9-2", Namespace: ns},
		Spec: infrav1.EdgeAgentReleaseSpec{Version: "v0.9.2", Artifacts: []infrav1.AgentArtifact{{Arch: runtime.GOARCH, URL: srv.URL + "/fleet-agent", Bundle: string(bundleJSON)}}}}); err != nil {
		b.Fatal(err)
	}
	// A hundred sites; hosts named in order fall on sites in turn, so a
	// wave spreads over them as an operator's selector would.
	agents, err := load.NewAgents(ctx, env.Client, hub, load.AgentOptions{N: n, Dir: filepath.Join(dir, "agents"), Sources: 1 + n/250, NamePrefix: ns,
		HostLabels: func(i int) map[string]string {
			return map[string]string{infrav1.ZoneLabel: fmt.Sprintf("site-%02d", i%100)}
		},
		Releases: &load.Releases{Roots: release.Roots{rootPub}, Installed: "v0.9.1"}})
	if err != nil {
		b.Fatal(err)
	}
	defer agents.Stop()
	logf("starting %d agents on v0.9.1", n)
	agents.Start(time.Duration(n) * 20 * time.Millisecond)
	if _, err := hub.WaitSessions(ctx, n, 15*time.Minute, nil); err != nil {
		b.Fatal(err)
	}
	hostsOn := func(version string) (on, able int, err error) {
		hosts := &infrav1.EdgeHostList{}
		if err := env.Client.List(ctx, hosts, client.InNamespace(ns)); err != nil {
			return 0, 0, err
		}
		for _, h := range hosts.Items {
			if h.Status.Facts.AgentVersion == version {
				on++
			}
			if h.Status.AgentRelease != nil {
				able++
			}
		}
		return on, able, nil
	}
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(2 * time.Second) {
		if _, able, err := hostsOn("v0.9.1"); err == nil && able == n {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("the agents' release status did not reach the hub in 5 minutes")
		}
	}
	time.Sleep(5 * time.Second)

	rssBefore, _ := hub.RSS()
	cpuBefore, _ := hub.CPU()
	m0, _ := hub.Metrics(ctx)
	canary := int32(1)
	wave := intstr.Parse(*rolloutWave)
	ro := &infrav1.EdgeAgentRollout{ObjectMeta: metav1.ObjectMeta{Name: "bench", Namespace: ns},
		Spec: infrav1.EdgeAgentRolloutSpec{Version: "v0.9.2", Canary: &canary, WaveSize: &wave, GroupBy: infrav1.ZoneLabel}}
	start := time.Now()
	if err := env.Client.Create(ctx, ro); err != nil {
		b.Fatal(err)
	}
	logf("roll-out created: %d hosts to v0.9.2 (%d bytes), waves of %s", n, size, *rolloutWave)
	var peakRSS int64
	minConnected := n
	lastLine, lastChange, shown := "", time.Now(), false
	for {
		if rss, err := hub.RSS(); err == nil && rss > peakRSS {
			peakRSS = rss
		}
		minConnected = min(minConnected, agents.Connected())
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(ro), ro); err != nil {
			b.Fatal(err)
		}
		line := fmt.Sprintf("%s, %d of %d on v0.9.2, wave %d", ro.Status.Phase, ro.Status.Updated, ro.Status.Hosts, ro.Status.CurrentWave)
		if line != lastLine {
			logf("%s", line)
			lastLine, lastChange, shown = line, time.Now(), false
		}
		if !shown && time.Since(lastChange) > 2*time.Minute {
			// Once per stall: what the hosts the roll-out waits for say.
			shown = true
			waitingFor(ctx, b, env.Client, agents, ns, "v0.9.2", logf)
		}
		if ro.Status.Phase == infrav1.AgentRolloutComplete {
			break
		}
		if ro.Status.Phase == infrav1.AgentRolloutFailed || time.Since(start) > 30*time.Minute {
			b.Fatalf("the roll-out stopped: %s; conditions %+v", line, ro.Status.Conditions)
		}
		time.Sleep(time.Second)
	}
	took := time.Since(start)
	cpuAfter, _ := hub.CPU()
	m1, _ := hub.Metrics(ctx)
	on, _, err := hostsOn("v0.9.2")
	if err != nil {
		b.Fatal(err)
	}
	connected := agents.Connected()
	logf("complete in %s: %d hosts on v0.9.2, %d connected", took.Round(time.Second), on, connected)

	rep := results.New(fmt.Sprintf("rollout-%05d", n), "rollout", fmt.Sprintf("An agent roll-out: %s agents to a new fleet-agent release in waves of %s", commas(n), *rolloutWave),
		fmt.Sprintf("go test ./bench -run '^$' -bench AgentRollout -benchtime 1x -timeout 60m -args -rollout-agents=%d -rollout-wave=%s", n, *rolloutWave))
	rep.Size = n
	rep.Add(results.Figure{Key: "rollout-s", Name: fmt.Sprintf("the whole roll-out, created to Complete (%s hosts)", commas(n)), Value: took.Seconds(), Unit: "s",
		Target: "≤ 600 s at 1,000", Limit: results.Limit(600), Below: true})
	rep.Add(results.Figure{Key: "hosts-on-new", Name: "hosts on the new release at the end", Value: float64(on), Unit: "hosts",
		Target: "all", Limit: results.Limit(float64(n))})
	rep.Add(results.Figure{Key: "agents-lost", Name: "agents not connected at the end", Value: float64(n - connected), Unit: "agents",
		Target: "0", Limit: results.Limit(0), Below: true})
	rep.Add(results.Figure{Key: "min-connected", Name: "fewest agents connected at once during the roll-out (each restarts into the release)", Value: float64(minConnected), Unit: "agents"})
	rep.Add(results.Figure{Key: "binary-bytes", Name: "the release binary (fleet-agent, -s -w)", Value: float64(size) / (1 << 20), Unit: "MiB"})
	rep.Add(results.Figure{Key: "hub-sent-mib", Name: "release bytes the hub sent (fleet_release_transfer_bytes_total)", Value: (m1["fleet_release_transfer_bytes_total"] - m0["fleet_release_transfer_bytes_total"]) / (1 << 20), Unit: "MiB"})
	rep.Add(results.Figure{Key: "hub-rate-mibs", Name: "mean rate the hub sent at (its bound: --release-bandwidth 64 MiB/s)", Value: (m1["fleet_release_transfer_bytes_total"] - m0["fleet_release_transfer_bytes_total"]) / (1 << 20) / took.Seconds(), Unit: "MiB/s"})
	rep.Add(results.Figure{Key: "hub-rss-before-mib", Name: "hub RSS before the roll-out", Value: float64(rssBefore) / (1 << 20), Unit: "MiB"})
	rep.Add(results.Figure{Key: "hub-rss-peak-mib", Name: "hub RSS at its peak during the roll-out (sampled every second)", Value: float64(peakRSS) / (1 << 20), Unit: "MiB"})
	rep.Add(results.Figure{Key: "hub-cpu-cores", Name: "hub CPU during the roll-out, mean", Value: (cpuAfter - cpuBefore).Seconds() / took.Seconds(), Unit: "cores"})
	rep.Add(results.Figure{Key: "hub-cpu-s", Name: "hub CPU during the roll-out, total", Value: (cpuAfter - cpuBefore).Seconds(), Unit: "s"})
	t := results.Table{Title: "Each wave, from the roll-out's status (second resolution)", Header: []string{"wave", "hosts", "updated", "failed", "took"}}
	for _, w := range ro.Status.Waves {
		took := "-"
		if w.StartTime != nil && w.CompletionTime != nil {
			took = w.CompletionTime.Sub(w.StartTime.Time).String()
		}
		t.Rows = append(t.Rows, []string{w.Name, fmt.Sprint(w.Hosts), fmt.Sprint(w.Updated), fmt.Sprint(w.Failed), took})
	}
	rep.Tables = append(rep.Tables, t)
	rep.Notes = append(rep.Notes, "The agents run in the benchmark's process (each with its own state directory, release store and session); "+
		"the release binary is the real fleet-agent, fetched once by the hub from an HTTP server and sent to every agent through its session; "+
		"each agent checks the signature and the whole binary, keeps it in its slot and restarts into it on trial (as the launcher would), "+
		"and commits once it has reached the hub again. The hub, the API server, etcd and the agents share this machine's cores.")
	if p, err := rep.Write(*resultsDir); err != nil {
		b.Fatal(err)
	} else {
		logf("results: %s", p)
	}
	if on != n || connected != n {
		b.Fatalf("%d of %d hosts on v0.9.2, %d connected", on, n, connected)
	}
}

// waitingFor logs, for a few hosts ordered to version but not on it yet,
// their release status and their agent's last log lines.
func waitingFor(ctx context.Context, b *testing.B, c client.Client, agents *load.Agents, ns, version string, logf func(string, ...any)) {
	hosts := &infrav1.EdgeHostList{}
	if err := c.List(ctx, hosts, client.InNamespace(ns)); err != nil {
		b.Logf("listing hosts: %v", err)
		return
	}
	index := map[string]int{}
	for i := range agents.Len() {
		index[agents.Name(i)] = i
	}
	shown := 0
	for _, h := range hosts.Items {
		o := infrav1.AgentReleaseOrderOf(&h)
		if o == nil || o.Version != version || h.Status.Facts.AgentVersion == version {
			continue
		}
		i, ok := index[h.Name]
		if !ok {
			continue
		}
		st, _ := json.Marshal(h.Status.AgentRelease)
		logf("waiting for host %s (order %+v): agentRelease %s; its agent's last lines:\n%s", h.Name, *o, st, agents.RecentLog(i))
		if shown++; shown == 3 {
			return
		}
	}
}
