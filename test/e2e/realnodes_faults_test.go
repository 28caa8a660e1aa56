package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/internal/testkit/testhost"
	"github.com/edgefleet/fleet/pkg/agent/state"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// The agent's records on its host's disk: they speak while the site is cut
// off, and are what the host itself did.
const (
	hostStateDir    = "var/lib/fleet-agent"
	hostUpgradeStep = hostStateDir + "/upgrade.json"
)

// hostApplied is the agent's own record of what its host runs.
func hostApplied(h *testhost.Host) (state.Applied, error) {
	var a state.Applied
	b, err := os.ReadFile(h.Root(hostStateDir + "/" + state.FileApplied))
	if err != nil {
		return a, err
	}
	if err := json.Unmarshal(b, &a); err != nil {
		return a, fmt.Errorf("%s: %w", state.FileApplied, err)
	}
	return a, nil
}

// hostUpgradeJournal is the upgrade in progress on the host (its step and
// whether kubeadm has started changing the host), nil when none is.
func hostUpgradeJournal(h *testhost.Host) (*struct {
	Step    string `json:"step"`
	Changed bool   `json:"changed"`
}, error) {
	b, err := os.ReadFile(h.Root(hostUpgradeStep))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	j := &struct {
		Step    string `json:"step"`
		Changed bool   `json:"changed"`
	}{}
	if err := json.Unmarshal(b, j); err != nil {
		// Caught mid-write by a reader outside the agent's atomic rename.
		return nil, fmt.Errorf("%s: %w", hostUpgradeStep, err)
	}
	return j, nil
}

// awaitOnHost checks cond every 100 ms until it holds: faults land on
// moments that last seconds, too short for the tests' usual 2 s polls.
func awaitOnHost(ctx context.Context, h *testhost.Host, what string, cond func() error) error {
	for {
		err := cond()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("host %s: %s: %w (%w)", h.Name, what, err, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// awaitKubeadmChanging waits until kubeadm upgrades the host, by the
// agent's journal: the moment a fault does the most harm.
func awaitKubeadmChanging(ctx context.Context, h *testhost.Host) error {
	return awaitOnHost(ctx, h, "kubeadm upgrading it", func() error {
		j, err := hostUpgradeJournal(h)
		if err == nil && (j == nil || !j.Changed || !strings.HasPrefix(j.Step, "kubeadm upgrade")) {
			err = fmt.Errorf("journal %+v", j)
		}
		return err
	})
}

// awaitHostResetting waits until the agent's record says it resets the
// host.
func awaitHostResetting(ctx context.Context, h *testhost.Host) error {
	return awaitOnHost(ctx, h, "resetting", func() error {
		a, err := hostApplied(h)
		if err == nil && (a.Workload == nil || a.Workload.State != infrav1.ProvisioningResetting) {
			err = fmt.Errorf("its record %+v", a.Workload)
		}
		return err
	})
}

// awaitFile waits until the host has file p.
func awaitFile(ctx context.Context, h *testhost.Host, p string) error {
	return awaitOnHost(ctx, h, "/"+p, func() error {
		_, err := os.Stat(h.Root(p))
		return err
	})
}

// hostKubelet is the kubelet version the host's own binary reports.
func hostKubelet(ctx context.Context, h *testhost.Host) (string, error) {
	out, err := h.Command(ctx, "/usr/local/bin/kubelet", "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("kubelet --version on %s: %w: %s", h.Name, err, out)
	}
	return strings.TrimPrefix(strings.TrimSpace(string(out)), "Kubernetes "), nil
}

// hubSeesDisconnected is nil once the hub has recorded the host's agent
// gone: the cut outlasted the hub's and the agent's session timeouts.
func hubSeesDisconnected(ctx context.Context, c client.Client, ns, name string) error {
	host := &infrav1.EdgeHost{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, host); err != nil {
		return err
	}
	if cond := meta.FindStatusCondition(host.Status.Conditions, infrav1.AgentConnectedCondition); cond == nil || cond.Status != "False" {
		return fmt.Errorf("EdgeHost %s AgentConnected: %+v", name, cond)
	}
	return nil
}

// powerCutMidUpgrade orders `to` and, once kubeadm is changing the host,
// cuts the site's uplink and then the host's power; the host boots cut off.
// With no word from the hub, the agent must roll the host back to `from`
// (its journal says an upgrade was cut short) and serve on it, and nothing
// else: no reset, no second bootstrap. The uplink stays cut until the hub
// has recorded the host gone; once it is back, the hub must learn the
// rollback and why.
func powerCutMidUpgrade(t *testing.T, fleet fleetCLI, site *testhost.Site, h *testhost.Host, ns, from, to string) {
	t.Helper()
	ctx := context.Background()
	c := hub.Client
	before, err := hostApplied(h)
	must(t, err)
	ca, err := os.ReadFile(h.Root("etc/kubernetes/pki/ca.crt"))
	must(t, err)
	out := fleet.run(t, "upgrade", "cluster", clusterName, "-n", ns, "--kubernetes-version", to)
	if !strings.Contains(out, " → "+to+" ordered on EdgeHost "+h.Name) {
		t.Fatalf("upgrade to %s:\n%s", to, out)
	}
	wait, cancel := context.WithTimeout(ctx, realNodesWait)
	defer cancel()
	must(t, awaitKubeadmChanging(wait, h))
	site.CutUplink()
	defer site.RestoreUplink()
	must(t, h.PowerCut())
	t.Logf("host %s: uplink and power cut during kubeadm upgrade; booting it again, cut off", h.Name)
	must(t, h.PowerOn(ctx))

	realEventually(t, "host "+h.Name+" rolled back to "+from+" on its own, cut off", func() error {
		a, err := hostApplied(h)
		if err != nil {
			return err
		}
		if u := a.Upgrade; u == nil || u.State != infrav1.UpgradeRolledBack || u.To != to ||
			!strings.Contains(u.Message, "fleet-agent restarted during the upgrade") || a.KubernetesVersion != from {
			return fmt.Errorf("the agent's record: version %q, upgrade %+v", a.KubernetesVersion, a.Upgrade)
		}
		if j, err := hostUpgradeJournal(h); err != nil || j != nil {
			return fmt.Errorf("the upgrade journal is still there: %+v, %v", j, err)
		}
		if v, err := hostKubelet(ctx, h); err != nil || v != from {
			return fmt.Errorf("the host's kubelet is %q (%v)", v, err)
		}
		if out, err := h.Command(ctx, "systemctl", "is-active", "kubelet").CombinedOutput(); err != nil {
			return fmt.Errorf("kubelet: %v %s", err, out)
		}
		return nil
	})
	realEventually(t, "the hub to record host "+h.Name+" gone", func() error { return hubSeesDisconnected(ctx, c, ns, h.Name) })
	site.RestoreUplink()

	realEventually(t, "the hub told of the rollback", func() error {
		host := &infrav1.EdgeHost{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: h.Name}, host); err != nil {
			return err
		}
		if u := host.Status.Upgrade; u == nil || u.State != infrav1.UpgradeRolledBack || u.To != to ||
			!strings.Contains(u.Message, "fleet-agent restarted during the upgrade") || host.Status.KubernetesVersion != from {
			return fmt.Errorf("EdgeHost %s: version %q, upgrade %+v", h.Name, host.Status.KubernetesVersion, host.Status.Upgrade)
		}
		if !meta.IsStatusConditionTrue(host.Status.Conditions, infrav1.AgentConnectedCondition) {
			return fmt.Errorf("EdgeHost %s not connected again", h.Name)
		}
		return nil
	})
	after, err := hostApplied(h)
	must(t, err)
	if b, a := before.Workload, after.Workload; b == nil || a == nil || a.ClaimUID != b.ClaimUID || a.State != infrav1.ProvisioningSucceeded ||
		after.NodeName != before.NodeName || after.ProviderID != before.ProviderID {
		t.Errorf("the host's workload changed through the power cut: before %+v %s %s, after %+v %s %s",
			b, before.NodeName, before.ProviderID, a, after.NodeName, after.ProviderID)
	}
	if now, err := os.ReadFile(h.Root("etc/kubernetes/pki/ca.crt")); err != nil || string(now) != string(ca) {
		t.Errorf("the cluster's CA changed through the power cut (a reset and a new bootstrap): %v", err)
	}
	// Not retried by itself; the operator cancels the order, as the refusal says.
	out = fleet.run(t, "upgrade", "cluster", clusterName, "-n", ns, "--kubernetes-version", to)
	if !strings.Contains(out, "is not retried by itself") || !strings.Contains(out, "nothing was changed") {
		t.Errorf("upgrading again after the rollback:\n%s", out)
	}
	out = fleet.run(t, "upgrade", "cluster", clusterName, "-n", ns, "--kubernetes-version", from, "--wait", "--timeout", "5m")
	if !strings.Contains(out, "on "+from+", Ready") {
		t.Fatalf("cancelling the order of %s:\n%s", to, out)
	}
}

// cutUplinkDuringUpgrade cuts the site's uplink once kubeadm is changing
// the host, keeps it cut until the hub has recorded the host gone and the
// host's own record says the upgrade succeeded (the site upgrades on its
// own), then restores it. It reports on done, and restores the uplink
// whatever happens.
func cutUplinkDuringUpgrade(ctx context.Context, site *testhost.Site, h *testhost.Host, ns, to string, done chan<- error) {
	defer site.RestoreUplink()
	done <- func() error {
		if err := awaitKubeadmChanging(ctx, h); err != nil {
			return err
		}
		site.CutUplink()
		for {
			gone := hubSeesDisconnected(ctx, hub.Client, ns, h.Name)
			a, err := hostApplied(h)
			if err == nil && gone == nil && a.Upgrade != nil && a.Upgrade.State == infrav1.UpgradeSucceeded && a.KubernetesVersion == to {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("the uplink cut during the upgrade: hub %v; host's record %+v, %v: %w", gone, a.Upgrade, err, ctx.Err())
			case <-time.After(time.Second):
			}
		}
	}()
}
