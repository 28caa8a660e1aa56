package bench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/fleet/bench/load"
)

var (
	agentCounts = flag.String("agents", "1000,2000", "Comma-separated agent counts for BenchmarkIdleHub.")
	profileDir  = flag.String("profiles", "", "Where BenchmarkIdleHub saves the hub's heap and goroutine profiles at steady state.")
)

// BenchmarkIdleHub measures a real fleet-hub process holding N idle
// agents (real sessions over TLS websockets from this process): its
// memory per agent (RSS and Go heap above the empty hub), the time for N
// new agents to enroll and connect, and, after the hub is killed and
// restarted, the reconnect storm: time until all N are back and the hub's
// peak RSS meanwhile. One run per N (use -benchtime 1x).
//
//	make bench BENCH=IdleHub BENCH_FLAGS=-agents=1000,2000,5000,10000
func BenchmarkIdleHub(b *testing.B) {
	if _, err := load.RaiseFileLimit(); err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	bin := filepath.Join(dir, "fleet-hub")
	build := exec.Command("go", "build", "-o", bin, "./cmd/fleet-hub")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("building fleet-hub: %v\n%s", err, out)
	}
	for _, s := range strings.Split(*agentCounts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			b.Fatalf("-agents: %q", s)
		}
		b.Run(fmt.Sprintf("agents=%d", n), func(b *testing.B) {
			for range b.N {
				idleHub(b, bin, filepath.Join(dir, fmt.Sprintf("n%d", n)), n)
			}
		})
	}
}

func idleHub(b *testing.B, bin, dir string, n int) {
	ctx := context.Background()
	ns := fmt.Sprintf("load-%d-%d", n, time.Now().UnixNano()%100000)
	hub, err := load.StartHub(ctx, env.Client, load.HubOptions{Binary: bin, Dir: filepath.Join(dir, "hub"), Config: env.Config, Namespace: ns,
		Args: []string{"--enroll-rate", "1000", "--enroll-burst", "1000"}})
	if err != nil {
		b.Fatal(err)
	}
	defer hub.Stop()
	time.Sleep(5 * time.Second) // settle the empty hub
	rss0, heap0 := hubMemory(b, hub)

	agents, err := load.NewAgents(ctx, env.Client, hub, load.AgentOptions{N: n, Dir: filepath.Join(dir, "agents"), Sources: 1 + n/10000})
	if err != nil {
		b.Fatal(err)
	}
	defer agents.Stop()
	b.ResetTimer()
	agents.Start(0)
	enrollTook, err := hub.WaitSessions(ctx, n, 10*time.Minute, nil)
	if err != nil {
		b.Fatal(err)
	}
	time.Sleep(20 * time.Second) // the first status writes and reconciles settle
	rss1, heap1 := hubMemory(b, hub)
	if *profileDir != "" {
		saveProfiles(b, hub, filepath.Join(*profileDir, fmt.Sprintf("agents-%d", n)))
	}

	// Reconnect storm: the hub crashes and comes back under N agents that
	// hold identities.
	hub.Kill()
	if err := hub.Restart(); err != nil {
		b.Fatal(err)
	}
	var peak int64
	stormTook, err := hub.WaitSessions(ctx, n, 10*time.Minute, func(int, time.Duration) {
		if r, err := hub.RSS(); err == nil && r > peak {
			peak = r
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(rss1-rss0)/float64(n)/1024, "KiB-RSS/agent")
	b.ReportMetric(float64(heap1-heap0)/float64(n)/1024, "KiB-heap/agent")
	b.ReportMetric(float64(rss1)/(1<<20), "MiB-RSS-steady")
	b.ReportMetric(enrollTook.Seconds(), "s-enroll+connect")
	b.ReportMetric(stormTook.Seconds(), "s-reconnect-all")
	b.ReportMetric(float64(n)/stormTook.Seconds(), "reconnects/s")
	b.ReportMetric(float64(peak)/(1<<20), "MiB-RSS-peak-storm")
	fmt.Fprintf(os.Stderr, "idle hub, %d agents: empty hub RSS %d MiB heap %d MiB; with agents RSS %d MiB heap %d MiB; enroll+connect %s; reconnect storm %s, peak RSS %d MiB\n",
		n, rss0>>20, heap0>>20, rss1>>20, heap1>>20, enrollTook.Round(time.Millisecond), stormTook.Round(time.Millisecond), peak>>20)
}

func hubMemory(b *testing.B, hub *load.Hub) (rss, heap int64) {
	rss, err := hub.RSS()
	if err != nil {
		b.Fatal(err)
	}
	m, err := hub.Metrics(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	return rss, int64(m["go_memstats_heap_inuse_bytes"])
}

// saveProfiles fetches the hub's heap and goroutine profiles, for `go tool
// pprof`.
func saveProfiles(b *testing.B, hub *load.Hub, dir string) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	for _, p := range []string{"heap?gc=1", "goroutine"} {
		resp, err := http.Get(hub.PprofURL + "/" + p)
		if err != nil {
			b.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			b.Fatal(err)
		}
		name := strings.SplitN(p, "?", 2)[0] + ".pb.gz"
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
			b.Fatal(err)
		}
	}
}
