// Package hub is fleet's side of the Cluster API contract and the gateway
// that edge agents dial. Its subpackages are the reconcilers (one per kind),
// the host inventory they share, the enrollment tokens, the gateway (TLS
// admission, enrollment, sessions, host status) and edge reach (the CONNECT
// proxy and kubeconfigs). Setup, here, is the one place a hub is put
// together: cmd/fleet-hub, the embedded hub, the test kit and the tests
// all call it.
package hub
