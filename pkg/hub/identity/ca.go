package identity

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
		ca, caErr := pki.NewCA("fleet-hub-ca", CAValidity)
		if caErr != nil {
			return nil, caErr
		}
		s = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name,
				Labels: map[string]string{"app.kubernetes.io/name": "fleet-hub"}},
			Type: corev1.SecretTypeTLS,
			// ca.crt too: Cluster API injects a CA bundle from that key.
			Data: map[string][]byte{corev1.TLSCertKey: ca.CertPEM, corev1.TLSPrivateKeyKey: ca.KeyPEM, "ca.crt": ca.CertPEM},
		}
		createErr := c.Create(ctx, s)
		if createErr == nil {
			return ca, nil
		}
		if !apierrors.IsAlreadyExists(createErr) {
			return nil, fmt.Errorf("storing hub CA in Secret %s/%s: %w", namespace, name, createErr)
		}
		// Another replica won the race: use its CA (this err is the one
		// checked below, not a shadow).
		s = &corev1.Secret{}
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
