package faults

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/hub/gateway"
)

// Hosts whose clocks are an hour ahead of the hub's or an hour behind (a
// dead battery, no NTP yet) enroll, are provisioned, renew their
// certificates — compressed to 30 s, so several times — and are reset on
// order like the host whose clock agrees: none is cut off by a
// certificate that expired, none renews over and over, lastSeen is the
// hub's clock, and each skewed host reads ClockSkewed, saying which way.
// The seed deals the clocks: one host agrees, one is ahead, one behind,
// and the fourth either.
func TestClockSkew(t *testing.T) {
	const validity = 30 * time.Second
	var clocks []time.Duration
	deal := func(r *run) []time.Duration {
		clocks = []time.Duration{0, time.Hour, -time.Hour, []time.Duration{time.Hour, -time.Hour}[r.intN(2)]}
		r.rng.Shuffle(len(clocks), func(i, j int) { clocks[i], clocks[j] = clocks[j], clocks[i] })
		return clocks
	}
	r, agents := siteOnHub(t, "c", hostOptions{pickClocks: deal}, func(o *gateway.Options) { o.ClientCertValidity = validity })
	enrolled := time.Now()
	for i, a := range agents {
		if clocks[i] != 0 {
			f := fmt.Sprintf("%s: clock %+v off the hub's", a.name, clocks[i])
			r.h.add("fault", "", f)
			t.Log(f)
			r.count(1, 0)
		}
	}
	all := []string{"cp", "w0", "w1", "w2"}
	start := time.Now()
	r.createMachines(all...)
	r.converge("provisioning", start, all)

	// Two lifetimes of the hosts' certificates, idle.
	time.Sleep(2 * validity)
	start = time.Now()
	r.deleteMachines("w2")
	r.waitGone("w2")
	r.converge("deletion", start, all[:3])
	r.check(1)

	// Each host renewed as often as the hub's clock says: at 70–90 % of
	// each certificate's life.
	lived := time.Since(enrolled)
	most := int(lived/(validity*7/10)) + 1
	for i, a := range agents {
		n := strings.Count(a.log.String(), "Rotated client certificate")
		if n < 1 || n > most {
			t.Errorf("%s (clock %+v) renewed its %s certificate %d times in %s; want 1 to %d",
				a.name, clocks[i], validity, n, lived.Round(time.Second), most)
		}
	}
	ctx := context.Background()
	for i, a := range agents {
		h := &infrav1.EdgeHost{}
		must(t, hub.Client.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: a.name}, h))
		if seen := h.Status.LastSeenTime; seen == nil || time.Since(seen.Time).Abs() > time.Minute {
			t.Errorf("%s (clock %+v) was last seen at %v, at %s by the hub's clock", a.name, clocks[i], seen, metav1.Now())
		}
		cond := meta.FindStatusCondition(h.Status.Conditions, infrav1.ClockSkewedCondition)
		way := "ahead of"
		if clocks[i] < 0 {
			way = "behind"
		}
		switch {
		case clocks[i] == 0 && cond != nil:
			t.Errorf("%s, whose clock agrees with the hub's, has %+v", a.name, cond)
		case clocks[i] != 0 && (cond == nil || cond.Status != metav1.ConditionTrue || !strings.Contains(cond.Message, way+" the hub's")):
			t.Errorf("%s, whose clock is %+v off, has ClockSkewed %+v", a.name, clocks[i], cond)
		}
	}
}
