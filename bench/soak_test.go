package bench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/bench/load"
	"github.com/edgefleet/fleet/pkg/hub/reconcilers/edgehost"
	"github.com/edgefleet/fleet/test/faults/results"
)

var (
	soakAgents  = flag.Int("soak-agents", 10000, "Simulated agents BenchmarkSoak runs.")
	soakFor     = flag.Duration("soak-duration", time.Hour, "How long BenchmarkSoak runs its churn.")
	soakChurn   = flag.Float64("soak-churn", 0.01, "Share of the agents BenchmarkSoak restarts every minute.")
	soakReplica = flag.Duration("soak-replica-restart", 10*time.Minute, "How often BenchmarkSoak restarts a hub replica (SIGTERM, as a rolling update).")
	soakResults = flag.String("soak-results", "", "Directory BenchmarkSoak writes its record to (make soak: docs/reliability).")
)

// BenchmarkSoak runs two fleet-hub replicas (leader election on), reached as
// through the gateway Service, with N simulated agents for a long while: every minute a share
// of the agents restarts (a new session each), every few minutes a
// replica is stopped and started again, one after the other. It samples,
// every minute and over both replicas, the resident memory, the live heap
// (after a forced GC), the goroutines and the sessions; once the churn stops, every agent
// must hold exactly one session (none leaked), every host read as
// connected, and none have been marked ContactLost. The heap and the goroutines must not grow by more than 5 %
// from the first sample at or after a sixth of the run (minute 10 of an
// hour) to the last.
//
//	go test ./bench -run '^$' -bench Soak -benchtime 1x -timeout 120m -args -soak-agents=10000 -soak-duration=1h
func BenchmarkSoak(b *testing.B) {
	ctx := context.Background()
	n := *soakAgents
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "[%s] soak agents=%d: %s\n", time.Now().Format("15:04:05"), n, fmt.Sprintf(format, args...))
	}
	limit, err := load.RaiseFileLimit()
	if err != nil {
		b.Fatal(err)
	}
	// This process holds each agent's socket.
	if need := uint64(n + 2000); limit < need {
		b.Fatalf("%d agents need about %d open files in this process; the limit is %d (ulimit -n; raise it, or run as root)", n, need, limit)
	}
	bin := buildHub(b)
	dir := b.TempDir()
	ns := fmt.Sprintf("soak-%d", time.Now().UnixNano()%100000)
	hubs, agents := replicasWithAgents(b, bin, dir, ns, []string{"hub-a", "hub-b"}, n)
	b.ResetTimer()

	agents.Start(0)
	// The first connection is an enrollment: on two cores the API server
	// takes 15–20 a second (docs/PERFORMANCE.md).
	enrolling := max(10*time.Minute, time.Duration(n)*100*time.Millisecond)
	took := mustWaitFor(b, "every agent enrolled and connected", enrolling, func() error { return sessionsOn(ctx, hubs, n) })
	logf("%d agents connected in %s (%s)", n, took.Round(time.Second), spread(ctx, hubs))
	mustWaitFor(b, "every host recorded connected", enrolling, func() error { return allConnected(ctx, ns, n) })

	rec := results.Soak{When: time.Now().UTC().Truncate(time.Second), Agents: n, Replicas: len(hubs), HeapMeasure: results.LiveHeap,
		ChurnPerMinute: int(float64(n) * *soakChurn), ReplicaRestartMinutes: soakReplica.Minutes(),
		Command: fmt.Sprintf("go test ./bench -run '^$' -bench Soak -benchtime 1x -timeout 0 -args -soak-agents=%d -soak-duration=%s -soak-churn=%g -soak-replica-restart=%s",
			n, *soakFor, *soakChurn, *soakReplica)}
	rng := rand.New(rand.NewPCG(1, 2)) //nolint:gosec // which agents restart, not a secret
	start := time.Now()
	sample := func() {
		s := results.SoakSample{Minute: time.Since(start).Minutes()}
		for _, h := range hubs {
			if rss, err := h.RSS(); err == nil {
				s.RSSBytes += rss
			}
			// The heap in use between collections carries the garbage of
			// whatever ran last (a scrape 4 s before reads 10 % more): a
			// leak shows in the live heap.
			if err := forceGC(ctx, h.PprofURL); err != nil {
				logf("forcing a GC on %s: %v", h.GatewayAddr, err)
			}
			m, err := h.Metrics(ctx)
			if err != nil {
				continue
			}
			s.HeapBytes += int64(m["go_memstats_heap_alloc_bytes"])
			s.Goroutines += int(m["go_goroutines"])
			s.Sessions += int(m["fleet_gateway_connected_agents"])
		}
		rec.Samples = append(rec.Samples, s)
		logf("minute %.0f: RSS %.1f MiB, live heap %.1f MiB, %d goroutines, %d sessions (%s)", s.Minute,
			float64(s.RSSBytes)/(1<<20), float64(s.HeapBytes)/(1<<20), s.Goroutines, s.Sessions, spread(ctx, hubs))
	}
	sample()
	nextReplica, turn := *soakReplica, 0
	for minute := 1; time.Duration(minute)*time.Minute <= *soakFor; minute++ {
		time.Sleep(time.Until(start.Add(time.Duration(minute) * time.Minute)))
		// Not in the last minute: the final sample would catch the
		// replica's agents in the middle of moving.
		if at := time.Duration(minute) * time.Minute; at >= nextReplica && at < *soakFor {
			// Sampled before the restart: the replica's memory is then
			// what the churn left it.
			sample()
			h := hubs[turn%len(hubs)]
			turn++
			h.Terminate()
			if err := restart(ctx, h); err != nil {
				b.Fatal(err)
			}
			logf("restarted replica %s", h.GatewayAddr)
			nextReplica += *soakReplica
		} else {
			sample()
		}
		// No churn after the last minute's sample: the end sample must
		// find the hub as every other one does, a minute after a churn,
		// not amid the garbage of 1 % of its sessions torn down and made.
		if time.Duration(minute)*time.Minute >= *soakFor {
			break
		}
		var wg sync.WaitGroup
		for _, i := range rng.Perm(n)[:rec.ChurnPerMinute] {
			wg.Go(func() { agents.Restart(i) })
		}
		wg.Wait()
	}
	rec.Minutes = time.Since(start).Minutes()
	mustWait(b, "every agent connected once the churn stopped", func() error { return sessionsOn(ctx, hubs, n) })
	mustWait(b, "every host recorded connected once the churn stopped", func() error { return allConnected(ctx, ns, n) })
	sample()
	last := rec.Samples[len(rec.Samples)-1]
	rec.LeakedSessions = last.Sessions - agents.Connected()
	rec.FromMinute = soakFor.Minutes() / 6
	var from results.SoakSample
	for _, s := range rec.Samples {
		if s.Minute >= rec.FromMinute {
			from = s
			break
		}
	}
	growth := func(a, b float64) float64 { return (b - a) / a }
	rec.HeapGrowth = growth(float64(from.HeapBytes), float64(last.HeapBytes))
	rec.GoroutinesGrowth = growth(float64(from.Goroutines), float64(last.Goroutines))
	rec.RSSGrowth = growth(float64(from.RSSBytes), float64(last.RSSBytes))
	if rec.LeakedSessions != 0 {
		rec.Violations = append(rec.Violations, fmt.Sprintf("%d sessions leaked", rec.LeakedSessions))
	}
	// Every agent was connected but for its restarts: a host marked
	// ContactLost lost its status (its lastSeenTime went unrefreshed).
	lost, err := contactLost(ctx, ns)
	if err != nil {
		b.Fatal(err)
	}
	rec.ContactLost = ptr.To(len(lost))
	if len(lost) > 0 {
		rec.Violations = append(rec.Violations, fmt.Sprintf("%d hosts marked ContactLost while their agents were connected: %s",
			len(lost), strings.Join(lost[:min(len(lost), 5)], ", ")))
	}
	if rec.HeapGrowth > 0.05 || rec.GoroutinesGrowth > 0.05 {
		rec.Violations = append(rec.Violations, fmt.Sprintf("from minute %.0f to the end the heap grew %.1f %% and the goroutines %.1f %% (at most 5 %%)",
			from.Minute, 100*rec.HeapGrowth, 100*rec.GoroutinesGrowth))
	}
	b.ReportMetric(100*rec.HeapGrowth, "heap-growth-%")
	b.ReportMetric(100*rec.GoroutinesGrowth, "goroutines-growth-%")
	b.ReportMetric(float64(rec.LeakedSessions), "leaked-sessions")
	logf("from minute %.0f to %.0f: heap %+.1f %%, goroutines %+.1f %%, RSS %+.1f %%; %d sessions leaked; %d hosts marked ContactLost",
		from.Minute, last.Minute, 100*rec.HeapGrowth, 100*rec.GoroutinesGrowth, 100*rec.RSSGrowth, rec.LeakedSessions, len(lost))
	if *soakResults != "" {
		if err := results.WriteSoak(*soakResults, rec); err != nil {
			b.Fatal(err)
		}
	}
	for _, v := range rec.Violations {
		b.Error(v)
	}
}

// contactLost names the hosts of ns that the EdgeHost reconciler marked
// ContactLost (its events say so).
func contactLost(ctx context.Context, ns string) ([]string, error) {
	list := &eventsv1.EventList{}
	if err := env.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("listing the soak's events: %w", err)
	}
	seen := map[string]bool{}
	var hosts []string
	for _, e := range list.Items {
		if e.Reason == edgehost.ContactLostReason && !seen[e.Regarding.Name] {
			seen[e.Regarding.Name] = true
			hosts = append(hosts, e.Regarding.Name)
		}
	}
	sort.Strings(hosts)
	return hosts, nil
}

// forceGC has the hub collect its garbage (its pprof heap endpoint runs a
// GC first), so that its metrics then show the live heap.
func forceGC(ctx context.Context, pprofURL string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, pprofURL+"/heap?gc=1", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}
