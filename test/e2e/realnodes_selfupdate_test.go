package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/internal/testkit/testenv"
	"github.com/edgefleet/fleet/internal/testkit/testhost"
	"github.com/edgefleet/fleet/pkg/agent/selfupdate"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// Under real systemd, on a host booted from the edge image: the unit's
// fleet-agent (v0.9.1, the installed binary) becomes the release on trial
// (v0.9.2), which commits itself once it reaches the hub through the
// site's NAT; a release that exits at start is rolled back by systemd's
// restart of the unit and the launcher's rules, and the host is back on
// v0.9.2, connected.
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
	h := startRealHostWith(t, site, kit, testhost.HostOptions{}, name, hubURL, gw.CA().Pin(), cpToken)
	running := func(version string) {
		t.Helper()
		realEventually(t, "the host runs fleet-agent "+version+", connected", func() error {
			eh := &infrav1.EdgeHost{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, eh); err != nil {
				return err
			}
			if eh.Status.Facts.AgentVersion != version {
				return fmt.Errorf("agentVersion %q", eh.Status.Facts.AgentVersion)
			}
			return testenv.HostsAvailable(ctx, c, ns, 1)
		})
	}
	running("v0.9.1")

	store := selfupdate.Store{Dir: h.Root("var/lib/fleet-agent/releases")}
	s := newReleaseSigner(t)
	trial := func(binary []byte, version string) {
		t.Helper()
		art, err := store.Stage(strings.NewReader(string(binary)), s.bundle(t, binary, version), s.policy())
		must(t, err)
		must(t, store.BeginTrial(selfupdate.Slot{SHA256: art.SHA256, Version: version}, "", 3*time.Minute))
		// Not waited for: a broken release fails its start, and systemd
		// restarts the unit.
		if out, err := h.Command(ctx, "systemctl", "restart", "--no-block", "fleet-agent.service").CombinedOutput(); err != nil {
			t.Fatalf("restarting fleet-agent: %v: %s", err, out)
		}
	}
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

	b2, err := os.ReadFile(v2)
	must(t, err)
	trial(b2, "v0.9.2")
	result("v0.9.2", selfupdate.Committed)
	running("v0.9.2")
	// The unit's main process is the committed release (the launcher
	// became it), not a child of the installed binary.
	props, err := h.Show(ctx, "fleet-agent.service", "MainPID", "ActiveState")
	must(t, err)
	// MainPID is in the box's PID namespace: ask inside the box.
	out, _ := h.Command(ctx, "readlink", "/proc/"+props["MainPID"]+"/exe").Output()
	if exe := strings.TrimSpace(string(out)); !strings.Contains(exe, "/var/lib/fleet-agent/releases/slots/") || props["ActiveState"] != "active" {
		t.Errorf("fleet-agent.service: %v, main process runs %q", props, exe)
	}

	trial([]byte("#!/bin/sh\necho this release is broken >&2\nexit 1\n"), "v0.9.3")
	result("v0.9.3", selfupdate.RolledBack)
	running("v0.9.2")
	if log := h.UnitLog("fleet-agent.service"); !strings.Contains(log, "this release is broken") || !strings.Contains(log, "Rolled back a failed trial") {
		t.Errorf("the unit's log does not tell the roll-back:\n%s", log)
	}
}
