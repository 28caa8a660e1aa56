// Package delivery gets fleet-agent releases to the agents. Orders tells
// each host's session which release its agent must run, from the host's
// roll-out order (v1alpha1.AgentReleaseAnnotation) and the namespace's
// EdgeAgentReleases; Server carries a release binary to an agent that
// asks for it, through the agent's own session: content-addressed (the
// sha256 of its signed bundle), from the offset the agent already holds,
// one transfer per host at a time, a bounded number at once and within a
// byte rate per hub replica. The hub fetches each binary once from its
// release's url into a local cache and checks it against the bundle; the
// agent checks the bundle's signature with roots the hub never sees.
// ServeArchive carries the Kubernetes archives of EdgeKubernetesReleases
// with delivery Hub the same way, checked against their sha256.
package delivery
