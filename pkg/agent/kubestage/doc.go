// Package kubestage fetches a Kubernetes version's archive from the URL an
// EdgeKubernetesRelease names and stages it on the host, where the in-place
// upgrader looks for it (<staging dir>/<version>: kubeadm, kubelet,
// images/*.tar). The download resumes after a cut (HTTP Range), is checked
// against the sha256 the hub sent before anything is unpacked, refuses to
// start when the disk cannot hold it, and unpacks into a temporary
// directory that is renamed into place only when whole: an upgrade never
// sees half a version.
package kubestage
