// Package pki holds fleet's small certificate authority: the hub CA that
// signs the hub's serving certificates and every host's client certificate,
// the host identity carried in those certificates, and the CA pin
// (sha256 of the CA's SubjectPublicKeyInfo, as kubeadm's
// --discovery-token-ca-cert-hash) that agents check before trusting a hub.
//
// It is shared by hub and agent and depends only on the standard library.
package pki
