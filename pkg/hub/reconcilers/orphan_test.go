package reconcilers_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/hub/reconcilers/edgehost"
)

// A claim naming an EdgeMachine that does not exist is not released at
// once, however old the host (a move or a restore brings the machine a
// moment later): the hub records since when it has been missing, and
// releases the claim only once that has lasted OrphanGrace.
func TestOrphanedClaimWaitsForTheGrace(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	h := w.host("orphan", nil)
	// A patch: the hub adds its finalizer to the new host meanwhile.
	w.must(env.Client.Patch(w.ctx, h, client.RawPatch(types.MergePatchType,
		[]byte(`{"spec":{"claimRef":{"name":"gone","uid":"claim-of-gone"}}}`))))

	var since string
	w.eventually("the missing machine noticed", func() error {
		got := &infrav1.EdgeHost{}
		if err := w.get("orphan", got); err != nil {
			return err
		}
		since = got.Annotations[infrav1.ClaimOrphanedSinceAnnotation]
		if since == "" {
			return errors.New("no claim-orphaned-since yet")
		}
		return nil
	})
	got := &infrav1.EdgeHost{}
	w.must(w.get("orphan", got))
	if got.Spec.ClaimRef == nil {
		t.Fatal("the claim was released as soon as its machine was found missing")
	}

	// Missing for longer than the grace: released.
	long := time.Now().Add(-edgehost.OrphanGrace - time.Minute).UTC().Format(time.RFC3339)
	w.must(env.Client.Patch(w.ctx, got, client.RawPatch(types.MergePatchType,
		[]byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, infrav1.ClaimOrphanedSinceAnnotation, long)))))
	w.eventually("the claim released after the grace", func() error {
		got := &infrav1.EdgeHost{}
		if err := w.get("orphan", got); err != nil {
			return err
		}
		if got.Spec.ClaimRef != nil {
			return fmt.Errorf("still claimed by %s", got.Spec.ClaimRef.Name)
		}
		if _, left := got.Annotations[infrav1.ClaimOrphanedSinceAnnotation]; left {
			return errors.New("claim-orphaned-since left behind")
		}
		return nil
	})
}
