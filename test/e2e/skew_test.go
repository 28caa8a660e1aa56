package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/hub/gateway"
)

// preNegotiation is the last commit whose fleet-agent predates protocol
// negotiation: it speaks version 1 alone, sends no range in its Hello and
// knows no Welcome. Its binary is built from this clone's history.
const preNegotiation = "818ef0f"

// buildAgentAt builds fleet-agent as it was at rev, stamped version.
func buildAgentAt(t *testing.T, rev, stamp string) string {
	t.Helper()
	src, out := t.TempDir(), filepath.Join(t.TempDir(), "fleet-agent")
	archive := exec.Command("sh", "-c", `git archive "$1" | tar -x -C "$2"`, "sh", rev, src)
	archive.Dir = filepath.Join("..", "..")
	if b, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("taking fleet-agent's source at %s from this clone's history (a shallow clone has none): %v\n%s", rev, err, b)
	}
	cmd := exec.Command("go", "build", "-ldflags", "-X github.com/edgefleet/fleet/internal/version.Version="+stamp, "-o", out, "./cmd/fleet-agent")
	cmd.Dir = src
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building fleet-agent at %s: %v\n%s", rev, err, b)
	}
	return out
}

// A real fleet-agent of the release before protocol negotiation, against
// this hub: served in version 1 by default; refused with a clear error on
// both sides, and its EdgeHost AgentVersionUnsupported, by a hub that no
// longer serves version 1 (--min-agent-protocol 2); served again, and the
// condition False, once the hub serves it again.
func TestAnAgentOfTheReleaseBeforeNegotiation(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	addr := freeAddr(t)
	gw, stop := startFleetHub(t, ns, addr)
	const stamp = "v0.1.0-prenegotiation"
	old := buildAgentAt(t, preNegotiation, stamp)
	sim := build(t, t.TempDir(), "./test/nodesim", "kubeadm")
	tok, _ := roleTokens(t, ns)
	a := startAgent(t, "elder", old, sim, "https://"+addr, gw.CA().Pin(), tok, nil)

	host := func() (*infrav1.EdgeHost, error) {
		h := &infrav1.EdgeHost{}
		return h, hub.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "elder"}, h)
	}
	connected := func() error {
		h, err := host()
		if err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(h.Status.Conditions, infrav1.AgentConnectedCondition) || h.Status.Facts.AgentVersion != stamp {
			return fmt.Errorf("AgentConnected %v, agentVersion %q", meta.FindStatusCondition(h.Status.Conditions, infrav1.AgentConnectedCondition), h.Status.Facts.AgentVersion)
		}
		return nil
	}
	eventually(t, "the old agent enrolled and connected", connected)

	stop()
	_, stop = startFleetHubWith(t, gateway.Options{Addr: addr, HubNamespace: ns, MinAgentProtocol: 2})
	eventually(t, "the old agent refused: AgentVersionUnsupported AgentTooOld", func() error {
		h, err := host()
		if err != nil {
			return err
		}
		c := meta.FindStatusCondition(h.Status.Conditions, infrav1.AgentVersionUnsupportedCondition)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != infrav1.AgentTooOldReason || !strings.Contains(c.Message, "fleet-agent "+stamp+" speaks protocol v1") {
			return fmt.Errorf("AgentVersionUnsupported %+v", c)
		}
		return nil
	})
	eventually(t, "the old agent's log says why", func() error {
		if !strings.Contains(a.log.String(), "upgrade fleet-agent on this host") {
			return fmt.Errorf("not in its log yet:\n%s", tail(a.log.String(), 1500))
		}
		return nil
	})

	stop()
	startFleetHub(t, ns, addr)
	eventually(t, "the old agent served again: AgentVersionUnsupported False", func() error {
		h, err := host()
		if err != nil {
			return err
		}
		if c := meta.FindStatusCondition(h.Status.Conditions, infrav1.AgentVersionUnsupportedCondition); c == nil || c.Status != metav1.ConditionFalse {
			return fmt.Errorf("AgentVersionUnsupported %+v", c)
		}
		return connected()
	})
}
