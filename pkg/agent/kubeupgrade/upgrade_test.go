package kubeupgrade_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/fleet/pkg/agent/cloudconfig"
	"github.com/edgefleet/fleet/pkg/agent/kubeupgrade"
	"github.com/edgefleet/fleet/pkg/agent/units"
)

// fakeHost is a host root whose "binaries" are files naming their version:
// `kubelet --version` prints the file, kubeadm upgrade rewrites the
// manifests as the real one would.
type fakeHost struct {
	t        *testing.T
	root     string
	ran      []string
	restarts int
	// kubeadmFails makes `kubeadm upgrade` fail after changing a manifest.
	kubeadmFails bool
}

func newFakeHost(t *testing.T, running string, staged ...string) *fakeHost {
	h := &fakeHost{t: t, root: t.TempDir()}
	h.write("usr/local/bin/kubelet", "Kubernetes "+running, 0o755)
	h.write("usr/local/bin/kubeadm", "kubeadm "+running, 0o755)
	h.write("etc/kubernetes/manifests/kube-apiserver.yaml", "image: kube-apiserver:"+running, 0o600)
	h.write("var/lib/kubelet/config.yaml", "kubelet config "+running, 0o644)
	for _, v := range staged {
		h.write("opt/fleet/kubernetes/"+v+"/kubelet", "Kubernetes "+v, 0o755)
		h.write("opt/fleet/kubernetes/"+v+"/kubeadm", "kubeadm "+v, 0o755)
		h.write("opt/fleet/kubernetes/"+v+"/images/kube-apiserver.tar", "image", 0o644)
	}
	return h
}

func (h *fakeHost) write(p, content string, mode os.FileMode) {
	full := filepath.Join(h.root, p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(content), mode); err != nil {
		h.t.Fatal(err)
	}
}

func (h *fakeHost) read(p string) string {
	b, err := os.ReadFile(filepath.Join(h.root, p))
	if err != nil {
		return err.Error()
	}
	return string(b)
}

func (h *fakeHost) Run(_ context.Context, c cloudconfig.Command) ([]byte, error) {
	line := strings.Join(c.Argv, " ")
	h.ran = append(h.ran, line)
	switch {
	case strings.HasSuffix(c.Argv[0], "/kubelet") && c.Argv[1] == "--version":
		return os.ReadFile(filepath.Join(h.root, c.Argv[0]))
	case strings.HasSuffix(c.Argv[0], "/kubeadm") && c.Argv[1] == "upgrade":
		version := strings.TrimPrefix(h.read(c.Argv[0]), "kubeadm ")
		h.write("etc/kubernetes/manifests/kube-apiserver.yaml", "image: kube-apiserver:"+version, 0o600)
		h.write("var/lib/kubelet/config.yaml", "kubelet config "+version, 0o644)
		if h.kubeadmFails {
			return []byte("[upgrade/apply] FATAL: the control plane did not come up"), errors.New("exit status 1")
		}
	}
	return nil, nil
}

func (h *fakeHost) Apply(_ context.Context, p units.Plan) ([]string, error) {
	if !slices.Equal(p.Units, []string{"kubelet.service"}) {
		h.t.Errorf("restarted %v, want the kubelet", p.Units)
	}
	h.restarts++
	return nil, nil
}

// serving is a probe that passes once the kubelet binary is version's,
// unless broken names a version that never serves.
func (h *fakeHost) serving(broken string) func(context.Context, string, string, bool) error {
	return func(_ context.Context, version, node string, cp bool) error {
		if node != "n1" || !cp {
			h.t.Errorf("probed node %q, control plane %v", node, cp)
		}
		if version == broken {
			return fmt.Errorf("the kubelet %s does not start", version)
		}
		if got := h.read("usr/local/bin/kubelet"); got != "Kubernetes "+version {
			return fmt.Errorf("the kubelet is %q", got)
		}
		return nil
	}
}

func (h *fakeHost) upgrader(broken string) *kubeupgrade.Upgrader {
	return kubeupgrade.New(kubeupgrade.Options{Root: h.root, StateDir: filepath.Join(h.root, "var/lib/fleet-agent"),
		Runner: h, Units: h, Probe: h.serving(broken), ReadyTimeout: 3 * time.Second, SettleTime: -1, ClusterVersion: h.clusterVersion})
}

// clusterVersion is kubeadm-config's version: that of the first control
// plane's kubeadm once it ran `upgrade apply`.
func (h *fakeHost) clusterVersion(context.Context) (string, error) {
	v := "v1.35.4"
	for _, line := range h.ran {
		if f := strings.Fields(line); len(f) > 3 && f[1] == "upgrade" && f[2] == "apply" {
			v = f[3]
		}
	}
	return v, nil
}

func TestStagedAndRunning(t *testing.T) {
	h := newFakeHost(t, "v1.35.4", "v1.36.3", "v1.35.10")
	h.write("opt/fleet/kubernetes/v1.37.0/kubelet", "no kubeadm beside it", 0o755)
	h.write("opt/fleet/kubernetes/latest/kubelet", "not a version", 0o755)
	u := h.upgrader("")
	if got := u.Staged(); !slices.Equal(got, []string{"v1.35.10", "v1.36.3"}) {
		t.Errorf("Staged() = %v, want [v1.35.10 v1.36.3] (complete versions, oldest first)", got)
	}
	if v, err := u.Running(context.Background()); err != nil || v != "v1.35.4" {
		t.Errorf("Running() = %q, %v", v, err)
	}
	for to, want := range map[string]string{
		"v1.34.2": "older than v1.35.4",
		"v1.37.0": "skips a minor version",
		"v1.36.4": "v1.36.4 is not staged on this host (no /opt/fleet/kubernetes/v1.36.4/kubeadm); staged versions: v1.35.10, v1.36.3",
		"1.36.3":  "not a version",
	} {
		if err := u.Check("v1.35.4", to); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Check(v1.35.4, %s) = %v, want %q", to, err, want)
		}
	}
	if err := u.Check("v1.35.4", "v1.36.3"); err != nil {
		t.Errorf("Check(v1.35.4, v1.36.3) = %v", err)
	}
}

// bootstrap is CABPK's cloud-config for a first control plane, with the
// settings kubeadm upgrade must be given again.
const bootstrap = `## template: jinja
#cloud-config
write_files:
-   path: /run/kubeadm/kubeadm.yaml
    owner: root:root
    permissions: '0640'
    content: |
      ---
      apiVersion: kubeadm.k8s.io/v1beta4
      kind: ClusterConfiguration
      kubernetesVersion: v1.35.4
      ---
      apiVersion: kubeadm.k8s.io/v1beta4
      kind: InitConfiguration
      nodeRegistration:
        ignorePreflightErrors:
        - SystemVerification
        - NumCPU
        name: '{{ ds.meta_data.local_hostname }}'
      patches:
        directory: /etc/kubernetes/patches
runcmd:
  - 'kubeadm init --config /run/kubeadm/kubeadm.yaml'
`

func TestUpgradeSwapsAndCleansUp(t *testing.T) {
	h := newFakeHost(t, "v1.35.4", "v1.36.3")
	var steps []string
	err := h.upgrader("").Upgrade(context.Background(), "v1.36.3", "n1", []byte(bootstrap), func(s string) { steps = append(steps, s) })
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"staging images", "backing up", "kubeadm upgrade apply v1.36.3 --yes --ignore-preflight-errors=SystemVerification,NumCPU --patches=/etc/kubernetes/patches", "installing kubelet and kubeadm v1.36.3",
		"restarting the kubelet", "waiting for node n1 to be Ready on v1.36.3"}
	if !slices.Equal(steps, want) {
		t.Errorf("steps %q, want %q", steps, want)
	}
	if !slices.Contains(h.ran, "ctr -n k8s.io images import --no-unpack /opt/fleet/kubernetes/v1.36.3/images/kube-apiserver.tar") ||
		!slices.Contains(h.ran, "/opt/fleet/kubernetes/v1.36.3/kubeadm upgrade apply v1.36.3 --yes --ignore-preflight-errors=SystemVerification,NumCPU --patches=/etc/kubernetes/patches") {
		t.Errorf("ran %q", h.ran)
	}
	if got := h.read("usr/local/bin/kubelet") + "|" + h.read("usr/local/bin/kubeadm"); got != "Kubernetes v1.36.3|kubeadm v1.36.3" {
		t.Errorf("binaries after the upgrade: %s", got)
	}
	if h.restarts != 1 {
		t.Errorf("kubelet restarted %d times, want 1", h.restarts)
	}
	for _, left := range []string{"usr/local/bin/.fleet-previous-kubelet", "var/lib/fleet-agent/upgrade.json", "var/lib/fleet-agent/upgrade-backup"} {
		if _, err := os.Stat(filepath.Join(h.root, left)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left after the upgrade (%v)", left, err)
		}
	}
}

// A new version that never serves is rolled back: the old manifests,
// kubelet configuration and binaries are back, and the kubelet restarted
// on them.
func TestUpgradeRolledBackWhenTheNewVersionDoesNotServe(t *testing.T) {
	h := newFakeHost(t, "v1.35.4", "v1.36.3")
	var steps []string
	err := h.upgrader("v1.36.3").Upgrade(context.Background(), "v1.36.3", "n1", nil, func(s string) { steps = append(steps, s) })
	var uerr *kubeupgrade.Error
	if !errors.As(err, &uerr) || !uerr.RolledBack || uerr.Step != "waiting for node n1 to be Ready on v1.36.3" ||
		!strings.Contains(err.Error(), "the kubelet v1.36.3 does not start") {
		t.Fatalf("Upgrade() = %v, want a rolled-back failure at the wait", err)
	}
	if steps[len(steps)-1] != "rolling back to v1.35.4" {
		t.Errorf("steps %q", steps)
	}
	assertOld(t, h)
	if h.restarts != 2 {
		t.Errorf("kubelet restarted %d times, want 2 (new, then old)", h.restarts)
	}
}

// kubeadm failing half-way leaves its changes to the manifests; the
// rollback undoes them though the binaries were never swapped.
func TestUpgradeRolledBackWhenKubeadmFails(t *testing.T) {
	h := newFakeHost(t, "v1.35.4", "v1.36.3")
	h.kubeadmFails = true
	err := h.upgrader("").Upgrade(context.Background(), "v1.36.3", "n1", nil, func(string) {})
	var uerr *kubeupgrade.Error
	if !errors.As(err, &uerr) || !uerr.RolledBack || !strings.Contains(err.Error(), "the control plane did not come up") {
		t.Fatalf("Upgrade() = %v, want a rolled-back kubeadm failure with its output", err)
	}
	assertOld(t, h)
}

// Refusals change nothing and restart nothing.
func TestUpgradeRefusedChangesNothing(t *testing.T) {
	h := newFakeHost(t, "v1.35.4", "v1.36.3")
	err := h.upgrader("").Upgrade(context.Background(), "v1.36.9", "n1", nil, func(string) {})
	var uerr *kubeupgrade.Error
	if !errors.As(err, &uerr) || uerr.RolledBack || uerr.Step != "checking" || !strings.Contains(err.Error(), "not staged") {
		t.Fatalf("Upgrade() = %v, want a refusal", err)
	}
	assertOld(t, h)
	if h.restarts != 0 || len(h.ran) != 1 {
		t.Errorf("a refusal restarted the kubelet %d times and ran %q", h.restarts, h.ran)
	}
}

// An agent restarted after kubeadm changed the host rolls it back at start.
func TestInterruptedUpgradeRolledBack(t *testing.T) {
	h := newFakeHost(t, "v1.35.4", "v1.36.3")
	cut := errors.New("power cut")
	u := kubeupgrade.New(kubeupgrade.Options{Root: h.root, StateDir: filepath.Join(h.root, "var/lib/fleet-agent"),
		Runner: h, Units: h, Probe: func(context.Context, string, string, bool) error { return cut }, ReadyTimeout: time.Millisecond, SettleTime: -1})
	// The first agent dies while waiting for the node: the probe never
	// passes and its rollback cannot finish either.
	_ = u.Upgrade(context.Background(), "v1.36.3", "n1", nil, func(string) {})
	if _, err := os.Stat(filepath.Join(h.root, "var/lib/fleet-agent/upgrade.json")); err != nil {
		t.Fatalf("no journal after an unfinished rollback: %v", err)
	}
	from, to, err := h.upgrader("").Interrupted(context.Background(), func(string) {})
	var uerr *kubeupgrade.Error
	if from != "v1.35.4" || to != "v1.36.3" || !errors.As(err, &uerr) || !uerr.RolledBack || !strings.Contains(err.Error(), "fleet-agent restarted during the upgrade") {
		t.Fatalf("Interrupted() = %s, %s, %v", from, to, err)
	}
	assertOld(t, h)
	if from, to, err := h.upgrader("").Interrupted(context.Background(), func(string) {}); from != "" || to != "" || err != nil {
		t.Errorf("a second Interrupted() = %s, %s, %v; want nothing left", from, to, err)
	}
}

func assertOld(t *testing.T, h *fakeHost) {
	t.Helper()
	for p, want := range map[string]string{
		"usr/local/bin/kubelet":                        "Kubernetes v1.35.4",
		"usr/local/bin/kubeadm":                        "kubeadm v1.35.4",
		"etc/kubernetes/manifests/kube-apiserver.yaml": "image: kube-apiserver:v1.35.4",
		"var/lib/kubelet/config.yaml":                  "kubelet config v1.35.4",
	} {
		if got := h.read(p); got != want {
			t.Errorf("/%s = %q, want %q", p, got, want)
		}
	}
	for _, left := range []string{"usr/local/bin/.fleet-previous-kubelet", "var/lib/fleet-agent/upgrade.json"} {
		if _, err := os.Stat(filepath.Join(h.root, left)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left after the rollback (%v)", left, err)
		}
	}
}

// At most MaxStaged versions are reported, the newest: the EdgeHost holds
// no more, and a longer list would have the whole status refused.
func TestStagedIsBounded(t *testing.T) {
	var versions []string
	for i := range 20 {
		versions = append(versions, fmt.Sprintf("v1.36.%d", i))
	}
	h := newFakeHost(t, "v1.35.4", versions...)
	got := h.upgrader("").Staged()
	if len(got) != kubeupgrade.MaxStaged || got[0] != "v1.36.4" || got[len(got)-1] != "v1.36.19" {
		t.Errorf("Staged() = %v, want the newest %d", got, kubeupgrade.MaxStaged)
	}
}

// A control plane that is not the first to move (the cluster's kubeadm
// configuration already names the version: another control plane ran
// `kubeadm upgrade apply`, or a KubeadmControlPlane wrote it) runs
// `kubeadm upgrade node`, as kubeadm's procedure says.
func TestUpgradeOfAnotherControlPlaneRunsUpgradeNode(t *testing.T) {
	h := newFakeHost(t, "v1.35.4", "v1.36.3")
	u := kubeupgrade.New(kubeupgrade.Options{Root: h.root, StateDir: filepath.Join(h.root, "var/lib/fleet-agent"),
		Runner: h, Units: h, Probe: h.serving(""), ReadyTimeout: 3 * time.Second, SettleTime: -1,
		ClusterVersion: func(context.Context) (string, error) { return "v1.36.3", nil }})
	var steps []string
	if err := u.Upgrade(context.Background(), "v1.36.3", "n1", []byte(bootstrap), func(s string) { steps = append(steps, s) }); err != nil {
		t.Fatal(err)
	}
	if want := "kubeadm upgrade node --ignore-preflight-errors=SystemVerification,NumCPU --patches=/etc/kubernetes/patches"; !slices.Contains(steps, want) {
		t.Errorf("steps %q, want %q among them", steps, want)
	}
}

// A worker's bootstrap writes kubeadm's JoinConfiguration to another file;
// its settings must reach `kubeadm upgrade node` too.
func TestUpgradeOfAWorkerTellsKubeadmItsJoinSettings(t *testing.T) {
	h := newFakeHost(t, "v1.35.4", "v1.36.3")
	if err := os.Remove(filepath.Join(h.root, "etc/kubernetes/manifests/kube-apiserver.yaml")); err != nil {
		t.Fatal(err)
	}
	join := strings.NewReplacer("/run/kubeadm/kubeadm.yaml", "/run/kubeadm/kubeadm-join-config.yaml",
		"kind: InitConfiguration", "kind: JoinConfiguration", "kubeadm init", "kubeadm join").Replace(bootstrap)
	u := kubeupgrade.New(kubeupgrade.Options{Root: h.root, StateDir: filepath.Join(h.root, "var/lib/fleet-agent"),
		Runner: h, Units: h, ReadyTimeout: 3 * time.Second, SettleTime: -1, Probe: func(_ context.Context, _, _ string, cp bool) error {
			if cp {
				return errors.New("a worker probed as a control plane")
			}
			return nil
		}})
	var steps []string
	if err := u.Upgrade(context.Background(), "v1.36.3", "n1", []byte(join), func(s string) { steps = append(steps, s) }); err != nil {
		t.Fatal(err)
	}
	if want := "kubeadm upgrade node --ignore-preflight-errors=SystemVerification,NumCPU --patches=/etc/kubernetes/patches"; !slices.Contains(steps, want) {
		t.Errorf("steps %q, want %q among them", steps, want)
	}
}

// Before a bootstrap, a staged version is put in place: images imported,
// kubelet and kubeadm installed, nothing of the old ones left; an unstaged
// version changes nothing.
func TestInstallBeforeTheBootstrap(t *testing.T) {
	h := newFakeHost(t, "v1.35.4", "v1.36.3")
	if err := os.Remove(filepath.Join(h.root, "etc/kubernetes/manifests/kube-apiserver.yaml")); err != nil {
		t.Fatal(err)
	}
	u := h.upgrader("")
	if err := u.Install(context.Background(), "v1.37.0", func(string) {}); err == nil || h.read("usr/local/bin/kubelet") != "Kubernetes v1.35.4" {
		t.Fatalf("installing an unstaged version: %v, kubelet %q", err, h.read("usr/local/bin/kubelet"))
	}
	var steps []string
	if err := u.Install(context.Background(), "v1.36.3", func(s string) { steps = append(steps, s) }); err != nil {
		t.Fatal(err)
	}
	if h.read("usr/local/bin/kubelet") != "Kubernetes v1.36.3" || h.read("usr/local/bin/kubeadm") != "kubeadm v1.36.3" ||
		!slices.Contains(h.ran, "ctr -n k8s.io images import --no-unpack /opt/fleet/kubernetes/v1.36.3/images/kube-apiserver.tar") || h.restarts != 0 {
		t.Errorf("after the install: kubelet %q, kubeadm %q, ran %q, restarts %d", h.read("usr/local/bin/kubelet"), h.read("usr/local/bin/kubeadm"), h.ran, h.restarts)
	}
	if _, err := os.Stat(filepath.Join(h.root, "usr/local/bin/.fleet-previous-kubelet")); err == nil {
		t.Error("the old kubelet is left beside the new one")
	}
	if want := []string{"staging images of v1.36.3", "installing kubelet and kubeadm v1.36.3"}; !slices.Equal(steps, want) {
		t.Errorf("steps %q, want %q", steps, want)
	}
}

// A control plane that serves, then goes down again (a kubelet of the new
// version recreating the static pods just after it starts), is not taken
// for upgraded until it has served without a break for the settle time.
func TestUpgradeWaitsForTheHostToSettle(t *testing.T) {
	h := newFakeHost(t, "v1.35.4", "v1.36.3")
	var probes []time.Time
	u := kubeupgrade.New(kubeupgrade.Options{Root: h.root, StateDir: filepath.Join(h.root, "var/lib/fleet-agent"),
		Runner: h, Units: h, ReadyTimeout: 5 * time.Second, SettleTime: 300 * time.Millisecond, ClusterVersion: h.clusterVersion,
		Probe: func(context.Context, string, string, bool) error {
			probes = append(probes, time.Now())
			if len(probes) == 2 {
				return errors.New("the API server is not ready: connection refused")
			}
			return nil
		}})
	if err := u.Upgrade(context.Background(), "v1.36.3", "n1", []byte(bootstrap), func(string) {}); err != nil {
		t.Fatal(err)
	}
	if len(probes) < 4 || probes[len(probes)-1].Sub(probes[2]) < 300*time.Millisecond {
		t.Errorf("done after %d probes over %s; want it to wait %s past the break", len(probes), probes[len(probes)-1].Sub(probes[0]), 300*time.Millisecond)
	}
}
