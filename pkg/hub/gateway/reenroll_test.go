package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/edgefleet/fleet/pkg/enrolltoken"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/pkg/agent"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
)

// Machine-ids and hostnames are not secrets: enrolling with the facts of an
// existing host never hands out that host's identity.
func TestReenrollmentNeverReusesAHost(t *testing.T) {
	ns := newNamespace(t)
	h := startHub(t, hubOptions{ns: ns})
	tok := newToken(t, ns, enrolltoken.Options{})
	ctx := context.Background()
	must(t, agent.EnrollOnce(ctx, newEdge(t, "clone", h.url, h.srv.CA().Pin(), tok).cfg))
	// A second machine from the same image (same hostname and machine-id).
	must(t, agent.EnrollOnce(ctx, newEdge(t, "clone", h.url, h.srv.CA().Pin(), tok).cfg))
	first, err := getHost(ns, "clone")
	must(t, err)
	hosts := &infrav1.EdgeHostList{}
	must(t, env.Client.List(ctx, hosts, client.InNamespace(ns)))
	if len(hosts.Items) != 2 {
		t.Fatalf("hosts %v, want two distinct", names(hosts.Items))
	}
	// A third is refused with a clear reason.
	err = agent.EnrollOnce(ctx, newEdge(t, "clone", h.url, h.srv.CA().Pin(), tok).cfg)
	var ee *agent.EnrollError
	if !errors.As(err, &ee) || ee.Code != "HostExists" {
		t.Fatalf("third enrollment: %v, want HostExists", err)
	}
	again, err := getHost(ns, "clone")
	must(t, err)
	if again.UID != first.UID {
		t.Fatal("the first host was replaced")
	}
}

// A host cannot make the hub record another host's providerID.
func TestForeignProviderIDIsIgnored(t *testing.T) {
	ns := newNamespace(t)
	h := startHub(t, hubOptions{ns: ns})
	tok := newToken(t, ns, enrolltoken.Options{})
	liar := newEdge(t, "liar", h.url, h.srv.CA().Pin(), tok)
	must(t, agentEnroll(liar))
	pair, caPEM := credentials(t, liar)
	c, _, err := dialRaw(t, h.url, caPEM, &pair)
	must(t, err)
	c.send(t, &wire.Hello{Host: "liar"})
	c.send(t, &wire.Status{Facts: infrav1.HostFacts{Hostname: "liar", MachineID: "x"}, ProviderID: "edge://" + ns + "/victim"})
	eventually(t, "report recorded", func() error {
		host, err := getHost(ns, "liar")
		if err != nil {
			return err
		}
		if host.Status.Facts.MachineID != "x" {
			return errors.New("not yet")
		}
		if host.Status.ProviderID != "" {
			return fmt.Errorf("recorded providerID %q", host.Status.ProviderID)
		}
		return nil
	})
}
