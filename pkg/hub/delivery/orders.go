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
// it (a revert to the release it was installed with).
func (o *Orders) For(ctx context.Context, h *infrav1.EdgeHost) *wire.AgentReleaseOrder {
	order := infrav1.AgentReleaseOrderOf(h)
	if order == nil {
		return nil
	}
	out := &wire.AgentReleaseOrder{Version: order.Version, TrialSeconds: order.TrialSeconds}
	if art := o.artifact(ctx, h.Namespace, order.Version, h.Status.Facts.Arch); art != nil {
		if a, err := Artifact(art.Bundle); err == nil && a.Version == order.Version {
			out.Bundle, out.SHA256, out.Size = []byte(art.Bundle), a.SHA256, a.Size
		}
	}
	return out
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
