// Package hubinfo names the ConfigMap, in the hub namespace, where the
// gateway publishes what an agent needs besides its token (like kubeadm's
// cluster-info): the CA pin and the advertised URL. Neither is secret.
package hubinfo
