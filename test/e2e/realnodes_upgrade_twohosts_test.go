package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/internal/testkit/testenv"
	"github.com/edgefleet/fleet/internal/testkit/testhost"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/hub/inventory"
)

// A two-host site with no spare — a control-plane Machine and a worker of a
// MachineDeployment (maxSurge 0) — moves from v1.35.4 to v1.36.3 in place
// with `kubectl fleet upgrade cluster --wait`: the control plane through its
// Machine's version, then the worker through Cluster API's in-place hooks
// (CanUpdateMachineSet, UpdateMachine) served by the hub. No Machine is
// deleted, no host reset, the worker's pod keeps running, both Nodes end on
// the new version and Ready, though the site's uplink is cut while the
// worker upgrades, past every session timeout.
func TestRealNodesInPlaceUpgradeTwoHosts(t *testing.T) {
	ctx := context.Background()
	c := hub.Client
	bin, staged, _ := prevKit(t)
	ns := newNamespace(t)
	const lan = "10.97.4"
	gw, _ := startFleetHubWithHooks(t, ns, lan+".1")
	site, hubURL := startRealSite(t, "u2", lan, gw)
	cpToken, wToken := roleTokens(t, ns)
	pid := os.Getpid() % 100000
	cpName, wName := fmt.Sprintf("u2c%d", pid), fmt.Sprintf("u2w%d", pid)
	hosts := map[string]*testhost.Host{}
	for name, token := range map[string]string{cpName: cpToken, wName: wToken} {
		h := startRealHostWith(t, site, bin, testhost.HostOptions{Staged: staged}, name, hubURL, gw.CA().Pin(), token)
		hosts[name] = h
	}
	realEventually(t, "both hosts enrolled and Available", func() error { return testenv.HostsAvailable(ctx, c, ns, 2) })

	fleet := newFleetCLI(t)
	out := fleet.run(t, "create", "cluster", clusterName, "-n", ns, "--control-plane=machines", "--kubernetes-version", previousVersion,
		"--control-plane-host-selector", "role=cp", "--worker-machines", "1", "--worker-host-selector", "role=worker",
		"--kubeadm-config", filepath.Join("..", "..", "docs", "templates", "kubeadm-cgroupv1-test-hosts.yaml"))
	if !strings.Contains(out, "machinedeployment/"+clusterName+"-md-0 applied") {
		t.Fatalf("create:\n%s", out)
	}
	kc := ""
	machines := map[string]*clusterv1.Machine{}
	claims := map[string]string{}
	for _, name := range []string{cpName, wName} {
		realEventually(t, "a Machine with a Node on "+name, func() error {
			m, err := liveMachineOnHost(ctx, c, ns, name)
			if err != nil {
				return err
			}
			if m == nil || !m.Status.NodeRef.IsDefined() {
				return fmt.Errorf("no Machine with a Node on %s yet", name)
			}
			machines[name] = m
			return nil
		})
		if kc == "" {
			kc = fleetKubeconfig(t, ns)
		}
		realEventually(t, "Node "+name+" Ready on "+previousVersion, func() error {
			if err := nodeReady(t, kc, name, inventory.ProviderIDOf(ns, name)); err != nil {
				return err
			}
			host := &infrav1.EdgeHost{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, host); err != nil {
				return err
			}
			if host.Status.KubernetesVersion != previousVersion || host.Status.Provisioning == nil {
				return fmt.Errorf("EdgeHost %s runs %q", name, host.Status.KubernetesVersion)
			}
			claims[name] = string(host.Status.Provisioning.ClaimUID)
			return nil
		})
	}

	// A workload on the worker, which must keep running through the upgrade.
	echo := echoImage(t)
	must(t, hosts[wName].ImportImages(ctx, echo))
	manifest := filepath.Join(t.TempDir(), "keep.yaml")
	must(t, os.WriteFile(manifest, []byte(fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: keep
  namespace: default
spec:
  nodeName: %s
  automountServiceAccountToken: false
  containers:
  - name: echo
    image: %s
    imagePullPolicy: Never
    args: ["--listen", ":8080"]
`, wName, echoImageName)), 0o600))
	var podBefore string
	realEventually(t, "the pod Running on the worker", func() error {
		if out := kubectl(t, kc, "apply", "-f", manifest); strings.Contains(out, "rror") {
			return fmt.Errorf("%s", out)
		}
		podBefore = kubectl(t, kc, "get", "pod", "keep", "-o", `jsonpath={.metadata.uid} {.status.phase} {.status.containerStatuses[0].restartCount}`)
		if f := strings.Fields(podBefore); len(f) != 3 || f[1] != "Running" {
			return fmt.Errorf("pod keep: %q", podBefore)
		}
		return nil
	})

	// The site's uplink is cut while the worker's kubeadm upgrades it,
	// until the hub has recorded the worker gone and the worker's own
	// record says it is done: Cluster API's UpdateMachine hook waits it out.
	cutCtx, cancelCut := context.WithTimeout(ctx, 20*time.Minute)
	defer cancelCut()
	cut := make(chan error, 1)
	go cutUplinkDuringUpgrade(cutCtx, site, hosts[wName], ns, currentVersion, cut)
	start := time.Now()
	out = fleet.run(t, "upgrade", "cluster", clusterName, "-n", ns, "--kubernetes-version", currentVersion, "--wait", "--timeout", "20m")
	t.Logf("kubectl fleet upgrade cluster --wait, the uplink cut during the worker's, took %s:\n%s", time.Since(start).Round(time.Second), out)
	cancelCut()
	if err := <-cut; err != nil {
		t.Error(err)
	}
	if !strings.Contains(out, fmt.Sprintf("cluster %s: 1 control-plane and 1 worker machine(s) on %s, Ready", clusterName, currentVersion)) ||
		!strings.Contains(out, "machinedeployment/"+clusterName+"-md-0: "+previousVersion+" → "+currentVersion+" ordered") {
		t.Fatalf("upgrade: %s\n%s\n%s", lastLine(out), out, hosts[wName].UnitLog("fleet-agent.service"))
	}

	for name, before := range machines {
		m := &clusterv1.Machine{}
		must(t, c.Get(ctx, client.ObjectKeyFromObject(before), m))
		if m.UID != before.UID || m.Spec.Version != currentVersion {
			t.Errorf("Machine %s on %s after the upgrade: uid %s (was %s), version %s", m.Name, name, m.UID, before.UID, m.Spec.Version)
		}
		if c := conditions.Get(m, clusterv1.MachineUpdatingCondition); name == wName && (c == nil || c.Status != "False") {
			t.Errorf("worker Machine %s Updating: %+v", m.Name, c)
		}
		host := &infrav1.EdgeHost{}
		must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, host))
		if p := host.Status.Provisioning; p == nil || string(p.ClaimUID) != claims[name] || host.Status.KubernetesVersion != currentVersion {
			t.Errorf("EdgeHost %s after the upgrade: provisioning %+v (claim was %s), version %q", name, p, claims[name], host.Status.KubernetesVersion)
		}
	}
	realEventually(t, "both Nodes Ready on "+currentVersion+", the pod as before", func() error {
		for _, name := range []string{cpName, wName} {
			if err := nodeReady(t, kc, name, inventory.ProviderIDOf(ns, name)); err != nil {
				return err
			}
			if v := kubectl(t, kc, "get", "node", name, "-o", "jsonpath={.status.nodeInfo.kubeletVersion}"); v != currentVersion {
				return fmt.Errorf("node %s kubelet %s", name, v)
			}
		}
		if got := kubectl(t, kc, "get", "pod", "keep", "-o", `jsonpath={.metadata.uid} {.status.phase} {.status.containerStatuses[0].restartCount}`); got != podBefore {
			return fmt.Errorf("pod keep: %q, before the upgrade %q", got, podBefore)
		}
		return nil
	})
}

// lastLine is out's last non-empty line: where a command says why it
// failed.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}
