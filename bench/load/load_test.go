package load

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/internal/testkit/testenv"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// The load driver's smoke run, in make test so it cannot rot: 50 agents
// over 5 loopback sources connect to a real fleet-hub process, cost the hub
// one goroutine each once idle, survive a hub crash and restart, and no
// agent enrolls twice.
func TestSmoke(t *testing.T) {
	ctx := context.Background()
	env, err := testenv.Start(ctx, testenv.Options{APIServerOnly: true})
	if err != nil {
		if errors.Is(err, testenv.ErrNoAssets) && os.Getenv("CI") != "true" {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	if _, err := RaiseFileLimit(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "fleet-hub")
	build := exec.Command("go", "build", "-o", bin, "./cmd/fleet-hub")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building fleet-hub: %v\n%s", err, out)
	}
	hub, err := StartHub(ctx, env.Client, HubOptions{Binary: bin, Dir: filepath.Join(dir, "hub"), Config: env.Config, Namespace: "fleet-load"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hub.Stop)
	const n = 50
	agents, err := NewAgents(ctx, env.Client, hub, AgentOptions{N: n, Dir: filepath.Join(dir, "agents"), Sources: 5})
	if err != nil {
		t.Fatal(err)
	}
	agents.Start(0)
	t.Cleanup(agents.Stop)
	if _, err := hub.WaitSessions(ctx, n, 2*time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	waitConnected(ctx, t, env.Client, n)
	// An idle session is the mux's goroutine alone (hashicorp/yamux's
	// server cost three), once the handlers that recorded the connections
	// are gone, and it waits on the socket, not inside the TLS read path
	// whose depth would keep its stack at 4-8 KiB.
	deadline := time.Now().Add(time.Minute)
	for {
		dump, err := goroutineDump(hub)
		if err != nil {
			t.Fatal(err)
		}
		got, shallow := sessionGoroutines(dump), shallowWaiters(dump)
		if got <= n && shallow == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hub runs %d goroutines for %d idle sessions, want one each, %d of them waiting on the socket outside crypto/tls, want all; its goroutines:\n%s", got, n, shallow, dump)
		}
		time.Sleep(500 * time.Millisecond)
	}

	hub.Kill()
	if err := hub.Restart(); err != nil {
		t.Fatal(err)
	}
	if _, err := hub.WaitSessions(ctx, n, 2*time.Minute, nil); err != nil {
		t.Fatalf("after a hub restart: %v", err)
	}
	ended := 0
	for _, c := range agents.Disconnects.Since(nil) {
		ended += c.N
	}
	if ended < n {
		t.Errorf("agents' session ends counted %d, want at least %d (the kill ended every session): %v", ended, n, agents.Disconnects.Since(nil))
	}
	waitConnected(ctx, t, env.Client, n)
	hosts := &infrav1.EdgeHostList{}
	if err := env.Client.List(ctx, hosts, client.InNamespace("fleet-load")); err != nil {
		t.Fatal(err)
	}
	if len(hosts.Items) != n {
		t.Errorf("%d EdgeHosts for %d agents: some enrolled twice", len(hosts.Items), n)
	}
	fmt.Fprintf(os.Stderr, "smoke: %d agents connected, survived a hub restart\n", n)
}

// goroutineDump is the hub's goroutine profile, grouped by stack.
func goroutineDump(h *Hub) (string, error) {
	resp, err := http.Get(h.PprofURL + "/goroutine?debug=1")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// sessionGoroutines counts, in a debug=1 goroutine dump, the goroutines
// that serve agent sessions: any whose stack runs through the session
// transport or a session's own code (not the shared push workers).
func sessionGoroutines(dump string) int {
	return countGoroutines(dump, func(stack string) bool {
		return strings.Contains(stack, "fleet/pkg/transport") || strings.Contains(stack, "hashicorp/yamux") ||
			strings.Contains(stack, "gateway.(*session)") || strings.Contains(stack, "gateway.(*Server).serveConnect")
	})
}

// shallowWaiters counts, in a debug=1 goroutine dump, the session
// goroutines parked on the socket by transport.HubConn.WaitReadable, not
// inside crypto/tls.
func shallowWaiters(dump string) int {
	return countGoroutines(dump, func(stack string) bool {
		return strings.Contains(stack, "transport.(*HubConn).WaitReadable") && !strings.Contains(stack, "crypto/tls")
	})
}

// countGoroutines adds up the goroutines of a debug=1 dump's stacks that
// match: each stack is a record "N @ pc…" and its frames (the dump's first
// record follows a "goroutine profile: total T" line).
func countGoroutines(dump string, match func(stack string) bool) int {
	total := 0
	for _, rec := range strings.Split(dump, "\n\n") {
		rec = strings.TrimPrefix(rec, "goroutine profile: ")
		if i := strings.Index(rec, "\n"); i >= 0 && strings.HasPrefix(rec, "total ") {
			rec = rec[i+1:]
		}
		var n int
		if _, err := fmt.Sscanf(rec, "%d @", &n); err != nil {
			continue
		}
		if match(rec) {
			total += n
		}
	}
	return total
}

// waitConnected waits until n hosts read AgentConnected.
func waitConnected(ctx context.Context, t *testing.T, c client.Client, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		got, err := Connected(ctx, c, "fleet-load")
		if err == nil && got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d hosts AgentConnected (%v)", got, n, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// Reasons count alike reasons together: addresses and numbers are
// blanked.
func TestReasonsCountAlikeTogether(t *testing.T) {
	var r Reasons
	before := r.Snapshot()
	var kept recentLog
	log := agentSink{reasons: &r, log: &kept}.logger()
	log.Info("Disconnected from hub, retrying", "reason", "connecting to hub: read tcp 127.0.0.2:41234->127.0.0.1:7443: i/o timeout", "retryIn", "1s")
	log.Info("Disconnected from hub, retrying", "reason", "connecting to hub: read tcp 127.0.0.3:5012->127.0.0.1:7443: i/o timeout")
	log.Info("Disconnected from hub, retrying", "reason", "hub busy, asked to retry in 2s")
	log.Info("Connected to hub", "reason", "not a disconnection")
	got := r.Since(before)
	want := []Count{{"connecting to hub: read tcp ADDR->ADDR: i/o timeout", 2}, {"hub busy, asked to retry in Ns", 1}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if lines := strings.Split(strings.TrimSpace(kept.String()), "\n"); len(lines) != 4 || !strings.Contains(lines[3], `Connected to hub reason="not a disconnection"`) {
		t.Errorf("kept log:\n%s", kept.String())
	}
}

// An agent's log keeps its last lines, oldest first.
func TestRecentLogKeepsTheLastLines(t *testing.T) {
	var l recentLog
	log := agentSink{reasons: &Reasons{}, log: &l}.logger().WithValues("host", "h1")
	for i := range recentLines + 3 {
		log.Info("line", "i", i)
	}
	log.Error(errors.New("boom"), "failed")
	lines := strings.Split(strings.TrimSpace(l.String()), "\n")
	if len(lines) != recentLines || !strings.Contains(lines[0], `line host="h1" i="4"`) || !strings.Contains(lines[recentLines-1], `failed error="boom" host="h1"`) {
		t.Errorf("kept %d lines:\n%s", len(lines), l.String())
	}
}

// Agents start one token at a time in turn, each exactly once.
func TestStartOrderTakesTokensInTurn(t *testing.T) {
	a := &Agents{edges: make([]*edge, 5), perToken: 2}
	if got, want := fmt.Sprint(a.startOrder()), "[0 2 4 1 3]"; got != want {
		t.Errorf("start order %s, want %s", got, want)
	}
}

// The dump's first record, behind its header line, counts like the others
// (the smoke test's goroutine check once read 0 for every dump).
func TestCountGoroutines(t *testing.T) {
	dump := "goroutine profile: total 53\n50 @ 0x1 0x2\n#\t0x1\tgithub.com/edgefleet/fleet/pkg/transport.(*HubConn).WaitReadable+0xe8\n\n" +
		"3 @ 0x3\n#\t0x3\tcrypto/tls.(*Conn).Read+0x1\n#\t0x4\tgithub.com/edgefleet/fleet/pkg/transport.(*HubConn).Read+0x1\n\n1 @ 0x5\n#\t0x5\tmain.main\n"
	if got := sessionGoroutines(dump); got != 53 {
		t.Errorf("session goroutines %d, want 53", got)
	}
	if got := shallowWaiters(dump); got != 50 {
		t.Errorf("shallow waiters %d, want 50", got)
	}
}
