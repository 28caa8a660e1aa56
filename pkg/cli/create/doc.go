// Package create is `kubectl fleet create cluster`: every Cluster API
// object an edge cluster needs, wired to fleet, applied server-side.
package create
