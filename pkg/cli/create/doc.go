// Package create is `kubectl fleet create cluster`: every Cluster API
// object an edge cluster needs, wired to fleet, with the user's kubeadm
// settings (--kubeadm-config and flags), checked by the API server before
// any is written and applied server-side.
package create
