package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/internal/testkit/testenv"
	"github.com/edgefleet/fleet/internal/testkit/testhost"
	"github.com/edgefleet/fleet/pkg/agent/selfupdate"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/release"
)

// Under real systemd, on a host booted from the edge image behind a
// site's NAT, with the release roots in the image: a roll-out orders the
// unit's fleet-agent (v0.9.1, the installed binary) to v0.9.2; the agent
// fetches it through its session, and the release on trial becomes the
// unit's main process and commits once it reaches the hub. A roll-out of
// a release that exits at start fails the unit's start, systemd restarts
// it, the launcher rolls the trial back, the host is on v0.9.2, connected,
// and the roll-out stops.
func TestRealNodesAgentReleaseTrialUnderSystemd(t *testing.T) {
	ctx := context.Background()
	c := hub.Client
	kit := realKit(t)
	dir := t.TempDir()
	kit.agent = buildAgentVersion(t, dir, "v0.9.1")
	v2 := buildAgentVersion(t, dir, "v0.9.2")
	ns := newNamespace(t)
	const lan = "10.97.6"
	gw, _ := startFleetHubWithReach(t, ns, lan+".1")
	site, hubURL := startRealSite(t, "ar", lan, gw)
	cpToken, _ := roleTokens(t, ns)
	name := fmt.Sprintf("ar%d", os.Getpid()%100000)
	s := newReleaseSigner(t)
	h := startRealHostWith(t, site, kit, testhost.HostOptions{Files: map[string]string{
		"/usr/share/fleet-agent/release-roots": release.RootLine(s.roots[0], "e2e root") + "\n"}}, name, hubURL, gw.CA().Pin(), cpToken)
	running := func(version string) {
		t.Helper()
		realEventually(t, "the host runs fleet-agent "+version+", connected", func() error {
			eh := &infrav1.EdgeHost{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, eh); err != nil {
				return err
			}
			if eh.Status.Facts.AgentVersion != version || eh.Status.AgentRelease == nil {
				return fmt.Errorf("agentVersion %q, agentRelease %+v", eh.Status.Facts.AgentVersion, eh.Status.AgentRelease)
			}
			return testenv.HostsAvailable(ctx, c, ns, 1)
		})
	}
	running("v0.9.1")

	// The releases, served to the hub from here.
	b2, err := os.ReadFile(v2)
	must(t, err)
	broken := []byte("#!/bin/sh\necho this release is broken >&2\nexit 1\n")
	files := map[string][]byte{"/v0.9.2": b2, "/v0.9.3": broken}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(files[r.URL.Path]) }))
	t.Cleanup(srv.Close)
	for v, b := range map[string][]byte{"v0.9.2": b2, "v0.9.3": broken} {
		must(t, c.Create(ctx, &infrav1.EdgeAgentRelease{ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent-" + strings.ReplaceAll(v, ".", "-"), Namespace: ns},
			Spec: infrav1.EdgeAgentReleaseSpec{Version: v, Artifacts: []infrav1.AgentArtifact{{Arch: runtime.GOARCH, URL: srv.URL + "/" + v,
				Bundle: string(s.bundle(t, b, v))}}}}))
	}
	store := selfupdate.Store{Dir: h.Root("var/lib/fleet-agent/releases")}
	result := func(version, state string) {
		t.Helper()
		realEventually(t, "the trial of "+version+" "+state+", as the host and the hub see it", func() error {
			if r, ok := store.LastResult(); !ok || r.Version != version || r.State != state {
				return fmt.Errorf("last result on the host %+v", r)
			}
			h := &infrav1.EdgeHost{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, h); err != nil {
				return err
			}
			if r := h.Status.AgentRelease; r == nil || r.LastTrial == nil || r.LastTrial.Version != version || string(r.LastTrial.State) != state ||
				r.Committed != "v0.9.2" || (state == selfupdate.RolledBack && r.LastTrial.Reason == "") {
				return fmt.Errorf("status.agentRelease %+v", r)
			}
			return nil
		})
	}

	out, err := kubectlFleet(t, ns, "agent", "upgrade", "--version", "v0.9.2", "--name", "to-092", "--wait", "--timeout", "4m")
	if err != nil {
		t.Fatalf("agent upgrade --wait: %v\n%s", err, out)
	}
	result("v0.9.2", selfupdate.Committed)
	running("v0.9.2")
	// The unit's main process is the committed release (the launcher
	// became it), not a child of the installed binary.
	props, err := h.Show(ctx, "fleet-agent.service", "MainPID", "ActiveState")
	must(t, err)
	// MainPID is in the box's PID namespace: ask inside the box.
	exe, _ := h.Command(ctx, "readlink", "/proc/"+props["MainPID"]+"/exe").Output()
	if exe := strings.TrimSpace(string(exe)); !strings.Contains(exe, "/var/lib/fleet-agent/releases/slots/") || props["ActiveState"] != "active" {
		t.Errorf("fleet-agent.service: %v, main process runs %q", props, exe)
	}

	_, err = kubectlFleet(t, ns, "agent", "upgrade", "--version", "v0.9.3", "--name", "to-093")
	must(t, err)
	result("v0.9.3", selfupdate.RolledBack)
	stoppedBy(t, ns, "to-093", "rolled it back")
	running("v0.9.2")
	if log := h.UnitLog("fleet-agent.service"); !strings.Contains(log, "this release is broken") || !strings.Contains(log, "Rolled back a failed trial") {
		t.Errorf("the unit's log does not tell the roll-back:\n%s", log)
	}
}
