package gateway_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/pkg/agent"
	"github.com/edgefleet/fleet/pkg/agent/kubestage"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/enrolltoken"
	"github.com/edgefleet/fleet/pkg/hub/delivery"
)

// stagingUpgrader is an upgrader whose staged versions are what is in its
// directory; it upgrades nothing.
type stagingUpgrader struct{ dir string }

func (u stagingUpgrader) Running(context.Context) (string, error) { return "v1.35.4", nil }
func (u stagingUpgrader) Staged() []string {
	var out []string
	entries, _ := os.ReadDir(u.dir)
	for _, e := range entries {
		if kubestage.Complete(u.dir, e.Name()) == nil {
			out = append(out, e.Name())
		}
	}
	return out
}
func (u stagingUpgrader) Upgrade(context.Context, string, string, []byte, func(string)) error {
	return fmt.Errorf("not in this test")
}
func (u stagingUpgrader) Interrupted(context.Context, func(string)) (string, string, error) {
	return "", "", nil
}
func (u stagingUpgrader) Install(context.Context, string, func(string)) error {
	return fmt.Errorf("not in this test")
}

// versionArchive is a version's archive whose binaries are size bytes
// each (0: 10 KB).
func versionArchive(t *testing.T, size int) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	for _, name := range []string{"kubeadm", "kubelet"} {
		body := strings.Repeat("#!/bin/sh\n", max(size/10, 1000))
		must(t, w.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(body)), Typeflag: tar.TypeReg}))
		_, _ = w.Write([]byte(body))
	}
	must(t, w.Close())
	return buf.Bytes()
}

// stagingHost serves body (counting the fetches) and starts the agent of
// host "till", which stages versions under its root, fetching them itself
// or taking them from the hub; it returns once the host is connected.
func stagingHost(t *testing.T, ns string, h *hub, body []byte, fromHub bool) (*edge, *httptest.Server, *atomic.Int32) {
	t.Helper()
	fetches := &atomic.Int32{}
	files := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		http.ServeContent(w, r, "k.tar", time.Time{}, bytes.NewReader(body))
	}))
	t.Cleanup(files.Close)
	e := newEdge(t, "till", h.url, h.srv.CA().Pin(), newToken(t, ns, enrolltoken.Options{}))
	dir := filepath.Join(e.cfg.RootDir, "opt", "fleet", "kubernetes")
	e.upgrader = stagingUpgrader{dir: dir}
	if fromHub {
		e.stagerFor = func(a *agent.Agent) agent.Stager {
			return kubestage.New(kubestage.Options{Dir: dir, Hub: a.ArchivesFromHub()})
		}
	} else {
		e.stager = kubestage.New(kubestage.Options{Dir: dir})
	}
	e.start()
	eventually(t, "connected", func() error {
		if s, err := connectedStatus(ns, "till"); err != nil || s != "True" {
			return fmt.Errorf("%s %v", s, err)
		}
		return nil
	})
	return e, files, fetches
}

// An EdgeKubernetesRelease reaches the hosts it selects, and only those:
// their agents fetch the archive, check it and stage it, the EdgeHost
// reports the version staged, and the release counts its hosts. An archive
// that does not match its sha256 is reported failed on the host and on the
// release. Deleting a release takes its orders back.
func TestReleasesAreStagedOnTheirHosts(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	h := startHub(t, hubOptions{ns: ns})
	body := versionArchive(t, 0)
	sum := sha256.Sum256(body)
	_, files, _ := stagingHost(t, ns, h, body, false)

	release := func(name, version, arch, sha string, selector *metav1.LabelSelector) *infrav1.EdgeKubernetesRelease {
		rel := &infrav1.EdgeKubernetesRelease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: infrav1.EdgeKubernetesReleaseSpec{Version: version, HostSelector: selector,
				Artifacts: []infrav1.KubernetesArtifact{{Arch: arch, URL: files.URL + "/" + version + ".tar", SHA256: sha}}}}
		must(t, env.Client.Create(ctx, rel))
		return rel
	}
	good := hex.EncodeToString(sum[:])
	release("v1-36-3", "v1.36.3", runtime.GOARCH, good, nil)
	release("other-arch", "v1.36.2", "s390x", good, nil)
	release("other-hosts", "v1.36.1", runtime.GOARCH, good, &metav1.LabelSelector{MatchLabels: map[string]string{"site": "elsewhere"}})

	releaseStatus := func(name string, hosts, staged, failed int32, reason, msg string) error {
		rel := &infrav1.EdgeKubernetesRelease{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, rel); err != nil {
			return err
		}
		c := meta.FindStatusCondition(rel.Status.Conditions, "Staged")
		if rel.Status.Hosts != hosts || rel.Status.Staged != staged || rel.Status.Failed != failed || c == nil || c.Reason != reason || !strings.Contains(c.Message, msg) {
			return fmt.Errorf("release %s: status %+v", name, rel.Status)
		}
		return nil
	}
	eventually(t, "v1.36.3 staged on the host and counted", func() error {
		host, err := getHost(ns, "till")
		if err != nil {
			return err
		}
		if !slices.Equal(host.Status.Facts.KubernetesVersions, []string{"v1.36.3"}) {
			return fmt.Errorf("staged %v, staging %+v", host.Status.Facts.KubernetesVersions, host.Status.Staging)
		}
		if s := host.Status.Staging; len(s) != 1 || s[0].State != infrav1.StagingStaged || s[0].Bytes != int64(len(body)) {
			return fmt.Errorf("staging %+v", s)
		}
		return releaseStatus("v1-36-3", 1, 1, 0, "AllStaged", "")
	})
	eventually(t, "releases that do not select the host", func() error {
		if err := releaseStatus("other-arch", 0, 0, 0, "NoHosts", "of an architecture the release has (s390x)"); err != nil {
			return err
		}
		return releaseStatus("other-hosts", 0, 0, 0, "NoHosts", "")
	})

	bad := release("v1-37-0", "v1.37.0", runtime.GOARCH, strings.Repeat("0", 64), nil)
	eventually(t, "a mismatched archive reported on the host and the release", func() error {
		host, err := getHost(ns, "till")
		if err != nil {
			return err
		}
		i := slices.IndexFunc(host.Status.Staging, func(s infrav1.HostStagingStatus) bool { return s.Version == "v1.37.0" })
		if i < 0 || host.Status.Staging[i].State != infrav1.StagingFailed || !strings.Contains(host.Status.Staging[i].Message, "the release says 000") {
			return fmt.Errorf("staging %+v", host.Status.Staging)
		}
		return releaseStatus("v1-37-0", 1, 0, 1, "StagingFailed", "1 of 1 hosts could not stage v1.37.0: till: v1.37.0 from "+files.URL)
	})

	must(t, env.Client.Delete(ctx, bad))
	eventually(t, "a deleted release's order withdrawn", func() error {
		host, err := getHost(ns, "till")
		if err != nil {
			return err
		}
		if len(host.Status.Staging) != 1 || host.Status.Staging[0].Version != "v1.36.3" {
			return fmt.Errorf("staging %+v", host.Status.Staging)
		}
		return nil
	})
}

// A release the hub carries reaches a host whose only way out is its
// session: the hub fetches the archive once from its url (the host is
// never told where), carries it through the session within its transfer
// rate, and a transfer cut mid-way (the agent restarted) goes on from the
// bytes the host holds; the version is staged and counted.
func TestArchivesTheHubCarriesAreStaged(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	h := startHub(t, hubOptions{ns: ns, releases: delivery.Options{CacheDir: t.TempDir(), BytesPerSecond: 512 << 10}})
	body := versionArchive(t, 2<<20)
	sum := sha256.Sum256(body)
	e, files, fetches := stagingHost(t, ns, h, body, true)
	sentBefore := metricValue(t, "fleet_release_transfer_bytes_total", nil)
	must(t, env.Client.Create(ctx, &infrav1.EdgeKubernetesRelease{ObjectMeta: metav1.ObjectMeta{Name: "v1-36-3", Namespace: ns},
		Spec: infrav1.EdgeKubernetesReleaseSpec{Version: "v1.36.3", Delivery: infrav1.KubernetesDeliveryHub,
			Artifacts: []infrav1.KubernetesArtifact{{Arch: runtime.GOARCH, URL: files.URL + "/v1.36.3.tar", SHA256: hex.EncodeToString(sum[:])}}}}))

	var cutAt int64
	eventually(t, "a quarter of the archive on the host", func() error {
		host, err := getHost(ns, "till")
		if err != nil {
			return err
		}
		if s := host.Status.Staging; len(s) != 1 || s[0].Bytes < int64(len(body))/4 || s[0].TotalBytes != int64(len(body)) {
			return fmt.Errorf("staging %+v", s)
		}
		cutAt = host.Status.Staging[0].Bytes
		return nil
	})
	e.stop()
	e.start()
	eventually(t, "v1.36.3 staged on the host and counted", func() error {
		host, err := getHost(ns, "till")
		if err != nil {
			return err
		}
		if !slices.Equal(host.Status.Facts.KubernetesVersions, []string{"v1.36.3"}) {
			return fmt.Errorf("staged %v, staging %+v", host.Status.Facts.KubernetesVersions, host.Status.Staging)
		}
		rel := &infrav1.EdgeKubernetesRelease{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "v1-36-3"}, rel); err != nil {
			return err
		}
		if rel.Status.Hosts != 1 || rel.Status.Staged != 1 {
			return fmt.Errorf("release status %+v", rel.Status)
		}
		return nil
	})
	if n := fetches.Load(); n != 1 {
		t.Errorf("the archive's url was fetched %d times, want once (by the hub)", n)
	}
	// Started again from nothing, the hub would have sent the bytes before
	// the cut twice; going on, at most what was on its way at the cut.
	sent := int64(metricValue(t, "fleet_release_transfer_bytes_total", nil) - sentBefore)
	if sent < int64(len(body)) || sent > int64(len(body))+cutAt/2 {
		t.Errorf("the hub sent %d bytes of a %d-byte archive cut at byte %d: the transfer did not go on from the cut", sent, len(body), cutAt)
	}
}
