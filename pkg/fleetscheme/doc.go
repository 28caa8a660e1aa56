// Package fleetscheme builds the runtime scheme of the kinds fleet's
// programs share: the few built-in kinds they read and write (Secrets,
// ConfigMaps, Events, reviews of who is asking), Cluster API core, the
// kubeadm bootstrap and control-plane kinds, and fleet's own. The hub adds
// client-go's scheme of every built-in group on top (its controllers watch
// more); the CLI links no more than this, so its binary stays small.
package fleetscheme
