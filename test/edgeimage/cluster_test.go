package edgeimage_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/fleet/internal/testkit"
	"github.com/edgefleet/fleet/internal/testkit/testhost"
)

// checkCluster makes a cluster (KubeadmControlPlane + one worker) with
// `kubectl fleet create cluster` on two boxes booted from the image: the
// packaged fleet-agent.service, hardening as shipped, runs kubeadm; the
// image's kubelet runs under the box's systemd with the systemd cgroup
// driver; the agent restarts it over D-Bus.
func checkCluster(t *testing.T, rootfs string) {
	site, err := testhost.NewSite("ficl", "10.95.2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = site.Close() })
	h := startHub(t, site, true)
	ctx := context.Background()

	roles := map[string]string{"ficl-cp": "role=control-plane", "ficl-w": "role=worker"}
	var boxes []*testhost.Host
	for _, name := range []string{"ficl-cp", "ficl-w"} {
		tok := h.token(t, 1, roles[name])
		files := map[string]string{
			"/etc/fleet-agent/config.yaml": fmt.Sprintf("hub: %s\ncaCertHash: %s\ntokenFile: /etc/fleet-agent/token\n", h.url, h.pin),
			"/etc/fleet-agent/token":       tok + "\n",
		}
		b, err := site.NewHost(ctx, testhost.HostOptions{Name: name, Image: rootfs, Dir: t.TempDir(), Files: files, Unnamed: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if t.Failed() {
				for _, u := range []string{"fleet-agent.service", "kubelet.service", "containerd.service"} {
					t.Logf("%s %s journal:\n%s", b.Name, u, lastLines([]byte(b.Journal(u)), 40))
				}
			}
			_ = b.Close()
		})
		boxes = append(boxes, b)
	}
	testkit.Eventually(t, 2*time.Minute, 2*time.Second, "both boxes enrolled", func() error {
		if hosts := h.hosts(t); len(hosts) != 2 {
			return fmt.Errorf("EdgeHosts %+v", hosts)
		}
		return nil
	})

	// The documented template, plus kubelet flags as a user sets them in
	// /etc/default/kubelet: a kubelet unit file the bootstrap writes,
	// which the agent restarts the kubelet for, through systemd's D-Bus API.
	tmpl, err := os.ReadFile(filepath.Join(repo, "docs/templates/kubeadm-cgroupv1-test-hosts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	const label = "edge.example.com/image=fleet-edge"
	withLabel := strings.Replace(string(tmpl), "\nfiles:\n", "\nfiles:\n  - path: /etc/default/kubelet\n    permissions: \"0644\"\n"+
		"    content: |\n      KUBELET_EXTRA_ARGS=--node-labels="+label+"\n", 1)
	if withLabel == string(tmpl) {
		t.Fatal("the template has no files: list")
	}
	cfg := filepath.Join(t.TempDir(), "kubeadm.yaml")
	if err := os.WriteFile(cfg, []byte(withLabel), 0o644); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	out, err := h.fleet("create", "cluster", "lab", "--kubernetes-version", "v1.36.3", "--worker-machines", "1",
		"--control-plane-host-selector", "role=control-plane", "--worker-host-selector", "role=worker",
		"--kubeadm-config", cfg, "--wait", "--timeout", "10m")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("create cluster --wait on image hosts: %s\n%s", time.Since(started).Round(100*time.Millisecond), lastLines([]byte(out), 6))
	kc, err := h.fleet("kubeconfig", "lab")
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "lab.kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	// Nodes are named after the boxes' hostnames, which first boot chose.
	var nodes []string
	for _, b := range boxes {
		hn, err := b.Command(ctx, "hostname").Output()
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, strings.TrimSpace(string(hn)))
	}
	sort.Strings(nodes)
	testkit.Eventually(t, 6*time.Minute, 2*time.Second, "both Nodes Ready, with the kubelet's label", func() error {
		return nodesReady(h.kubectl, kubeconfig, label, nodes...)
	})
	// kubeadm's addons run: CoreDNS and kube-proxy Ready.
	testkit.Eventually(t, 4*time.Minute, 2*time.Second, "CoreDNS and kube-proxy Ready", func() error {
		return addonsReady(h.kubectl, kubeconfig)
	})
	t.Logf("create → both Nodes Ready: %s", time.Since(started).Round(100*time.Millisecond))

	for _, b := range boxes {
		// The kubelet runs under the box's systemd, its pods in slices
		// that systemd made for it (the systemd cgroup driver).
		p, err := b.Show(ctx, "kubelet.service", "ActiveState", "NRestarts")
		if err != nil {
			t.Fatal(err)
		}
		if p["ActiveState"] != "active" {
			t.Errorf("%s: kubelet.service %v", b.Name, p)
		}
		if s, err := b.Show(ctx, "kubepods.slice", "ActiveState"); err != nil || s["ActiveState"] != "active" {
			t.Errorf("%s: kubepods.slice %v %v (the kubelet's systemd cgroup driver)", b.Name, s, err)
		}
		// The agent restarted the kubelet through systemd's D-Bus API
		// after the bootstrap (pkg/agent/units).
		if j := b.Journal("fleet-agent.service"); !strings.Contains(j, "kubelet.service restarted") || strings.Contains(j, "D-Bus") {
			t.Errorf("%s: the agent's journal does not show the kubelet restarted:\n%s", b.Name, lastLines([]byte(j), 20))
		}
		// The agent's unit ran kubeadm as shipped: no drop-in loosens it.
		if d, err := b.Show(ctx, "fleet-agent.service", "DropInPaths", "ProtectSystem", "NoNewPrivileges"); err != nil || d["DropInPaths"] != "" {
			t.Errorf("%s: fleet-agent.service %v %v", b.Name, d, err)
		}
	}

	started = time.Now()
	if out, err := h.fleet("delete", "cluster", "lab", "--wait", "--timeout", "6m"); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("delete cluster --wait: %s\n%s", time.Since(started).Round(100*time.Millisecond), lastLines([]byte(out), 4))
	}
	for _, b := range boxes {
		testkit.Eventually(t, 3*time.Minute, 2*time.Second, b.Name+" reset by kubeadm", func() error {
			if _, err := os.Stat(b.Root("etc/kubernetes/kubelet.conf")); err == nil {
				return fmt.Errorf("%s still has /etc/kubernetes/kubelet.conf", b.Name)
			}
			p, err := b.Show(ctx, "kubelet.service", "ActiveState")
			if err != nil {
				return err
			}
			if p["ActiveState"] == "active" {
				return fmt.Errorf("kubelet.service still active on %s", b.Name)
			}
			return nil
		})
	}
}

// addonsReady checks that every pod of kubeadm's addons (CoreDNS,
// kube-proxy) is Ready.
func addonsReady(kubectl, kubeconfig string) error {
	out, err := exec.Command(kubectl, "--kubeconfig", kubeconfig, "get", "pods", "-n", "kube-system", "-l", "k8s-app in (kube-dns,kube-proxy)",
		"-o", `jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status} {end}`).Output()
	if err != nil {
		return fmt.Errorf("kubectl get pods: %w", err)
	}
	pods := strings.Fields(string(out))
	if len(pods) < 4 {
		return fmt.Errorf("addon pods %v, want 2 CoreDNS and 2 kube-proxy", pods)
	}
	for _, p := range pods {
		if !strings.HasSuffix(p, "=True") {
			return fmt.Errorf("addon pods %v", pods)
		}
	}
	return nil
}

// nodesReady checks, through the hub's edge reach, that the cluster has
// exactly the named Nodes, each Ready and labelled.
func nodesReady(kubectl, kubeconfig, label string, names ...string) error {
	out, err := exec.Command(kubectl, "--kubeconfig", kubeconfig, "get", "nodes", "-o", "json").Output()
	if err != nil {
		return fmt.Errorf("kubectl get nodes: %w", err)
	}
	var list struct {
		Items []struct {
			Metadata struct {
				Name   string
				Labels map[string]string
			}
			Status struct {
				Conditions []struct{ Type, Status string }
			}
		}
	}
	if err := json.Unmarshal(out, &list); err != nil {
		return err
	}
	k, v, _ := strings.Cut(label, "=")
	var got []string
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Metadata.Name < list.Items[j].Metadata.Name })
	for _, n := range list.Items {
		ready := false
		for _, c := range n.Status.Conditions {
			ready = ready || c.Type == "Ready" && c.Status == "True"
		}
		if ready && n.Metadata.Labels[k] == v {
			got = append(got, n.Metadata.Name)
		}
	}
	if strings.Join(got, ",") != strings.Join(names, ",") {
		return fmt.Errorf("Ready and labelled %s: %v, want %v", label, got, names)
	}
	return nil
}
