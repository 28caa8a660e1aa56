// Package get is `kubectl fleet get clusters|machines|hosts`: kubectl-style
// tables (-o wide|json|yaml|name) that put the hub's view of each edge host
// next to Cluster API's.
package get
