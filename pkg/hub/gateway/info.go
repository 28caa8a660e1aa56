package gateway

import (
	"context"
	"fmt"

	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/internal/version"
	"github.com/edgefleet/fleet/pkg/contract/hubinfo"
)

// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;create;update;patch

// publishInfo writes hubinfo.ConfigMap with server-side apply: one write at
// start, harmless to repeat from every replica.
func (s *Server) publishInfo(ctx context.Context) error {
	data := map[string]string{hubinfo.KeyCAPin: s.ca.Pin(), hubinfo.KeyVersion: version.Version}
	if s.opts.AdvertiseURL != "" {
		data[hubinfo.KeyURL] = s.opts.AdvertiseURL
	}
	cm := corev1ac.ConfigMap(hubinfo.ConfigMap, s.opts.HubNamespace).WithData(data)
	if err := s.client.Apply(ctx, cm, client.FieldOwner("fleet-hub-gateway"), client.ForceOwnership); err != nil {
		return fmt.Errorf("publishing %s/%s: %w", s.opts.HubNamespace, hubinfo.ConfigMap, err)
	}
	return nil
}
