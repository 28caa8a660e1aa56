package e2e

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/internal/testkit/testenv"
	"github.com/edgefleet/fleet/internal/testkit/testhost"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/hub/inventory"
)

// A host of the image (v1.36.3) fetches v1.35.4 from the URL of an
// EdgeKubernetesRelease, checks and stages it; claimed by a Machine of
// v1.35.4, it installs the staged version before its bootstrap: the Node
// comes up on v1.35.4, as a Machine that replaces another on an exact-size
// site of an older version must.
func TestRealNodesProvisionAStagedVersion(t *testing.T) {
	ctx := context.Background()
	c := hub.Client
	bin, staged, _ := prevKit(t)
	ns := newNamespace(t)
	const lan = "10.97.5"
	gw, _ := startFleetHubWithReach(t, ns, lan+".1")
	site, hubURL := startRealSite(t, "st", lan, gw)
	cpToken, _ := roleTokens(t, ns)
	name := fmt.Sprintf("st%d", os.Getpid()%100000)
	startRealHostWith(t, site, bin, testhost.HostOptions{}, name, hubURL, gw.CA().Pin(), cpToken)
	realEventually(t, "the host enrolled and Available", func() error { return testenv.HostsAvailable(ctx, c, ns, 1) })

	// The site reaches the file server through its router, as a store
	// reaches a mirror.
	archive, sum := versionArchive(t, previousVersion, staged[previousVersion])
	files := httptest.NewServer(http.FileServer(http.Dir(filepath.Dir(archive))))
	t.Cleanup(files.Close)
	filesAddr, err := site.Forward(net.JoinHostPort(site.Router, "8080"), files.Listener.Addr().String())
	must(t, err)
	must(t, c.Create(ctx, &infrav1.EdgeKubernetesRelease{ObjectMeta: metav1.ObjectMeta{Name: "v1-35-4", Namespace: ns},
		Spec: infrav1.EdgeKubernetesReleaseSpec{Version: previousVersion, Artifacts: []infrav1.KubernetesArtifact{{
			Arch: runtime.GOARCH, URL: "http://" + filesAddr + "/" + filepath.Base(archive), SHA256: sum}}}}))
	realEventually(t, previousVersion+" fetched and staged on the host", func() error {
		host := &infrav1.EdgeHost{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, host); err != nil {
			return err
		}
		if !slices.Contains(host.Status.Facts.KubernetesVersions, previousVersion) {
			return fmt.Errorf("EdgeHost %s: staged %v, staging %+v", name, host.Status.Facts.KubernetesVersions, host.Status.Staging)
		}
		rel := &infrav1.EdgeKubernetesRelease{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "v1-35-4"}, rel); err != nil {
			return err
		}
		if rel.Status.Hosts != 1 || rel.Status.Staged != 1 {
			return fmt.Errorf("EdgeKubernetesRelease: %+v", rel.Status)
		}
		return nil
	})

	fleet := newFleetCLI(t)
	out := fleet.run(t, "create", "cluster", clusterName, "-n", ns, "--control-plane=machines", "--kubernetes-version", previousVersion,
		"--control-plane-host-selector", "role=cp", "--kubeadm-config", filepath.Join("..", "..", "docs", "templates", "kubeadm-cgroupv1-test-hosts.yaml"))
	if !strings.Contains(out, "machine/"+clusterName+"-control-plane-0 applied") {
		t.Fatalf("create:\n%s", out)
	}
	realEventually(t, "the host provisioned on "+previousVersion, func() error {
		host := &infrav1.EdgeHost{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, host); err != nil {
			return err
		}
		if p := host.Status.Provisioning; p == nil || p.State != infrav1.ProvisioningSucceeded || host.Status.KubernetesVersion != previousVersion {
			return fmt.Errorf("EdgeHost %s: provisioning %+v, version %q", name, p, host.Status.KubernetesVersion)
		}
		return nil
	})
	kc := fleetKubeconfig(t, ns)
	realEventually(t, "Node "+name+" Ready on "+previousVersion, func() error {
		if err := nodeReady(t, kc, name, inventory.ProviderIDOf(ns, name)); err != nil {
			return err
		}
		if v := kubectl(t, kc, "get", "node", name, "-o", "jsonpath={.status.nodeInfo.kubeletVersion}"); v != previousVersion {
			return fmt.Errorf("node %s kubelet %s", name, v)
		}
		return nil
	})
}

// versionArchive packs version from kit,'s kubeadm, kubelet and images into a tar file,
// the layout an EdgeKubernetesRelease's archive has, and returns its path
// and sha256.
func versionArchive(t *testing.T, version, kit string) (string, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubernetes-"+version+"-"+runtime.GOARCH+".tar")
	f, err := os.Create(path)
	must(t, err)
	defer func() { must(t, f.Close()) }()
	sum := sha256.New()
	w := tar.NewWriter(io.MultiWriter(f, sum))
	add := func(name string, mode int64) {
		src, err := os.Open(filepath.Join(kit, name))
		must(t, err)
		defer func() { _ = src.Close() }()
		info, err := src.Stat()
		must(t, err)
		must(t, w.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: info.Size(), Typeflag: tar.TypeReg}))
		_, err = io.Copy(w, src)
		must(t, err)
	}
	add("kubeadm", 0o755)
	add("kubelet", 0o755)
	must(t, w.WriteHeader(&tar.Header{Name: "images/", Mode: 0o755, Typeflag: tar.TypeDir}))
	images, err := filepath.Glob(filepath.Join(kit, "images", "*.tar"))
	must(t, err)
	for _, img := range images {
		add(filepath.Join("images", filepath.Base(img)), 0o644)
	}
	must(t, w.Close())
	return path, hex.EncodeToString(sum.Sum(nil))
}
