package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/internal/testkit/testenv"
	"github.com/edgefleet/fleet/pkg/agent/selfupdate"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/enrolltoken"
	"github.com/edgefleet/fleet/pkg/hub/enrollment"
	"github.com/edgefleet/fleet/pkg/release"
)

// A new agent release runs on trial and commits itself once it has
// reached the hub; a release that exits at start, or runs but never
// reaches the hub, is rolled back by the agent's own launcher, and the
// host is back on its committed release, connected. Real agent processes
// built from this source at two versions, without systemd (the launcher
// supervises the agent).
func TestAgentReleaseTrialCommitsOrRollsBack(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	c := hub.Client
	addr := freeAddr(t)
	gw, _ := startFleetHub(t, ns, addr)
	dir := t.TempDir()
	v1 := buildAgentVersion(t, dir, "v0.9.1")
	v2 := buildAgentVersion(t, dir, "v0.9.2")
	_, simBin := buildBinaries(t)
	tok, _, err := enrollment.CreateToken(ctx, c, ns, enrolltoken.Options{TTL: time.Hour, HostNamespace: ns}, time.Now())
	must(t, err)
	a := startAgent(t, "upd-0", v1, simBin, "https://"+addr, gw.CA().Pin(), tok, nil)
	running := func(version string) {
		t.Helper()
		eventually(t, "the host runs fleet-agent "+version+", connected", func() error {
			h := &infrav1.EdgeHost{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "upd-0"}, h); err != nil {
				return err
			}
			if h.Status.Facts.AgentVersion != version {
				return fmt.Errorf("agentVersion %q", h.Status.Facts.AgentVersion)
			}
			return testenv.HostsAvailable(ctx, c, ns, 1)
		})
	}
	running("v0.9.1")

	store := selfupdate.Store{Dir: filepath.Join(a.root, "var/lib/fleet-agent/releases")}
	s := newReleaseSigner(t)
	trial := func(binary []byte, version string, within time.Duration) {
		t.Helper()
		art, err := store.Stage(bytes.NewReader(binary), s.bundle(t, binary, version), s.policy())
		must(t, err)
		must(t, store.BeginTrial(selfupdate.Slot{SHA256: art.SHA256, Version: version}, "", within))
		a.stop(t)
		a.restart(t)
	}
	result := func(version, state, reason string) {
		t.Helper()
		eventually(t, "the trial of "+version+" "+state+", as the host and the hub see it", func() error {
			if r, ok := store.LastResult(); !ok || r.Version != version || r.State != state {
				return fmt.Errorf("last result on the host %+v", r)
			}
			h := &infrav1.EdgeHost{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "upd-0"}, h); err != nil {
				return err
			}
			if r := h.Status.AgentRelease; r == nil || r.LastTrial == nil || r.LastTrial.Version != version || string(r.LastTrial.State) != state ||
				r.Committed != "v0.9.2" || !strings.Contains(r.LastTrial.Reason, reason) {
				return fmt.Errorf("status.agentRelease %+v", r)
			}
			return nil
		})
	}

	// 1. A good release commits itself.
	b2, err := os.ReadFile(v2)
	must(t, err)
	trial(b2, "v0.9.2", 2*time.Minute)
	result("v0.9.2", selfupdate.Committed, "")
	running("v0.9.2")

	// 2. A release that exits at start is rolled back to v0.9.2.
	trial([]byte("#!/bin/sh\necho this release is broken >&2\nexit 1\n"), "v0.9.3", 2*time.Minute)
	result("v0.9.3", selfupdate.RolledBack, "stopped before it committed")
	running("v0.9.2")

	// 3. A release that runs but never reaches the hub is stopped at its
	// deadline and rolled back.
	trial([]byte("#!/bin/sh\nexec sleep 600\n"), "v0.9.4", 5*time.Second)
	result("v0.9.4", selfupdate.RolledBack, "did not reach the hub")
	running("v0.9.2")
	if cur, _ := store.Current(); cur.Version != "v0.9.2" {
		t.Errorf("committed release %+v, want v0.9.2", cur)
	}
	if !strings.Contains(a.log.String(), "Rolled back a failed trial") {
		t.Errorf("the launcher did not say it rolled back:\n%s", tail(a.log.String(), 3000))
	}
}

func buildAgentVersion(t *testing.T, dir, version string) string {
	t.Helper()
	out := filepath.Join(dir, "fleet-agent-"+version)
	cmd := exec.Command("go", "build", "-ldflags", "-s -w -X github.com/edgefleet/fleet/internal/version.Version="+version, "-o", out, "./cmd/fleet-agent")
	cmd.Dir = filepath.Join("..", "..")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building fleet-agent %s: %v\n%s", version, err, b)
	}
	return out
}

type releaseSigner struct {
	roots release.Roots
	sign  func(binary []byte, version, minVersion string) (*release.Bundle, error)
}

func newReleaseSigner(t *testing.T) releaseSigner {
	t.Helper()
	rootPub, root, _ := release.GenerateKey()
	pub, key, _ := release.GenerateKey()
	cert, err := release.Certify(root, pub, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour), "e2e")
	must(t, err)
	return releaseSigner{roots: release.Roots{rootPub}, sign: func(binary []byte, version, minVersion string) (*release.Bundle, error) {
		sum, size, _ := release.Digest(bytes.NewReader(binary))
		return release.Sign(key, cert, release.Artifact{Name: release.AgentName, Version: version, OS: "linux", Arch: runtime.GOARCH,
			SHA256: sum, Size: size, MinVersion: minVersion, Created: time.Now()})
	}}
}

func (s releaseSigner) bundle(t *testing.T, binary []byte, version string) []byte {
	t.Helper()
	return s.bundleWithFloor(t, binary, version, "")
}

// bundleWithFloor signs a release that raises the hosts' version floor to
// minVersion once they commit it.
func (s releaseSigner) bundleWithFloor(t *testing.T, binary []byte, version, minVersion string) []byte {
	t.Helper()
	b, err := s.sign(binary, version, minVersion)
	must(t, err)
	raw, err := json.Marshal(b)
	must(t, err)
	return raw
}

func (s releaseSigner) policy() release.Policy {
	return release.Policy{Roots: s.roots, OS: "linux", Arch: runtime.GOARCH, Now: time.Now()}
}
