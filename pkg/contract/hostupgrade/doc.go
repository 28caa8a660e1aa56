// Package hostupgrade judges whether an EdgeHost can move to a Kubernetes
// version in place, from the host's own report: its agent's running
// version, what is staged on it, and kubeadm's one-minor-at-a-time rule.
// The hub's in-place hooks and `kubectl fleet upgrade` both judge with it,
// so an upgrade the command accepts is one the hooks carry out.
package hostupgrade
