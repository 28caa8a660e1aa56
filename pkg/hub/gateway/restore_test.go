package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/edgefleet/fleet/pkg/enrolltoken"

	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
)

// A hub restored from a backup re-creates each EdgeHost with a new uid and
// no status. Its agent is refused as UnknownHost while the EdgeHost is
// missing (and keeps its identity and workload), then comes back as the
// same host: no enrollment, no reset, no second bootstrap, and the host is
// Provisioned again from what the agent reports.
func TestARestoredHostKeepsItsAgent(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	addr := freeAddr(t)
	h := startHub(t, hubOptions{ns: ns, addr: addr})
	tok := newToken(t, ns, enrolltoken.Options{})
	e := newEdge(t, "vault", h.url, h.srv.CA().Pin(), tok).start()
	bootstrapSecret(t, ns, "boot", "#cloud-config\n")
	eventually(t, "enrolled", func() error { _, err := getHost(ns, "vault"); return err })
	claimID := claim(t, ns, "vault", "m", "boot")
	eventually(t, "provisioned", func() error {
		host, err := getHost(ns, "vault")
		if err != nil {
			return err
		}
		if host.Status.Phase != infrav1.HostProvisioned {
			return fmt.Errorf("phase %s", host.Status.Phase)
		}
		return nil
	})
	backup, err := getHost(ns, "vault")
	must(t, err)

	// The hub is lost with its objects.
	h.stop()
	lost := backup.DeepCopy()
	lost.Finalizers = nil
	must(t, env.Client.Update(ctx, lost))
	must(t, env.Client.Delete(ctx, lost))
	eventually(t, "EdgeHost gone", func() error {
		if _, err := getHost(ns, "vault"); err == nil {
			return errors.New("still there")
		}
		return nil
	})
	h = startHub(t, hubOptions{ns: ns, addr: addr})

	// Without its EdgeHost: refused as unknown, not revoked.
	pair, caPEM := credentials(t, e)
	_, resp, err := dialRaw(t, h.url, caPEM, &pair)
	if err == nil || resp == nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("a session without its EdgeHost: err %v resp %v, want 404", err, resp)
	}
	var refusal wire.Refusal
	body, _ := io.ReadAll(resp.Body)
	if json.Unmarshal(body, &refusal) != nil || refusal.Code != string(wire.ErrUnknownHost) {
		t.Errorf("refusal %s, want code UnknownHost", body)
	}

	// Restored as Velero does: same name, labels, annotations and spec;
	// new uid, no status.
	restored := &infrav1.EdgeHost{}
	restored.Namespace, restored.Name = ns, "vault"
	restored.Labels, restored.Annotations, restored.Finalizers = backup.Labels, backup.Annotations, backup.Finalizers
	restored.Spec = backup.Spec
	must(t, env.Client.Create(ctx, restored))
	if restored.UID == backup.UID {
		t.Fatal("the restored EdgeHost has the old uid")
	}
	eventually(t, "the agent back as the same host, Provisioned", func() error {
		host, err := getHost(ns, "vault")
		if err != nil {
			return err
		}
		if !e.agent.Connected() || host.Status.Phase != infrav1.HostProvisioned || host.Status.ProviderID == "" {
			return fmt.Errorf("connected %v phase %s providerID %q", e.agent.Connected(), host.Status.Phase, host.Status.ProviderID)
		}
		if host.Status.AgentObservedGeneration != host.Generation {
			return fmt.Errorf("agent observed generation %d of %d", host.Status.AgentObservedGeneration, host.Generation)
		}
		return nil
	})
	if e.agent.Enrollments() != 1 || len(e.rec.Resets()) != 0 || len(e.rec.Provisions()) != 1 {
		t.Errorf("enrollments %d resets %v provisions %d, want 1, none, 1", e.agent.Enrollments(), e.rec.Resets(), len(e.rec.Provisions()))
	}
	if w := e.agent.Applied().Workload; w == nil || w.ClaimUID != claimID {
		t.Errorf("workload %+v, want claim %s", w, claimID)
	}
	hosts := &infrav1.EdgeHostList{}
	must(t, env.Client.List(ctx, hosts, client.InNamespace(ns)))
	if len(hosts.Items) != 1 {
		t.Errorf("hosts %v, want only the restored one", names(hosts.Items))
	}
}
