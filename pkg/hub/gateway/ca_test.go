package gateway_test

import (
	"context"
	"sync"
	"testing"

	"github.com/edgefleet/fleet/pkg/hub/identity"
	"github.com/edgefleet/fleet/pkg/pki"
)

// Replicas starting together all end up with the one CA that was stored:
// the losers of the create race read the winner's.
func TestReplicasShareOneCA(t *testing.T) {
	ns := newNamespace(t)
	const replicas = 6
	cas := make([]*pki.CA, replicas)
	errs := make([]error, replicas)
	var wg sync.WaitGroup
	for i := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cas[i], errs[i] = identity.EnsureCA(context.Background(), env.Client, env.Client, ns, "fleet-hub-ca")
		}()
	}
	wg.Wait()
	for i := range replicas {
		if errs[i] != nil {
			t.Fatalf("replica %d: %v", i, errs[i])
		}
		if cas[i].Pin() != cas[0].Pin() {
			t.Errorf("replica %d has CA %s, replica 0 %s", i, cas[i].Pin(), cas[0].Pin())
		}
	}
	again, err := identity.EnsureCA(context.Background(), env.Client, env.Client, ns, "fleet-hub-ca")
	if err != nil || again.Pin() != cas[0].Pin() {
		t.Errorf("restart: %v %v", err, again)
	}
}
