// Package inventory decides which EdgeHosts are free and hands them out.
//
// A host is claimed by writing spec.claimRef with an Update that carries the
// resourceVersion the claimer read. Two claimers racing for one host cannot
// both succeed: the API server accepts the first write and answers the second
// with a Conflict. That optimistic concurrency, not any lock in the hub, is
// what keeps one host from serving two machines, across goroutines and across
// hub replicas.
package inventory
