package staging

import (
	"context"
	"fmt"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/pkg/contract/hostupgrade"
	"github.com/edgefleet/fleet/pkg/contract/ociref"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
)

// Selects reports whether rel is for h: h is in its namespace, matches its
// host selector and has an architecture it has an artifact for.
func Selects(rel *infrav1.EdgeKubernetesRelease, h *infrav1.EdgeHost) (bool, error) {
	if rel.Namespace != h.Namespace || !rel.DeletionTimestamp.IsZero() || rel.Artifact(h.Status.Facts.Arch) == nil {
		return false, nil
	}
	if rel.Spec.HostSelector == nil {
		return true, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(rel.Spec.HostSelector)
	if err != nil {
		return false, fmt.Errorf("EdgeKubernetesRelease %s: spec.hostSelector: %w", rel.Name, err)
	}
	return sel.Matches(labels.Set(h.Labels)), nil
}

// Wanted reports whether h should fetch version: it is newer than what h
// runs (any version, for a host that runs none yet).
func Wanted(h *infrav1.EdgeHost, version string) bool {
	running := h.Status.KubernetesVersion
	if running == "" {
		return true
	}
	r, err := hostupgrade.Parse(running)
	if err != nil {
		return false
	}
	v, err := hostupgrade.Parse(version)
	return err == nil && r.LessThan(v)
}

// Orders are h's stage orders from releases, newest version first cut to
// wire.MaxStageOrders, returned oldest first. Releases with a bad selector
// are skipped (the reconciler reports them), and so are those the host's
// agent cannot take (can: whether it has a wire capability): carried by
// the hub, or fetched from an OCI registry.
func Orders(h *infrav1.EdgeHost, releases []infrav1.EdgeKubernetesRelease, can func(capability string) bool) []wire.StageOrder {
	var out []wire.StageOrder
	seen := map[string]bool{}
	for i := range releases {
		rel := &releases[i]
		if ok, err := Selects(rel, h); !ok || err != nil || !Wanted(h, rel.Spec.Version) || seen[rel.Spec.Version] {
			continue
		}
		if need := Needs(rel, h); need != "" && !can(need) {
			continue
		}
		// Two releases of one version: the first by name wins, as the
		// list is sorted by name.
		seen[rel.Spec.Version] = true
		a := rel.Artifact(h.Status.Facts.Arch)
		o := wire.StageOrder{Version: rel.Spec.Version, URL: a.URL, SHA256: a.SHA256}
		if rel.ThroughHub() {
			o.URL, o.Hub = "", true
		}
		if o.Validate() != nil {
			// The agent would refuse the whole desired state; the
			// release's status says why.
			continue
		}
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool {
		vi, _ := hostupgrade.Parse(out[i].Version)
		vj, _ := hostupgrade.Parse(out[j].Version)
		return vi.LessThan(vj)
	})
	return out[max(0, len(out)-wire.MaxStageOrders):]
}

// Needs is the capability an agent needs to take rel's archive for h's
// architecture, "" for none.
func Needs(rel *infrav1.EdgeKubernetesRelease, h *infrav1.EdgeHost) string {
	switch a := rel.Artifact(h.Status.Facts.Arch); {
	case rel.ThroughHub():
		return wire.CapabilityStageFromHub
	case a != nil && ociref.IsRef(a.URL):
		return wire.CapabilityStageFromOCI
	}
	return ""
}

// Resolver reads releases from the informer cache.
type Resolver struct{ Client client.Reader }

// For is h's stage orders, can telling whether its agent has a wire
// capability; nil when the cache cannot say (the next push asks again).
func (r *Resolver) For(ctx context.Context, h *infrav1.EdgeHost, can func(capability string) bool) []wire.StageOrder {
	list := &infrav1.EdgeKubernetesReleaseList{}
	// Read-only, and asked on every push of a host's desired state: no copy.
	if err := r.Client.List(ctx, list, client.InNamespace(h.Namespace), client.UnsafeDisableDeepCopy); err != nil || len(list.Items) == 0 {
		return nil
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	return Orders(h, list.Items, can)
}
