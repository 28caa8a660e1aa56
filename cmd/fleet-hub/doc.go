// Command fleet-hub runs fleet's hub in a Cluster API management cluster:
// the EdgeCluster, EdgeMachine and EdgeHost reconcilers (and, in later
// parts, the gateway that edge agents dial).
package main
