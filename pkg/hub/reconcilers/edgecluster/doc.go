// Package edgecluster reconciles EdgeClusters, fleet's InfraCluster: it
// settles the control-plane endpoint, publishes the zones of the hosts the
// cluster may use as failure domains, and marks the infrastructure
// provisioned so Cluster API can go on.
package edgecluster
