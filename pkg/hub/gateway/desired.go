package gateway

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/hub/inventory"
)

// ProviderID is the providerID of the node on a host: what the agent gives
// the kubelet and what Cluster API matches the Node by.
func ProviderID(h *infrav1.EdgeHost) string {
	return "edge://" + h.Namespace + "/" + h.Name
}

func wantsDeprovision(h *infrav1.EdgeHost) bool {
	return h.Spec.ClaimRef == nil && inventory.Phase(h) == infrav1.HostDeprovisioning
}

// desiredFor computes a host's full desired state. Only the host's own
// claim and the Secret it names are ever read: an agent cannot be sent
// anything else.
func (s *Server) desiredFor(ctx context.Context, h *infrav1.EdgeHost) (*wire.DesiredState, error) {
	d := &wire.DesiredState{Generation: h.Generation}
	claim := h.Spec.ClaimRef
	if claim == nil {
		d.Deprovision = wantsDeprovision(h)
		return d, nil
	}
	if claim.BootstrapDataSecretName == "" {
		return d, nil
	}
	secret := &corev1.Secret{}
	if err := s.apiReader.Get(ctx, client.ObjectKey{Namespace: h.Namespace, Name: claim.BootstrapDataSecretName}, secret); err != nil {
		return nil, fmt.Errorf("reading bootstrap data Secret %s/%s: %w", h.Namespace, claim.BootstrapDataSecretName, err)
	}
	format := string(secret.Data["format"])
	if format == "" {
		format = "cloud-config"
	}
	d.Assignment = &wire.Assignment{
		ClaimUID:        claim.UID,
		MachineName:     claim.Name,
		ProviderID:      ProviderID(h),
		BootstrapFormat: format,
		BootstrapData:   secret.Data["value"],
	}
	if len(d.Assignment.BootstrapData) == 0 {
		return nil, fmt.Errorf("bootstrap data Secret %s/%s has no value", h.Namespace, claim.BootstrapDataSecretName)
	}
	return d, nil
}
