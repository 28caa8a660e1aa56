package agent_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgefleet/fleet/pkg/agent/agenttest"
	"github.com/edgefleet/fleet/pkg/agent/kubestage"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
)

func stagedArchive(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	for _, name := range []string{"kubeadm", "kubelet"} {
		body := "#!/bin/sh\n"
		if err := w.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		_, _ = w.Write([]byte(body))
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func hexSum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// The agent fetches the versions the hub orders staged, reports each
// fetch and the staged version, keeps a failed checksum from fetching the
// same archive again, backs off after a server error, and forgets
// versions no longer ordered.
func TestStageOrdersAreFetchedAndReported(t *testing.T) {
	ctx := context.Background()
	body := stagedArchive(t)
	var requests atomic.Int32
	var broken atomic.Bool
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if broken.Load() {
			http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
			return
		}
		http.ServeContent(w, r, "k.tar", time.Time{}, bytes.NewReader(body))
	}))
	defer ts.Close()

	stagingDir := t.TempDir()
	a := newTestAgent(t, t.TempDir(), &agenttest.Recorder{})
	a.UseUpgrader(&fakeUpgrader{running: "v1.35.4", stagingDir: stagingDir})
	a.UseStager(kubestage.New(kubestage.Options{Dir: stagingDir, FreeBytes: func(string) (int64, error) { return 1 << 40, nil }}))
	a.Apply(ctx, &wire.DesiredState{Generation: 1, Assignment: withVersion(assignment("u1"), "v1.35.4")})

	bad := wire.StageOrder{Version: "v1.36.3", URL: ts.URL + "/v1.36.3.tar", SHA256: hexSum([]byte("another archive"))}
	a.SetStage([]wire.StageOrder{bad})
	if wait := a.StageOrdered(ctx); wait != 0 {
		t.Errorf("a checksum mismatch is tried again in %s", wait)
	}
	st := a.CurrentStatus()
	if len(st.Staging) != 1 || st.Staging[0].State != infrav1.StagingFailed ||
		!strings.Contains(st.Staging[0].Message, "the archive's sha256 is "+hexSum(body)) || slices.Contains(st.Facts.KubernetesVersions, "v1.36.3") {
		t.Fatalf("after a mismatch: %+v, staged %v", st.Staging, st.Facts.KubernetesVersions)
	}
	a.StageOrdered(ctx)
	if n := requests.Load(); n != 1 {
		t.Errorf("the mismatched archive was fetched %d times", n)
	}

	good := bad
	good.SHA256 = hexSum(body)
	broken.Store(true)
	a.SetStage([]wire.StageOrder{good})
	if wait := a.StageOrdered(ctx); wait != 10*time.Second {
		t.Errorf("after a server error, tried again in %s, want 10s", wait)
	}
	if s := a.CurrentStatus().Staging; len(s) != 1 || s[0].State != infrav1.StagingDownloading ||
		!strings.Contains(s[0].Message, "503 Service Unavailable; trying again in 10s (attempt 2)") {
		t.Fatalf("after a server error: %+v", s)
	}
	if wait := a.StageOrdered(ctx); wait != 20*time.Second {
		t.Errorf("after a second server error, tried again in %s, want 20s", wait)
	}

	broken.Store(false)
	if wait := a.StageOrdered(ctx); wait != 0 {
		t.Errorf("staged, yet tried again in %s", wait)
	}
	st = a.CurrentStatus()
	if len(st.Staging) != 1 || st.Staging[0].State != infrav1.StagingStaged || st.Staging[0].Message != "" ||
		st.Staging[0].Bytes != int64(len(body)) || !slices.Contains(st.Facts.KubernetesVersions, "v1.36.3") {
		t.Fatalf("after staging: %+v, staged %v", st.Staging, st.Facts.KubernetesVersions)
	}
	before := requests.Load()
	a.StageOrdered(ctx)
	if requests.Load() != before {
		t.Error("a staged version was fetched again")
	}

	a.SetStage(nil)
	if s := a.CurrentStatus().Staging; len(s) != 0 {
		t.Errorf("versions no longer ordered still reported: %+v", s)
	}
}

// An agent that cannot upgrade does not fetch: nothing would use it.
func TestStageOrdersNeedAnUpgrader(t *testing.T) {
	var requests atomic.Int32
	ts := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { requests.Add(1) }))
	defer ts.Close()
	a := newTestAgent(t, t.TempDir(), &agenttest.Recorder{})
	a.UseStager(kubestage.New(kubestage.Options{Dir: t.TempDir()}))
	a.SetStage([]wire.StageOrder{{Version: "v1.36.3", URL: ts.URL, SHA256: hexSum(nil)}})
	if s := a.CurrentStatus().Staging; len(s) != 0 || requests.Load() != 0 {
		t.Errorf("an agent without an upgrader reports %+v and fetched %d times", s, requests.Load())
	}
}
