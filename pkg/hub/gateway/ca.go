package gateway

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/pkg/pki"
)

// CAValidity is the lifetime of a hub CA made on first start.
const CAValidity = 10 * 365 * 24 * time.Hour

// EnsureCA loads the hub CA from its Secret, creating it on first start.
// Replicas starting together may race to create it; the loser reads the
// winner's, so all replicas share one CA.
func EnsureCA(ctx context.Context, c client.Client, reader client.Reader, namespace, name string) (*pki.CA, error) {
	s := &corev1.Secret{}
	err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, s)
	if apierrors.IsNotFound(err) {
		ca, err := pki.NewCA("fleet-hub-ca", CAValidity)
		if err != nil {
			return nil, err
		}
		s = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name,
				Labels: map[string]string{"app.kubernetes.io/name": "fleet-hub"}},
			Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: ca.CertPEM, corev1.TLSPrivateKeyKey: ca.KeyPEM},
		}
		if err := c.Create(ctx, s); err == nil {
			return ca, nil
		} else if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("storing hub CA in Secret %s/%s: %w", namespace, name, err)
		}
		err = reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, s)
	}
	if err != nil {
		return nil, fmt.Errorf("reading hub CA Secret %s/%s: %w", namespace, name, err)
	}
	ca, err := pki.ParseCA(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return nil, fmt.Errorf("hub CA Secret %s/%s: %w", namespace, name, err)
	}
	return ca, nil
}
