// Command kubeadm is the upstream cluster bootstrapper that CABPK's
// cloud-config runs, built from the k8s.io/kubernetes module.
package main

import (
	"k8s.io/kubernetes/cmd/kubeadm/app"
	kubeadmerrors "k8s.io/kubernetes/cmd/kubeadm/app/util/errors"
)

func main() {
	kubeadmerrors.HandleError(app.Run())
}
