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

// The versions the upgrade tests move between: bin/k8s-v1.35.4 (make
// k8s-prev) and bin/k8s.
const (
	previousVersion = "v1.35.4"
	currentVersion  = "v1.36.3"
)

// prevKit is realKit with the previous version staged on the hosts, for
// clusters made on it (the agent installs a staged version before its
// bootstrap); the image's own, current version is the upgrade's target.
// It returns the staged versions by version, and the current version's
// binaries and images.
func prevKit(t *testing.T) (hostKit, map[string]string, string) {
	t.Helper()
	bin := realKit(t)
	prev, err := filepath.Abs(filepath.Join("..", "..", "bin", "k8s-"+previousVersion))
	must(t, err)
	for _, f := range []string{"kubeadm", "kubelet", "images/kube-apiserver.tar"} {
		if _, err := os.Stat(filepath.Join(prev, f)); err != nil {
			t.Fatalf("in-place upgrade tests need %s (make k8s-prev): %v", previousVersion, err)
		}
	}
	current := filepath.Join(bin.image, "opt", "fleet", "kubernetes", currentVersion)
	return bin, map[string]string{previousVersion: prev}, current
}

// A one-host site, made by `kubectl fleet create --control-plane=machines`
// on Kubernetes v1.35.4 with v1.36.3 staged on the host, moves to v1.36.3
// with `kubectl fleet upgrade cluster --wait`, in place: the same Machine,
// host and Node, the Node on the new version and Ready, a workload pod
// still running (never restarted), the cluster's data in etcd kept, the
// static pods on the new images. Versions the host cannot get, skips and
// downgrades are refused before anything changes; a version whose kubeadm
// fails is rolled back, and the site serves on its old version. Faults in
// the middle of kubeadm upgrade apply: with the uplink and then the power
// cut, the host boots cut off and rolls itself back; with the uplink cut
// past every session timeout, it upgrades on its own and the hub learns
// of it once the uplink is back. Neither resets the host.
func TestRealNodesInPlaceUpgradeOneHost(t *testing.T) {
	ctx := context.Background()
	c := hub.Client
	bin, staged, current := prevKit(t)
	// v1.36.2 is staged with a kubeadm that fails: the rollback's case.
	broken := t.TempDir()
	must(t, os.WriteFile(filepath.Join(broken, "kubeadm"), []byte("#!/bin/sh\necho 'kubeadm: the control plane did not come up' >&2\nexit 1\n"), 0o755))
	must(t, os.Symlink(filepath.Join(current, "kubelet"), filepath.Join(broken, "kubelet")))
	must(t, os.Mkdir(filepath.Join(broken, "images"), 0o755))
	staged["v1.36.2"] = broken
	ns := newNamespace(t)
	const lan = "10.97.3"
	gw, _ := startFleetHubWithReach(t, ns, lan+".1")
	site, hubURL := startRealSite(t, "up", lan, gw)
	cpToken, _ := roleTokens(t, ns)
	name := fmt.Sprintf("up%d", os.Getpid()%100000)
	h := startRealHostWith(t, site, bin, testhost.HostOptions{Staged: staged}, name, hubURL, gw.CA().Pin(), cpToken)
	realEventually(t, "the host enrolled and Available", func() error { return testenv.HostsAvailable(ctx, c, ns, 1) })

	fleet := newFleetCLI(t)
	out := fleet.run(t, "create", "cluster", clusterName, "-n", ns, "--control-plane=machines", "--kubernetes-version", previousVersion,
		"--control-plane-host-selector", "role=cp", "--kubeadm-config", filepath.Join("..", "..", "docs", "templates", "kubeadm-cgroupv1-test-hosts.yaml"))
	if !strings.Contains(out, "machine/"+clusterName+"-control-plane-0 applied") {
		t.Fatalf("create:\n%s", out)
	}
	realEventually(t, "the control-plane Machine with a Node", func() error {
		m, err := liveMachineOnHost(ctx, c, ns, name)
		if err != nil {
			return err
		}
		if m == nil || !m.Status.NodeRef.IsDefined() {
			return fmt.Errorf("no Machine with a Node on %s yet", name)
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
	machine := machineOnHost(ctx, t, c, ns, name)
	realEventually(t, "the host reporting its version and the staged one", func() error {
		host := &infrav1.EdgeHost{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, host); err != nil {
			return err
		}
		if host.Status.KubernetesVersion != previousVersion || strings.Join(host.Status.Facts.KubernetesVersions, ",") != previousVersion+",v1.36.2,"+currentVersion {
			return fmt.Errorf("EdgeHost %s runs %q, staged %v", name, host.Status.KubernetesVersion, host.Status.Facts.KubernetesVersions)
		}
		return nil
	})

	// What must survive: a pod (tolerating the control plane's taint, as a
	// one-host site's workloads do), an object in etcd, the Node object.
	echo := echoImage(t)
	must(t, h.ImportImages(ctx, echo))
	manifest := filepath.Join(t.TempDir(), "keep.yaml")
	must(t, os.WriteFile(manifest, []byte(fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: keep
  namespace: default
spec:
  tolerations:
  - key: node-role.kubernetes.io/control-plane
    effect: NoSchedule
  automountServiceAccountToken: false
  containers:
  - name: echo
    image: %s
    imagePullPolicy: Never
    args: ["--listen", ":8080"]
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: keep
  namespace: default
data:
  written: %q
`, echoImageName, time.Now().Format(time.RFC3339Nano))), 0o600))
	realEventually(t, "the pod and the ConfigMap created", func() error {
		if out := kubectl(t, kc, "apply", "-f", manifest); !strings.Contains(out, "pod/keep") || strings.Contains(out, "rror") {
			return fmt.Errorf("%s", out)
		}
		return nil
	})
	var podBefore, cmBefore, nodeBefore string
	realEventually(t, "the pod Running", func() error {
		podBefore = kubectl(t, kc, "get", "pod", "keep", "-o", `jsonpath={.metadata.uid} {.status.phase} {.status.containerStatuses[0].restartCount}`)
		if f := strings.Fields(podBefore); len(f) != 3 || f[1] != "Running" {
			return fmt.Errorf("pod keep: %q", podBefore)
		}
		cmBefore = kubectl(t, kc, "get", "configmap", "keep", "-o", `jsonpath={.metadata.uid} {.data.written}`)
		nodeBefore = kubectl(t, kc, "get", "node", name, "-o", "jsonpath={.metadata.uid}")
		return nil
	})

	// Refused before anything changes.
	for version, want := range map[string]string{
		"v1.36.9": "cannot get v1.36.9: stage it under /opt/fleet/kubernetes/v1.36.9",
		"v1.37.0": "skips a minor version",
		"v1.34.0": "would be a downgrade",
	} {
		out := fleet.run(t, "upgrade", "cluster", clusterName, "-n", ns, "--kubernetes-version", version)
		if !strings.Contains(out, want) || !strings.Contains(out, "nothing was changed") {
			t.Errorf("upgrade to %s: want %q and \"nothing was changed\":\n%s", version, want, out)
		}
	}
	m := &clusterv1.Machine{}
	must(t, c.Get(ctx, client.ObjectKeyFromObject(machine), m))
	if m.Spec.Version != previousVersion {
		t.Fatalf("a refused upgrade changed Machine %s to %s", m.Name, m.Spec.Version)
	}

	// A failing upgrade is rolled back: the host serves its old version,
	// and the operator is told at which step and why.
	out = fleet.run(t, "upgrade", "cluster", clusterName, "-n", ns, "--kubernetes-version", "v1.36.2", "--wait", "--timeout", "10m")
	if !strings.Contains(out, `to v1.36.2 failed and was rolled back to v1.35.4 at step "kubeadm upgrade apply v1.36.2`) ||
		!strings.Contains(out, "kubeadm: the control plane did not come up") {
		t.Fatalf("a failing upgrade:\n%s", out)
	}
	realEventually(t, "the site serving on "+previousVersion+" after the rollback", func() error {
		if err := nodeReady(t, kc, name, inventory.ProviderIDOf(ns, name)); err != nil {
			return err
		}
		if v := kubectl(t, kc, "get", "node", name, "-o", "jsonpath={.status.nodeInfo.kubeletVersion}"); v != previousVersion {
			return fmt.Errorf("node %s kubelet %s", name, v)
		}
		host := &infrav1.EdgeHost{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, host); err != nil {
			return err
		}
		if u := host.Status.Upgrade; u == nil || u.State != infrav1.UpgradeRolledBack || host.Status.KubernetesVersion != previousVersion {
			return fmt.Errorf("EdgeHost %s: version %q, upgrade %+v", name, host.Status.KubernetesVersion, u)
		}
		return nil
	})

	// Faults in the middle of kubeadm upgrade apply: the uplink and then
	// the power cut (the host rolls back on its own), and then, ordered
	// again, the uplink cut past every session timeout (the host upgrades
	// on its own). The containers died with the power: the pod restarted.
	powerCutMidUpgrade(t, fleet, site, h, ns, previousVersion, currentVersion)
	realEventually(t, "the pod Running again after the power cut", func() error {
		got := kubectl(t, kc, "get", "pod", "keep", "-o", `jsonpath={.metadata.uid} {.status.phase} {.status.containerStatuses[0].restartCount}`)
		if f := strings.Fields(got); len(f) != 3 || f[0] != strings.Fields(podBefore)[0] || f[1] != "Running" {
			return fmt.Errorf("pod keep: %q, before the power cut %q", got, podBefore)
		}
		podBefore = got
		return nil
	})
	cutCtx, cancelCut := context.WithTimeout(ctx, 15*time.Minute)
	defer cancelCut()
	cut := make(chan error, 1)
	go cutUplinkDuringUpgrade(cutCtx, site, h, ns, currentVersion, cut)

	start := time.Now()
	out = fleet.run(t, "upgrade", "cluster", clusterName, "-n", ns, "--kubernetes-version", currentVersion, "--wait", "--timeout", "15m")
	t.Logf("kubectl fleet upgrade cluster --wait, the uplink cut meanwhile, took %s:\n%s", time.Since(start).Round(time.Second), out)
	cancelCut()
	if err := <-cut; err != nil {
		t.Error(err)
	}
	if !strings.Contains(out, fmt.Sprintf("cluster %s: 1 control-plane and 0 worker machine(s) on %s, Ready", clusterName, currentVersion)) {
		host := &infrav1.EdgeHost{}
		_ = c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, host)
		t.Fatalf("upgrade:\n%s\nEdgeHost status.upgrade: %+v\n%s", out, host.Status.Upgrade, h.UnitLog("fleet-agent.service"))
	}

	// In place: the same Machine, host, Node and workload.
	must(t, c.Get(ctx, client.ObjectKeyFromObject(machine), m))
	if m.UID != machine.UID || m.Spec.Version != currentVersion || m.Spec.ProviderID != machine.Spec.ProviderID {
		t.Errorf("Machine %s after the upgrade: uid %s (was %s), version %s, providerID %s", m.Name, m.UID, machine.UID, m.Spec.Version, m.Spec.ProviderID)
	}
	host := &infrav1.EdgeHost{}
	must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, host))
	if p := host.Status.Provisioning; p == nil || p.State != infrav1.ProvisioningSucceeded || host.Status.KubernetesVersion != currentVersion ||
		host.Status.Upgrade == nil || host.Status.Upgrade.State != infrav1.UpgradeSucceeded {
		t.Errorf("EdgeHost %s after the upgrade: provisioning %+v, version %q, upgrade %+v", name, p, host.Status.KubernetesVersion, host.Status.Upgrade)
	}
	em := &infrav1.EdgeMachine{}
	must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: m.Spec.InfrastructureRef.Name}, em))
	if !conditions.IsTrue(em, infrav1.KubernetesVersionCondition) {
		t.Errorf("EdgeMachine %s KubernetesVersion: %+v", em.Name, conditions.Get(em, infrav1.KubernetesVersionCondition))
	}
	realEventually(t, "the Node, pod and ConfigMap as before, the Node on "+currentVersion, func() error {
		if err := nodeReady(t, kc, name, inventory.ProviderIDOf(ns, name)); err != nil {
			return err
		}
		if got := kubectl(t, kc, "get", "node", name, "-o", "jsonpath={.metadata.uid} {.status.nodeInfo.kubeletVersion}"); got != nodeBefore+" "+currentVersion {
			return fmt.Errorf("node %s: %q, want %q", name, got, nodeBefore+" "+currentVersion)
		}
		if got := kubectl(t, kc, "get", "pod", "keep", "-o", `jsonpath={.metadata.uid} {.status.phase} {.status.containerStatuses[0].restartCount}`); got != podBefore {
			return fmt.Errorf("pod keep: %q, before the upgrade %q", got, podBefore)
		}
		if got := kubectl(t, kc, "get", "configmap", "keep", "-o", `jsonpath={.metadata.uid} {.data.written}`); got != cmBefore {
			return fmt.Errorf("configmap keep: %q, before the upgrade %q", got, cmBefore)
		}
		if img := kubectl(t, kc, "get", "pod", "-n", "kube-system", "kube-apiserver-"+name, "-o", "jsonpath={.spec.containers[0].image}"); !strings.HasSuffix(img, ":"+currentVersion) {
			return fmt.Errorf("kube-apiserver runs %q", img)
		}
		return nil
	})
	for _, f := range []string{"var/lib/fleet-agent/upgrade.json", "usr/local/bin/.fleet-previous-kubelet"} {
		if _, err := os.Stat(h.Root(f)); err == nil {
			t.Errorf("/%s is still on the host after the upgrade", f)
		}
	}

	renewCertificatesInPlace(ctx, t, h, kc, ns, name, em.Name, podBefore, nodeBefore)
}

// renewCertificatesInPlace has the one-host site renew its control plane's
// certificates in place: a renewal window longer than they live (a year)
// makes them due at once, as a short-lived PKI's would be. The API server
// then serves a new certificate, the certificates' expiry moves on, and
// nothing else changes: the same Node, the workload pod never restarted.
func renewCertificatesInPlace(ctx context.Context, t *testing.T, h *testhost.Host, kc, ns, name, edgeMachine, podBefore, nodeBefore string) {
	t.Helper()
	c := hub.Client
	host := &infrav1.EdgeHost{}
	must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, host))
	expiryBefore := host.Status.CertificatesExpiryDate
	certBefore, err := os.ReadFile(h.Root("etc/kubernetes/pki/apiserver.crt"))
	must(t, err)
	if expiryBefore == nil || host.Status.CertificatesRenewal != nil {
		t.Fatalf("EdgeHost %s before the renewal: expiry %v, renewal %+v", name, expiryBefore, host.Status.CertificatesRenewal)
	}
	em := &infrav1.EdgeMachine{}
	must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: edgeMachine}, em))
	patch := client.MergeFrom(em.DeepCopy())
	em.Spec.CertificatesRenewBeforeDays = 400
	must(t, c.Patch(ctx, em, patch))
	start := time.Now()
	realEventually(t, "the certificates renewed in place", func() error {
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, host); err != nil {
			return err
		}
		r := host.Status.CertificatesRenewal
		if r == nil || r.State != infrav1.RenewalSucceeded {
			return fmt.Errorf("EdgeHost %s: certificatesRenewal %+v", name, r)
		}
		if e := host.Status.CertificatesExpiryDate; e == nil || !e.After(expiryBefore.Time) {
			return fmt.Errorf("EdgeHost %s: certificates expire %v, before the renewal %v", name, e, expiryBefore)
		}
		return nil
	})
	t.Logf("the certificates renewed in place in %s (expiry %s → %s)", time.Since(start).Round(time.Second),
		expiryBefore.UTC().Format(time.RFC3339), host.Status.CertificatesExpiryDate.UTC().Format(time.RFC3339))
	if certAfter, err := os.ReadFile(h.Root("etc/kubernetes/pki/apiserver.crt")); err != nil || string(certAfter) == string(certBefore) {
		t.Errorf("the API server's certificate on the host was not renewed (%v)", err)
	}
	if _, err := eventOn(ctx, ns, "EdgeHost", name, "CertificatesRenewed"); err != nil {
		t.Error(err)
	}
	realEventually(t, "the site serving, the Node and pod as before", func() error {
		if err := nodeReady(t, kc, name, inventory.ProviderIDOf(ns, name)); err != nil {
			return err
		}
		if got := kubectl(t, kc, "get", "node", name, "-o", "jsonpath={.metadata.uid}"); got != nodeBefore {
			return fmt.Errorf("node %s: uid %q, want %q", name, got, nodeBefore)
		}
		if got := kubectl(t, kc, "get", "pod", "keep", "-o", `jsonpath={.metadata.uid} {.status.phase} {.status.containerStatuses[0].restartCount}`); got != podBefore {
			return fmt.Errorf("pod keep: %q, before the renewal %q", got, podBefore)
		}
		// The API server runs from a manifest the renewal marked.
		if got := kubectl(t, kc, "get", "pod", "-n", "kube-system", "kube-apiserver-"+name, "-o",
			`jsonpath={.metadata.annotations.fleet\.edgefleet\.io/certificates-renewed}`); got == "" {
			return fmt.Errorf("kube-apiserver-%s not restarted by the renewal", name)
		}
		return nil
	})
	for _, f := range []string{"var/lib/fleet-agent/certificates-renewal.json", "var/lib/fleet-agent/certificates-backup"} {
		if _, err := os.Stat(h.Root(f)); err == nil {
			t.Errorf("/%s is still on the host after the renewal", f)
		}
	}
}
