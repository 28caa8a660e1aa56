package delivery

import (
	"context"
	"encoding/json"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/release"
)

// Artifact is what a bundle says of its binary, unverified: the hub has
// no roots; the agent verifies.
func Artifact(bundle string) (*release.Artifact, error) {
	b, err := release.ParseBundle([]byte(bundle))
	if err != nil {
		return nil, err
	}
	a := &release.Artifact{}
	if err := json.Unmarshal(b.Artifact, a); err != nil {
		return nil, fmt.Errorf("the bundle's artifact: %w", err)
	}
	if a.Size <= 0 || a.Size > wire.MaxReleaseSize {
		return nil, fmt.Errorf("the bundle's binary is %d bytes; at most %d are served", a.Size, wire.MaxReleaseSize)
	}
	return a, nil
}

// Orders says which release each host's agent must run, from the
// informer cache.
type Orders struct{ Client client.Reader }

// For is h's release order, or nil. A version no EdgeAgentRelease of the
// namespace has goes without a bundle: the agent runs it only if it holds
// it (a revert to the release it was installed with). Only roll-outs
// under way give orders (and an aborted one its orders back): an ended
// roll-out's orders stay on the hosts as a record, but a host that comes
// back later is not moved by them, nor one updated since by a package.
func (o *Orders) For(ctx context.Context, h *infrav1.EdgeHost) *wire.AgentReleaseOrder {
	order := infrav1.AgentReleaseOrderOf(h)
	if order == nil || !o.inForce(ctx, h.Namespace, order) {
		return nil
	}
	out := &wire.AgentReleaseOrder{Version: order.Version, TrialSeconds: max(order.TrialSeconds, 0)}
	if art := o.artifact(ctx, h.Namespace, order.Version, h.Status.Facts.Arch); art != nil {
		if a, err := Artifact(art.Bundle); err == nil && a.Version == order.Version {
			out.Bundle, out.SHA256, out.Size = []byte(art.Bundle), a.SHA256, a.Size
		}
	}
	if err := out.Validate(); err != nil {
		// The agent would refuse the whole desired state, and with it
		// the session: no order is better.
		return nil
	}
	return out
}

// inForce tells whether order's roll-out still gives it.
func (o *Orders) inForce(ctx context.Context, namespace string, order *infrav1.AgentReleaseOrder) bool {
	ro := &infrav1.EdgeAgentRollout{}
	if err := o.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: order.Rollout}, ro); err != nil || !ro.DeletionTimestamp.IsZero() {
		return false
	}
	switch ro.Status.Phase {
	case infrav1.AgentRolloutComplete, infrav1.AgentRolloutFailed:
		return ro.Spec.Abort && order.Revert
	case infrav1.AgentRolloutAborted:
		return order.Revert
	}
	return true
}

// artifact is the first (by name) EdgeAgentRelease of namespace with
// version's artifact for arch.
func (o *Orders) artifact(ctx context.Context, namespace, version, arch string) *infrav1.AgentArtifact {
	list := &infrav1.EdgeAgentReleaseList{}
	if err := o.Client.List(ctx, list, client.InNamespace(namespace)); err != nil {
		return nil
	}
	var best *infrav1.EdgeAgentRelease
	for i := range list.Items {
		r := &list.Items[i]
		if r.Spec.Version == version && r.Artifact(arch) != nil && (best == nil || r.Name < best.Name) {
			best = r
		}
	}
	if best == nil {
		return nil
	}
	return best.Artifact(arch)
}

// source is the url of the binary with sha256 in namespace's releases.
func (o *Orders) source(ctx context.Context, namespace, sha string) (url string, size int64, err error) {
	list := &infrav1.EdgeAgentReleaseList{}
	if err := o.Client.List(ctx, list, client.InNamespace(namespace)); err != nil {
		return "", 0, err
	}
	for _, r := range list.Items {
		for _, art := range r.Spec.Artifacts {
			if a, err := Artifact(art.Bundle); err == nil && a.SHA256 == sha {
				return art.URL, a.Size, nil
			}
		}
	}
	return "", 0, fmt.Errorf("no EdgeAgentRelease of namespace %s has a binary of sha256 %s", namespace, sha)
}

// archiveSource is the url of the archive with sha256 in namespace's
// EdgeKubernetesReleases that the hub carries.
func (o *Orders) archiveSource(ctx context.Context, namespace, sha string) (string, error) {
	list := &infrav1.EdgeKubernetesReleaseList{}
	if err := o.Client.List(ctx, list, client.InNamespace(namespace)); err != nil {
		return "", err
	}
	for _, r := range list.Items {
		if !r.ThroughHub() || !r.DeletionTimestamp.IsZero() {
			continue
		}
		for _, a := range r.Spec.Artifacts {
			if a.SHA256 == sha {
				return a.URL, nil
			}
		}
	}
	return "", fmt.Errorf("no EdgeKubernetesRelease of namespace %s that the hub carries has an archive of sha256 %s", namespace, sha)
}
