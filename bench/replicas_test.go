package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/bench/load"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

var replicaAgents = flag.Int("replica-agents", 1000, "Agents BenchmarkHubReplicas spreads over three hub replicas.")

// BenchmarkHubReplicas runs three fleet-hub replicas against one API
// server, leader election on, with N agents dialling them as through
// the gateway Service (load.Replicas), and measures:
//
//  1. the enrollment storm: N new agents at once, spread over the three;
//  2. a gateway replica's fail-over: the replica holding the most sessions
//     (not the leader) is killed; the time until its agents all hold
//     sessions on the others;
//  3. the leader's fail-over: the leader is killed; the time until another
//     replica leads (runs the reconcilers);
//  4. a rolling restart: each replica in turn stopped (SIGTERM) and
//     started again, as a Deployment's rolling update does; afterwards
//     every agent holds a session and no host was ever recorded
//     disconnected.
//
// One run (-benchtime 1x):
//
//	go test ./bench -run '^$' -bench HubReplicas -benchtime 1x -timeout 60m -args -replica-agents=1000
func BenchmarkHubReplicas(b *testing.B) {
	ctx := context.Background()
	n := *replicaAgents
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "[%s] replicas agents=%d: %s\n", time.Now().Format("15:04:05"), n, fmt.Sprintf(format, args...))
	}
	if _, err := load.RaiseFileLimit(); err != nil {
		b.Fatal(err)
	}
	bin := buildHub(b)
	dir := b.TempDir()
	ns := fmt.Sprintf("replicas-%d", time.Now().UnixNano()%100000)
	hubs, agents := replicasWithAgents(b, bin, dir, ns, []string{"hub-a", "hub-b", "hub-c"}, n)
	b.ResetTimer()

	agents.Start(0)
	took := mustWait(b, "the enrollment storm", func() error { return sessionsOn(ctx, hubs, n) })
	b.ReportMetric(took.Seconds(), "storm-s")
	logf("enrollment storm: %d agents on three replicas in %s (%s)", n, took.Round(100*time.Millisecond), spread(ctx, hubs))
	mustWait(b, "every host recorded connected", func() error { return allConnected(ctx, ns, n) })
	before := transitions(ctx, b, ns)

	// A gateway replica dies.
	leader := leading(ctx, hubs)
	var victim *load.Hub
	most := -1
	for _, h := range hubs {
		if s, _ := h.Sessions(ctx); h != leader && s > most {
			victim, most = h, s
		}
	}
	victim.Kill()
	survivors := without(hubs, victim)
	took = mustWait(b, "the killed replica's agents back", func() error { return sessionsOn(ctx, survivors, n) })
	b.ReportMetric(took.Seconds(), "gateway-failover-s")
	logf("gateway replica killed with %d sessions: all back on the others in %s (%s)", most, took.Round(100*time.Millisecond), spread(ctx, survivors))
	if err := restart(ctx, victim); err != nil {
		b.Fatal(err)
	}

	// The leader dies.
	leader.Kill()
	took = mustWait(b, "another replica leading", func() error {
		if l := leading(ctx, without(hubs, leader)); l == nil {
			return errors.New("no leader")
		}
		return nil
	})
	b.ReportMetric(took.Seconds(), "leader-failover-s")
	logf("leader killed: another replica leads after %s", took.Round(100*time.Millisecond))
	mustWait(b, "the leader's agents back", func() error { return sessionsOn(ctx, without(hubs, leader), n) })
	if err := restart(ctx, leader); err != nil {
		b.Fatal(err)
	}

	// A rolling restart of all three.
	start := time.Now()
	for _, h := range hubs {
		h.Terminate()
		mustWait(b, "the stopped replica's agents on the others", func() error { return sessionsOn(ctx, without(hubs, h), n) })
		if err := restart(ctx, h); err != nil {
			b.Fatal(err)
		}
	}
	took = time.Since(start)
	b.ReportMetric(took.Seconds(), "rolling-restart-s")
	mustWait(b, "every host recorded connected after the roll", func() error { return allConnected(ctx, ns, n) })
	after := transitions(ctx, b, ns)
	flapped := 0
	for name, at := range before {
		if !after[name].Equal(at) {
			flapped++
		}
	}
	b.ReportMetric(float64(flapped), "hosts-marked-disconnected")
	logf("rolling restart of 3 replicas in %s: %d sessions (%s), %d of %d hosts ever recorded disconnected",
		took.Round(time.Second), n, spread(ctx, hubs), flapped, len(before))
	if flapped > 0 {
		b.Errorf("%d hosts were recorded disconnected during the fail-overs and the roll", flapped)
	}
}

// replicasWithAgents starts a fleet-hub replica per name (leader election
// on) and n agents that dial them as through the gateway Service
// (load.Replicas); everything stops when the benchmark ends.
func replicasWithAgents(b *testing.B, bin, dir, ns string, names []string, n int) ([]*load.Hub, *load.Agents) {
	b.Helper()
	ctx := context.Background()
	var hubs []*load.Hub
	var gateways []string
	for _, name := range names {
		h, err := load.StartHub(ctx, env.Client, load.HubOptions{Binary: bin, Dir: filepath.Join(dir, name), Config: env.Config,
			Namespace: ns, Replica: name, Args: []string{"--enroll-rate", "1000", "--enroll-burst", "1000"}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(h.Stop)
		hubs = append(hubs, h)
		gateways = append(gateways, h.GatewayAddr)
	}
	agents, err := load.NewAgents(ctx, env.Client, hubs[0], load.AgentOptions{N: n, Dir: agentStateDir(b, dir), Sources: 1 + n/250,
		Replicas: load.NewReplicas(gateways...)})
	if err != nil {
		b.Fatal(err)
	}
	// Registered last, so it runs first: agents stop before their hubs.
	b.Cleanup(agents.Stop)
	return hubs, agents
}

// mustWait polls cond every 250 ms for up to 10 minutes and returns how
// long it took.
func mustWait(b *testing.B, what string, cond func() error) time.Duration {
	b.Helper()
	return mustWaitFor(b, what, 10*time.Minute, cond)
}

// mustWaitFor polls cond every 250 ms for up to limit and returns how
// long it took.
func mustWaitFor(b *testing.B, what string, limit time.Duration, cond func() error) time.Duration {
	b.Helper()
	start := time.Now()
	for {
		err := cond()
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			b.Fatalf("%s: not after %s: %v", what, limit, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// sessionsOn checks that hubs hold want sessions between them.
func sessionsOn(ctx context.Context, hubs []*load.Hub, want int) error {
	total := 0
	for _, h := range hubs {
		s, err := h.Sessions(ctx)
		if err != nil {
			return err
		}
		total += s
	}
	if total != want {
		return fmt.Errorf("%d sessions, want %d", total, want)
	}
	return nil
}

// spread says how many sessions each hub holds.
func spread(ctx context.Context, hubs []*load.Hub) string {
	var parts []string
	for _, h := range hubs {
		s, _ := h.Sessions(ctx)
		parts = append(parts, fmt.Sprintf("%s: %d", h.GatewayAddr, s))
	}
	return strings.Join(parts, ", ")
}

// leading is the hub that runs the reconcilers, or nil.
func leading(ctx context.Context, hubs []*load.Hub) *load.Hub {
	for _, h := range hubs {
		m, err := h.Metrics(ctx)
		if err != nil {
			continue
		}
		for k, v := range m {
			if strings.HasPrefix(k, "leader_election_master_status") && v == 1 {
				return h
			}
		}
	}
	return nil
}

func without(hubs []*load.Hub, gone *load.Hub) []*load.Hub {
	var out []*load.Hub
	for _, h := range hubs {
		if h != gone {
			out = append(out, h)
		}
	}
	return out
}

// restart starts a stopped hub again and waits until its gateway accepts
// connections.
func restart(ctx context.Context, h *load.Hub) error {
	if err := h.Restart(); err != nil {
		return err
	}
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if conn, err := net.DialTimeout("tcp", h.GatewayAddr, time.Second); err == nil {
			conn.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("hub at %s not listening 2 minutes after its restart", h.GatewayAddr)
}

// allConnected checks that want hosts of ns read AgentConnected True.
func allConnected(ctx context.Context, ns string, want int) error {
	hosts := &infrav1.EdgeHostList{}
	if err := env.Client.List(ctx, hosts, client.InNamespace(ns)); err != nil {
		return err
	}
	n := 0
	for i := range hosts.Items {
		if conditions.IsTrue(&hosts.Items[i], infrav1.AgentConnectedCondition) {
			n++
		}
	}
	if n != want {
		return fmt.Errorf("%d of %d hosts connected", n, want)
	}
	return nil
}

// transitions is when each host's AgentConnected last changed.
func transitions(ctx context.Context, b *testing.B, ns string) map[string]time.Time {
	b.Helper()
	hosts := &infrav1.EdgeHostList{}
	if err := env.Client.List(ctx, hosts, client.InNamespace(ns)); err != nil {
		b.Fatal(err)
	}
	out := map[string]time.Time{}
	for i := range hosts.Items {
		if c := conditions.Get(&hosts.Items[i], infrav1.AgentConnectedCondition); c != nil {
			out[hosts.Items[i].Name] = c.LastTransitionTime.Time
		}
	}
	return out
}
