// Command fleet-hub runs fleet's hub in a Cluster API management cluster:
// the EdgeCluster, EdgeMachine and EdgeHost reconcilers, the agent gateway
// that edge agents dial, and the edge-reach proxy. `fleet-hub dev` runs a
// whole local management cluster around them in one process.
//
// The flags are a cobra command's, bound by room (manager, reconcilers,
// gateway, reach) straight into each package's options, in the manner of
// Cluster API's managers (sigs.k8s.io/cluster-api/util/flags).
package main
