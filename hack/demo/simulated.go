package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/secret"

	"github.com/edgefleet/fleet/pkg/pki"
)

// simulatorCaveat says in one sentence what a simulated cluster does not
// show.
const simulatorCaveat = "The node simulator runs no kubelet, containers or etcd member: it registers Ready Nodes and the control plane's static pods as Running, and Cluster API and KubeadmControlPlane judge the cluster by them (its etcd is external, the stand-in API server's own)."

// simulatedKubeadmConfig is the simulated cluster's kubeadm settings: its
// etcd is external, as it is in fact (the edge cluster's stand-in API
// server keeps its data in an etcd of its own, on no node), so
// KubeadmControlPlane judges the control plane by the static pods' mirror
// pods the simulator reports and dials no etcd member it cannot have.
const simulatedKubeadmConfig = `# kubeadm settings of the demo's simulated cluster (written by hack/demo).
clusterConfiguration:
  etcd:
    external:
      endpoints: [https://127.0.0.1:2379]
      caFile: /etc/kubernetes/pki/etcd/ca.crt
      certFile: /etc/kubernetes/pki/apiserver-etcd-client.crt
      keyFile: /etc/kubernetes/pki/apiserver-etcd-client.key
`

// simulatedKubeadmConfigFile writes simulatedKubeadmConfig for
// `kubectl fleet create --kubeadm-config` and returns its path.
func (d *demo) simulatedKubeadmConfigFile() (string, error) {
	p := filepath.Join(d.dataDir, "demo", "kubeadm-simulated.yaml")
	if err := os.WriteFile(p, []byte(simulatedKubeadmConfig), 0o600); err != nil {
		return "", fmt.Errorf("writing the simulated cluster's kubeadm settings: %w", err)
	}
	return p, nil
}

// writeExternalEtcdSecrets gives the simulated cluster the external
// etcd's CA and the API server's client pair, which a user provides with
// an external etcd (Cluster API generates neither). The simulator's
// kubeadm only writes them out: nothing dials etcd with them.
func (d *demo) writeExternalEtcdSecrets(ctx context.Context) error {
	etcdCA, err := pki.NewCA("etcd-ca", 10*365*24*time.Hour)
	if err != nil {
		return err
	}
	client, err := pki.NewCA("kube-apiserver-etcd-client", 10*365*24*time.Hour)
	if err != nil {
		return err
	}
	for purpose, data := range map[secret.Purpose]map[string][]byte{
		// An external etcd's CA comes without its key.
		secret.EtcdCA:              {secret.TLSCrtDataName: etcdCA.CertPEM},
		secret.APIServerEtcdClient: {secret.TLSCrtDataName: client.CertPEM, secret.TLSKeyDataName: client.KeyPEM},
	} {
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: secret.Name(clusterName, purpose), Namespace: "default",
				Labels: map[string]string{clusterv1.ClusterNameLabel: clusterName}},
			Type: clusterv1.ClusterSecretType,
			Data: data,
		}
		if err := d.client.Create(ctx, s); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("writing the simulated cluster's external etcd Secret %s: %w", s.Name, err)
		}
	}
	return nil
}
