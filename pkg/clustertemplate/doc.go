// Package clustertemplate is the model of the clusters fleet writes: the
// Cluster API objects of one cluster (Cluster, EdgeCluster, the control
// plane, the workers, their health checks) built from a Spec, and the
// clusterctl flavors rendered from the same Spec. `kubectl fleet create
// cluster` and the release files both build on it, so the two never differ.
package clustertemplate
