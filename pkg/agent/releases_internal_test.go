package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/edgefleet/fleet/pkg/agent/selfupdate"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/release"
)

// A binary that arrives whole while the release worker waits out its
// back-off (its request failed, yet the hub's stream came) is staged
// at once, not when the back-off ends: a roll-out waited minutes for such
// hosts.
func TestAWholeBinaryEndsTheBackOff(t *testing.T) {
	defer func(d time.Duration) { releaseFirstRetry = d }(releaseFirstRetry)
	releaseFirstRetry = time.Hour

	bin := []byte("the next fleet-agent")
	sum := sha256.Sum256(bin)
	rootPub, rootKey, err := release.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	signPub, signKey, err := release.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	cert, err := release.Certify(rootKey, signPub, now.Add(-time.Hour), now.Add(time.Hour), "test")
	if err != nil {
		t.Fatal(err)
	}
	art := release.Artifact{Name: release.AgentName, Version: "v0.9.2", OS: runtime.GOOS, Arch: runtime.GOARCH,
		SHA256: hex.EncodeToString(sum[:]), Size: int64(len(bin)), Created: now}
	b, err := release.Sign(signKey, cert, art)
	if err != nil {
		t.Fatal(err)
	}
	bundle, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	a := New(Config{StateDir: dir, RootDir: t.TempDir(), Version: "v0.9.1"}, nil, logr.Discard())
	store := selfupdate.Store{Dir: filepath.Join(dir, "releases")}
	a.UseReleases(Releases{Store: store, Roots: release.Roots{rootPub}, Running: "v0.9.1"})
	a.attachRelease(func(any) error { return errors.New("the session closed under the request") })
	stopped := make(chan error, 1)
	go a.releaseWorker(t.Context(), func(err error) { stopped <- err })
	a.setRelease(&wire.AgentReleaseOrder{Version: art.Version, Bundle: bundle, SHA256: art.SHA256, Size: art.Size})

	// The request failed: the worker waits an hour before it asks again.
	deadline := time.After(30 * time.Second)
	for a.releaseStatus().Transfer == nil {
		select {
		case <-deadline:
			t.Fatal("the worker never reported the transfer")
		case <-time.After(10 * time.Millisecond):
		}
	}
	hub, agentEnd := net.Pipe()
	go a.receiveRelease(agentEnd, wire.MaxProtocol, &wire.ReleaseData{SHA256: art.SHA256, Size: art.Size})
	if _, err := hub.Write(bin); err != nil {
		t.Fatal(err)
	}
	_ = hub.Close()

	select {
	case err := <-stopped:
		if !errors.Is(err, ErrRestartForRelease) {
			t.Fatalf("the worker stopped with %v", err)
		}
	case <-deadline:
		t.Fatal("the whole binary waited for the back-off to end")
	}
	if tr, ok := store.Trial(); !ok || tr.Version != art.Version {
		t.Fatalf("no trial of %s staged: %+v", art.Version, tr)
	}
}
