package reconcilers_test

import (
	"fmt"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/hub/inventory"
	"github.com/edgefleet/fleet/pkg/hub/reconcilers"
)

// Claims made at the same moment from many goroutines, each with its own
// view of the hosts, never give one host twice: exactly as many claims
// succeed as there are hosts.
func TestConcurrentClaimsNeverShareAHost(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	const hosts, claimers = 5, 32
	for i := range hosts {
		h := &infrav1.EdgeHost{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("r%d", i), Namespace: w.ns,
			// Paused, so the hub leaves these claims (by machines that do not
			// exist) alone once it has added its finalizer.
			Annotations: map[string]string{clusterv1.PausedAnnotation: ""}}}
		w.must(env.Client.Create(w.ctx, h))
	}
	list := &infrav1.EdgeHostList{}
	w.eventually("the hub has seen every host", func() error {
		if err := env.Client.List(w.ctx, list, client.InNamespace(w.ns)); err != nil {
			return err
		}
		for _, h := range list.Items {
			if c := condition(h.Status.Conditions, infrav1.PausedCondition); c == nil || c.Status != metav1.ConditionTrue {
				return fmt.Errorf("host %s Paused is %v", h.Name, c)
			}
		}
		return nil
	})

	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		winners = map[string][]string{}
		start   = make(chan struct{})
	)
	for i := range claimers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			em := &infrav1.EdgeMachine{ObjectMeta: metav1.ObjectMeta{
				Namespace: w.ns, Name: fmt.Sprintf("c%d", i), UID: types.UID(fmt.Sprintf("uid-%d", i))}}
			// Every claimer starts from the same, soon stale, picture.
			view := list.DeepCopy()
			req := inventory.Request{Machine: em}
			<-start
			h, err := inventory.Claim(w.ctx, env.Client, env.Client, inventory.Candidates(view.Items, req), req)
			if err != nil {
				return
			}
			mu.Lock()
			winners[h.Name] = append(winners[h.Name], em.Name)
			mu.Unlock()
		}()
	}
	close(start)
	wg.Wait()

	if len(winners) != hosts {
		t.Fatalf("%d hosts were claimed, want %d: %v", len(winners), hosts, winners)
	}
	for h, ms := range winners {
		if len(ms) != 1 {
			t.Errorf("host %s given to %v", h, ms)
		}
	}
	w.must(env.Client.List(w.ctx, list, client.InNamespace(w.ns)))
	for _, h := range list.Items {
		if h.Spec.ClaimRef == nil || winners[h.Name][0] != h.Spec.ClaimRef.Name {
			t.Errorf("host %s stored claim %v, winner %v", h.Name, h.Spec.ClaimRef, winners[h.Name])
		}
	}
}

// Two hub replicas without leader election, each with 8 workers, reconcile
// 12 machines racing for 4 hosts: every host ends with exactly one machine,
// and every machine that believes it holds a host is the one the host names.
func TestRacingHubReplicasNeverShareAHost(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	const hosts, machines = 4, 12
	for i := range hosts {
		w.host(fmt.Sprintf("x%d", i), nil)
	}
	w.withCluster("race", endpoint)
	w.bootstrapSecret("race-bootstrap", cloudConfig())

	// A second replica of the hub next to the one testenv runs.
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
	})
	w.must(err)
	w.must(reconcilers.Setup(w.ctx, mgr, reconcilers.Options{Concurrency: 8, SkipNameValidation: true}))
	go func() { _ = mgr.Start(w.ctx) }()

	for i := range machines {
		w.machine(fmt.Sprintf("m%02d", i), false, "race-bootstrap", infrav1.EdgeMachineSpec{}, "")
	}
	w.eventually("4 machines hold hosts and 8 wait", func() error {
		ems := &infrav1.EdgeMachineList{}
		if err := env.Client.List(w.ctx, ems, client.InNamespace(w.ns)); err != nil {
			return err
		}
		hl := &infrav1.EdgeHostList{}
		if err := env.Client.List(w.ctx, hl, client.InNamespace(w.ns)); err != nil {
			return err
		}
		owner := map[string]types.UID{}
		for _, h := range hl.Items {
			if h.Spec.ClaimRef == nil {
				// A released host waits for an agent this test does not run.
				return fmt.Errorf("host %s unclaimed (phase %s, annotations %v)", h.Name, h.Status.Phase, h.Annotations)
			}
			owner[h.Name] = h.Spec.ClaimRef.UID
		}
		holding, waiting := 0, 0
		for _, em := range ems.Items {
			switch em.Status.Phase {
			case infrav1.MachineProvisioning:
				if owner[em.Status.HostRef] != em.UID {
					return fmt.Errorf("machine %s believes it holds %s, which is claimed by %s", em.Name, em.Status.HostRef, owner[em.Status.HostRef])
				}
				holding++
			case infrav1.MachineWaitingForHost:
				waiting++
			}
		}
		if holding != hosts || waiting != machines-hosts {
			return fmt.Errorf("%d holding, %d waiting", holding, waiting)
		}
		return nil
	})
}
