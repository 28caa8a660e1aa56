// Package edgemachine reconciles EdgeMachines, fleet's InfraMachine: it waits
// for the owning Machine, the Cluster's infrastructure and the bootstrap data,
// claims one matching EdgeHost, and copies what that host's agent reports
// (providerID, addresses, node, certificate expiry) into the fields Cluster API
// reads. Deleting an EdgeMachine releases its host for reset.
package edgemachine
