package gateway

import (
	"context"
	"fmt"

	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/internal/version"
)

// InfoConfigMap is the ConfigMap, in the hub namespace, where the gateway
// publishes what an agent needs besides its token (like kubeadm's
// cluster-info): the CA pin and the advertised URL. Neither is secret.
const InfoConfigMap = "fleet-hub-info"

// Keys of InfoConfigMap.
const (
	InfoKeyCAPin   = "caPin"
	InfoKeyURL     = "url"
	InfoKeyVersion = "version"
)

// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;create;update;patch

// publishInfo writes InfoConfigMap with server-side apply: one write at
// start, harmless to repeat from every replica.
func (s *Server) publishInfo(ctx context.Context) error {
	data := map[string]string{InfoKeyCAPin: s.ca.Pin(), InfoKeyVersion: version.Version}
	if s.opts.AdvertiseURL != "" {
		data[InfoKeyURL] = s.opts.AdvertiseURL
	}
	cm := corev1ac.ConfigMap(InfoConfigMap, s.opts.HubNamespace).WithData(data)
	if err := s.client.Apply(ctx, cm, client.FieldOwner("fleet-hub-gateway"), client.ForceOwnership); err != nil {
		return fmt.Errorf("publishing %s/%s: %w", s.opts.HubNamespace, InfoConfigMap, err)
	}
	return nil
}
