// Package kubeupgrade moves a provisioned host to another Kubernetes version
// in place, as a transaction: it checks the version is staged on the host
// (/opt/fleet/kubernetes/<version>: kubeadm, kubelet and the control-plane
// images), imports the images into containerd, backs up what a failure
// must restore (the static-pod manifests, the kubelet's configuration and
// binaries), runs `kubeadm upgrade apply` on a control plane or `kubeadm
// upgrade node` elsewhere, swaps the kubelet and restarts it, and waits for
// the kubelet, the API server and the Node to report the new version Ready.
// A failure after the host was changed puts the backup back and restarts
// the kubelet on the old version. A journal in the state directory records
// each step, so an agent restarted mid-upgrade knows to roll back.
package kubeupgrade
