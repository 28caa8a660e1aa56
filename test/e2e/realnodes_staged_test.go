package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/internal/testkit/testenv"
	"github.com/edgefleet/fleet/internal/testkit/testhost"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/hub/inventory"
)

// A host installed with v1.35.4 and v1.36.3 staged, claimed by a Machine
// of v1.36.3, installs the staged version before its bootstrap: the Node
// comes up on v1.36.3, as a Machine that replaces another on an exact-size
// site must.
func TestRealNodesProvisionAStagedVersion(t *testing.T) {
	ctx := context.Background()
	c := hub.Client
	bin, staged := prevKit(t)
	ns := newNamespace(t)
	const lan = "10.97.5"
	gw, _ := startFleetHubWithReach(t, ns, lan+".1")
	site, hubURL := startRealSite(t, "st", lan, gw)
	cpToken, _ := roleTokens(t, ns)
	name := fmt.Sprintf("st%d", os.Getpid()%100000)
	h := startRealHostWith(t, site, bin, testhost.HostOptions{Staged: staged}, name, hubURL, gw.CA().Pin(), cpToken)
	must(t, h.ImportImages(ctx, filepath.Join(staged[currentVersion], "images", "pause.tar")))
	realEventually(t, "the host enrolled and Available", func() error { return testenv.HostsAvailable(ctx, c, ns, 1) })

	fleet := newFleetCLI(t)
	out := fleet.run(t, "create", "cluster", clusterName, "-n", ns, "--control-plane=machines", "--kubernetes-version", currentVersion,
		"--control-plane-host-selector", "role=cp", "--kubeadm-config", filepath.Join("..", "..", "docs", "templates", "kubeadm-cgroupv1-test-hosts.yaml"))
	if !strings.Contains(out, "machine/"+clusterName+"-control-plane-0 applied") {
		t.Fatalf("create:\n%s", out)
	}
	realEventually(t, "the host provisioned on "+currentVersion, func() error {
		host := &infrav1.EdgeHost{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, host); err != nil {
			return err
		}
		if p := host.Status.Provisioning; p == nil || p.State != infrav1.ProvisioningSucceeded || host.Status.KubernetesVersion != currentVersion {
			return fmt.Errorf("EdgeHost %s: provisioning %+v, version %q", name, p, host.Status.KubernetesVersion)
		}
		return nil
	})
	kc := fleetKubeconfig(t, ns)
	realEventually(t, "Node "+name+" Ready on "+currentVersion, func() error {
		if err := nodeReady(t, kc, name, inventory.ProviderIDOf(ns, name)); err != nil {
			return err
		}
		if v := kubectl(t, kc, "get", "node", name, "-o", "jsonpath={.status.nodeInfo.kubeletVersion}"); v != currentVersion {
			return fmt.Errorf("node %s kubelet %s", name, v)
		}
		return nil
	})
}
