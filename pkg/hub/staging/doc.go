// Package staging decides which Kubernetes versions each host is told to
// fetch: the EdgeKubernetesReleases of its namespace that select it, that
// have an artifact for its architecture, and whose version is newer than
// the one it runs. The gateway sends them with the host's desired state
// (wire.DesiredState.Stage); the release reconciler counts the hosts.
package staging
