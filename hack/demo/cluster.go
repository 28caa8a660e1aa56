package main

import (
	"context"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

func labelsSelector(s string) (labels.Selector, error) { return labels.Parse(s) }

// createCluster creates cluster demo with kubectl fleet (unless a former
// run left it) and describes it.
func (d *demo) createCluster(ctx context.Context) error {
	err := d.client.Get(ctx, client.ObjectKey{Namespace: "default", Name: clusterName}, &clusterv1.Cluster{})
	switch {
	case err == nil:
		d.step("cluster %s is kept from the last run", clusterName)
	case apierrors.IsNotFound(err):
		d.step("creating cluster %s on the edge hosts (Cluster API makes the Machines; fleet gives each a host)", clusterName)
		if err := d.kubectlFleet(ctx, "create", "cluster", clusterName,
			"--kubernetes-version", d.kubernetesVersion,
			"--control-plane=machines", "--control-plane-machines", "1", "--worker-machines", fmt.Sprint(d.agents-1),
			"--host-selector", siteLabel,
			"--control-plane-host-selector", roleLabel+"=control-plane", "--worker-host-selector", roleLabel+"=worker",
			"--wait", "--timeout", "10m"); err != nil {
			return err
		}
	default:
		return fmt.Errorf("reading cluster %s: %w", clusterName, err)
	}
	// Machines Running is what --wait waits for; Cluster API counts a
	// MachineDeployment's replicas available a few seconds later. Describe
	// once it has, so the picture is settled.
	_ = waitFor(ctx, time.Minute, "workers available", nil, func() (string, error) {
		mds := &clusterv1.MachineDeploymentList{}
		if err := d.client.List(ctx, mds, client.InNamespace("default"), client.MatchingLabels{clusterv1.ClusterNameLabel: clusterName}); err != nil {
			return "", err
		}
		for _, md := range mds.Items {
			if md.Spec.Replicas != nil && ptr.Deref(md.Status.AvailableReplicas, 0) < *md.Spec.Replicas {
				return "", fmt.Errorf("%s: %d available", md.Name, ptr.Deref(md.Status.AvailableReplicas, 0))
			}
		}
		return "", nil
	})
	return d.kubectlFleet(ctx, "describe", "cluster", clusterName)
}

// writeWorkloadKubeconfig stores the kubeconfig of the local API server
// that plays the edge cluster's as <cluster>-kubeconfig, before the
// Cluster exists. With real kubeadm, Cluster API writes this Secret itself
// from the cluster CA; here the API server is a local stand-in with
// certificates of its own, and Cluster API keeps a Secret it finds.
func (d *demo) writeWorkloadKubeconfig(ctx context.Context) error {
	kc, err := os.ReadFile(d.workload.Kubeconfig)
	if err != nil {
		return err
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: clusterName + "-kubeconfig", Namespace: "default"}}
	_, err = controllerutil.CreateOrUpdate(ctx, d.client, s, func() error {
		if s.Labels == nil {
			s.Labels = map[string]string{}
		}
		s.Labels[clusterv1.ClusterNameLabel] = clusterName
		s.Type = clusterv1.ClusterSecretType
		s.Data = map[string][]byte{"value": kc}
		return nil
	})
	if err != nil {
		return fmt.Errorf("writing the workload cluster's kubeconfig Secret: %w", err)
	}
	return nil
}
