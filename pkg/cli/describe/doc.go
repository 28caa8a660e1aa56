// Package describe is `kubectl fleet describe cluster`: a tree like
// clusterctl's (Cluster → control plane → MachineDeployments → Machines)
// that also shows, per machine, its edge host, the agent's connectivity by
// the hub's clock, providerID, addresses, node and certificate expiry. It
// reads a fixed number of lists, however many machines the cluster has.
package describe
