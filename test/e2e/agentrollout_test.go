package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/enrolltoken"
	"github.com/edgefleet/fleet/pkg/hub/delivery"
	"github.com/edgefleet/fleet/pkg/hub/enrollment"
	"github.com/edgefleet/fleet/pkg/hub/gateway"
	"github.com/edgefleet/fleet/pkg/hub/reconcilers/agentrollout"
	"github.com/edgefleet/fleet/pkg/release"
)

// Roll-outs of real agent processes, built from this source at three
// versions, driven by `kubectl fleet agent`: three hosts move in two waves
// (the canary's transfer cut by a power cut and resumed); an aborted
// roll-out moves its canary back; a release that exits at start is rolled
// back by the canary itself and stops its roll-out; a release signed by a
// key the hosts do not trust, and one below their version floor, are
// refused and stop theirs. No host is left offline, and only the canary
// of a failed roll-out ever tries its release.
func TestAgentRolloutInWaves(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	c := hub.Client
	addr := freeAddr(t)
	// A slow hub: the canary's transfer lasts long enough to be cut.
	gw, _ := startFleetHubWith(t, gateway.Options{Addr: addr, HubNamespace: ns,
		Releases: delivery.Options{CacheDir: t.TempDir(), BytesPerSecond: 2 << 20}})
	dir := t.TempDir()
	bins := map[string]string{}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, v := range []string{"v0.9.1", "v0.9.2", "v0.9.3"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := buildAgentVersion(t, dir, v)
			mu.Lock()
			bins[v] = b
			mu.Unlock()
		}()
	}
	simBin := build(t, dir, "./test/nodesim", "kubeadm")
	wg.Wait()
	signer := newReleaseSigner(t)
	roots := filepath.Join(dir, "release-roots")
	must(t, os.WriteFile(roots, []byte(release.RootLine(signer.roots[0], "e2e root")+"\n"), 0o644))

	// The release server the hub fetches binaries from.
	var filesMu sync.Mutex
	files := map[string][]byte{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		filesMu.Lock()
		b, ok := files[r.URL.Path]
		filesMu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(b)
	}))
	t.Cleanup(srv.Close)
	publish := func(version string, binary, bundle []byte) {
		t.Helper()
		name := "fleet-agent-" + strings.ReplaceAll(version, ".", "-")
		filesMu.Lock()
		files["/"+name] = binary
		filesMu.Unlock()
		must(t, c.Create(ctx, &infrav1.EdgeAgentRelease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: infrav1.EdgeAgentReleaseSpec{Version: version, Artifacts: []infrav1.AgentArtifact{{
				Arch: runtime.GOARCH, URL: srv.URL + "/" + name, Bundle: string(bundle)}}}}))
	}
	read := func(v string) []byte {
		b, err := os.ReadFile(bins[v])
		must(t, err)
		return b
	}
	publish("v0.9.2", read("v0.9.2"), signer.bundle(t, read("v0.9.2"), "v0.9.2"))
	// v0.9.3 raises the floor to v0.9.2 once committed.
	publish("v0.9.3", read("v0.9.3"), signer.bundleWithFloor(t, read("v0.9.3"), "v0.9.3", "v0.9.2"))
	broken := []byte("#!/bin/sh\necho this release is broken >&2\nexit 1\n")
	publish("v0.9.4", broken, signer.bundle(t, broken, "v0.9.4"))
	publish("v0.9.5", read("v0.9.3"), newReleaseSigner(t).bundle(t, read("v0.9.3"), "v0.9.5"))
	publish("v0.9.1", read("v0.9.1"), signer.bundle(t, read("v0.9.1"), "v0.9.1"))

	// Three hosts on v0.9.1: two at site-a, one at site-b.
	agents := map[string]*agentProc{}
	for i, zone := range []string{"site-a", "site-a", "site-b"} {
		tok, _, err := enrollment.CreateToken(ctx, c, ns, enrolltoken.Options{TTL: time.Hour, HostNamespace: ns,
			HostLabels: map[string]string{infrav1.ZoneLabel: zone}}, time.Now())
		must(t, err)
		name := fmt.Sprintf("upd-%d", i)
		agents[name] = startAgentWith(t, nil, name, bins["v0.9.1"], simBin, "https://"+addr, gw.CA().Pin(), tok, nil, "--release-roots", roots)
	}
	hostsOn := func(want map[string]string) {
		t.Helper()
		eventually(t, fmt.Sprintf("hosts on %v, connected", want), func() error {
			for name, version := range want {
				h := &infrav1.EdgeHost{}
				if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, h); err != nil {
					return err
				}
				if h.Status.Facts.AgentVersion != version || !isConnected(h) || h.Status.AgentRelease == nil {
					return fmt.Errorf("%s runs %q (connected %v, agentRelease %+v)", name, h.Status.Facts.AgentVersion, isConnected(h), h.Status.AgentRelease)
				}
			}
			return nil
		})
	}
	all := func(v string) map[string]string { return map[string]string{"upd-0": v, "upd-1": v, "upd-2": v} }
	hostsOn(all("v0.9.1"))

	// 1. Two waves, the canary's transfer cut mid-way.
	out, err := kubectlFleet(t, ns, "agent", "upgrade", "--version", "v0.9.2", "--name", "to-092", "--wave-size", "100%", "--max-unavailable", "1")
	must(t, err)
	if !strings.Contains(out, "edgeagentrollout/to-092 created: 3 hosts to fleet-agent v0.9.2") {
		t.Fatalf("agent upgrade printed:\n%s", out)
	}
	canary := agents["upd-0"]
	eventually(t, "the canary's transfer under way", func() error {
		h := &infrav1.EdgeHost{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "upd-0"}, h); err != nil {
			return err
		}
		if r := h.Status.AgentRelease; r == nil || r.Transfer == nil || r.Transfer.Bytes == 0 || r.Transfer.Bytes >= r.Transfer.TotalBytes {
			return fmt.Errorf("agentRelease %+v", r)
		}
		return nil
	})
	// A power cut: the agent dies at once, the partial binary stays.
	_ = canary.cmd.Process.Kill()
	_ = canary.cmd.Wait()
	canary.restart(t)
	waitRollout(t, ns, "to-092", infrav1.AgentRolloutComplete)
	hostsOn(all("v0.9.2"))
	if m := regexp.MustCompile(`Asking the hub for the ordered fleet-agent release.*"offset":([0-9]+)`).FindAllStringSubmatch(canary.log.String(), -1); len(m) < 2 ||
		mustAtoi(t, m[len(m)-1][1]) == 0 {
		t.Fatalf("the canary did not resume its transfer from where it was cut: %v\n%s", m, tail(canary.log.String(), 3000))
	}
	ro := rollout(t, ns, "to-092")
	if got := waveLine(ro); got != "canary:Succeeded:1/1 wave-1:Succeeded:2/2" {
		t.Fatalf("waves %s", got)
	}
	out, err = kubectlFleet(t, ns, "get", "rollouts")
	must(t, err)
	if !regexp.MustCompile(`to-092\s+v0.9.2\s+Complete\s+1\s+3\s+3\s`).MatchString(out) {
		t.Fatalf("get rollouts printed:\n%s", out)
	}
	out, err = kubectlFleet(t, ns, "describe", "rollout", "to-092")
	must(t, err)
	for _, want := range []string{`Phase:\s+Complete`, `canary\s+Succeeded\s+1/1`, `wave-1\s+Succeeded\s+2/2`, `Complete\s+True\s+Complete`} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Fatalf("describe rollout lacks %q:\n%s", want, out)
		}
	}
	t.Logf("kubectl fleet describe rollout to-092:\n%s", out)

	// 2. Abort after the canary moved: it goes back, the others never move.
	_, err = kubectlFleet(t, ns, "agent", "upgrade", "--version", "v0.9.3", "--name", "to-093", "--require-approval", "--wave-size", "100%")
	must(t, err)
	waitRollout(t, ns, "to-093", infrav1.AgentRolloutWaitingForApproval)
	hostsOn(map[string]string{"upd-0": "v0.9.3", "upd-1": "v0.9.2", "upd-2": "v0.9.2"})
	out, err = kubectlFleet(t, ns, "agent", "abort", "to-093", "--wait", "--timeout", "3m")
	must(t, err)
	hostsOn(all("v0.9.2"))
	if ro := rollout(t, ns, "to-093"); waveLine(ro) != "canary:Reverted:1/1 wave-1:Pending:0/2" {
		t.Fatalf("aborted roll-out's waves %s\n%s", waveLine(ro), out)
	}

	// 3. A release that exits at start: the canary rolls back by itself
	// and the roll-out stops; --wait fails and says why.
	out, err = kubectlFleet(t, ns, "agent", "upgrade", "--version", "v0.9.4", "--name", "to-094", "--wait", "--timeout", "4m")
	if err == nil || !strings.Contains(err.Error(), "Failed") || !strings.Contains(err.Error(), "upd-0 rolled it back") {
		t.Fatalf("upgrade --wait of a broken release: %v\n%s", err, out)
	}
	stoppedBy(t, ns, "to-094", "rolled it back")
	hostsOn(all("v0.9.2"))

	// 4. A release signed under a root the hosts do not hold, and 5. one
	// below the floor v0.9.3 raised: refused before anything runs.
	for _, c := range []struct{ name, version, reason string }{{"to-095", "v0.9.5", release.ReasonUntrusted}, {"to-091", "v0.9.1", release.ReasonBelowFloor}} {
		_, err = kubectlFleet(t, ns, "agent", "upgrade", "--version", c.version, "--name", c.name)
		must(t, err)
		stoppedBy(t, ns, c.name, "refused it ("+c.reason+")")
		hostsOn(all("v0.9.2"))
	}
	for name, a := range agents {
		if n := strings.Count(a.log.String(), "Starting a release on trial"); name != "upd-0" && n != 1 {
			t.Errorf("%s started %d trials, want 1 (v0.9.2 only)", name, n)
		}
	}
}

func waitRollout(t *testing.T, ns, name string, phase infrav1.AgentRolloutPhase) {
	t.Helper()
	eventually(t, "edgeagentrollout/"+name+" "+string(phase), func() error {
		ro := rollout(t, ns, name)
		if ro.Status.Phase != phase {
			return fmt.Errorf("phase %q, waves %s, conditions %+v", ro.Status.Phase, waveLine(ro), ro.Status.Conditions)
		}
		return nil
	})
}

// stoppedBy waits for a roll-out that failed in its canary wave for why.
func stoppedBy(t *testing.T, ns, name, why string) {
	t.Helper()
	waitRollout(t, ns, name, infrav1.AgentRolloutFailed)
	ro := rollout(t, ns, name)
	var cond *metav1.Condition
	for i := range ro.Status.Conditions {
		if ro.Status.Conditions[i].Type == agentrollout.ProgressingCondition {
			cond = &ro.Status.Conditions[i]
		}
	}
	if cond == nil || cond.Reason != agentrollout.ThresholdExceededReason || !strings.Contains(cond.Message, why) {
		t.Fatalf("edgeagentrollout/%s Progressing %+v, want %s and %q", name, cond, agentrollout.ThresholdExceededReason, why)
	}
	if got := waveLine(ro); !strings.HasPrefix(got, "canary:Failed:0/1") || strings.Contains(got, "Progressing") || strings.Contains(got, "Succeeded") {
		t.Fatalf("edgeagentrollout/%s waves %s", name, got)
	}
}

func rollout(t *testing.T, ns, name string) *infrav1.EdgeAgentRollout {
	t.Helper()
	ro := &infrav1.EdgeAgentRollout{}
	must(t, hub.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, ro))
	return ro
}

func waveLine(ro *infrav1.EdgeAgentRollout) string {
	var out []string
	for _, w := range ro.Status.Waves {
		out = append(out, fmt.Sprintf("%s:%s:%d/%d", w.Name, w.State, w.Updated, w.Planned))
	}
	return strings.Join(out, " ")
}

func isConnected(h *infrav1.EdgeHost) bool {
	for _, c := range h.Status.Conditions {
		if c.Type == infrav1.AgentConnectedCondition {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	must(t, err)
	return n
}
