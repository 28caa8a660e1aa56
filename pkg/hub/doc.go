// Package hub is fleet's side of the Cluster API contract and the gateway
// that edge agents dial. Its subpackages are the reconcilers (one per kind),
// the host inventory they share, the enrollment tokens, the gateway (TLS
// admission, enrollment, sessions, host status), edge reach (the CONNECT
// proxy and kubeconfigs), and the manager wiring that cmd/fleet-hub runs.
package hub
