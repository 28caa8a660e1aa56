// Package hub is fleet's side of the Cluster API contract and, in later
// parts, the gateway that edge agents dial. Its subpackages are the
// reconcilers (one per kind), the host inventory they share, and the manager
// wiring that cmd/fleet-hub runs.
package hub
