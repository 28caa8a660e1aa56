package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
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
		args := []string{"create", "cluster", clusterName, "--kubernetes-version", d.kubernetesVersion}
		if d.real() {
			// KubeadmControlPlane, with what hosts on this machine need
			// from kubeadm (docs/PROVISIONING.md says which and why).
			args = append(args, "--control-plane=kubeadm", "--kubeadm-config", d.kubeadmConfig)
		} else {
			// KubeadmControlPlane over an external etcd: it judges the
			// control plane by the pods the simulator reports.
			if err := d.writeExternalEtcdSecrets(ctx); err != nil {
				return err
			}
			cfg, err := d.simulatedKubeadmConfigFile()
			if err != nil {
				return err
			}
			args = append(args, "--control-plane=kubeadm", "--kubeadm-config", cfg)
		}
		args = append(args, "--control-plane-machines", "1", "--worker-machines", fmt.Sprint(d.agents-1),
			"--host-selector", siteLabel,
			"--control-plane-host-selector", roleLabel+"=control-plane", "--worker-host-selector", roleLabel+"=worker",
			"--wait", "--timeout", "10m")
		if err := d.kubectlFleet(ctx, args...); err != nil {
			return err
		}
	default:
		return fmt.Errorf("reading cluster %s: %w", clusterName, err)
	}
	// Machines Running is what --wait waits for; Cluster API counts the
	// workers available (and so the Cluster) a few seconds later.
	if err := d.waitAvailable(ctx); err != nil {
		return err
	}
	if err := d.kubectlFleet(ctx, "describe", "cluster", clusterName); err != nil {
		return err
	}
	if d.real() {
		if err := d.showNodes(ctx); err != nil {
			return err
		}
		return d.showService(ctx)
	}
	return nil
}

// waitAvailable waits for Cluster API to call the cluster Available: its
// control plane answers (KCP reaches it through the hub) and its workers
// are up.
func (d *demo) waitAvailable(ctx context.Context) error {
	return waitFor(ctx, 5*time.Minute, "cluster "+clusterName+" Available", func(s string) { fmt.Fprintf(d.out, "    %s\n", s) }, func() (string, error) {
		c := &clusterv1.Cluster{}
		if err := d.client.Get(ctx, client.ObjectKey{Namespace: "default", Name: clusterName}, c); err != nil {
			return "", err
		}
		if !conditions.IsTrue(c, clusterv1.ClusterAvailableCondition) {
			return "waiting for Cluster API to report the cluster Available", errors.New("not Available")
		}
		// Available allows a worker short (maxUnavailable 1), and the
		// replica counts trail the Machines: wait for all of them, so
		// describe shows every count ready.
		mds := &clusterv1.MachineDeploymentList{}
		if err := d.client.List(ctx, mds, client.InNamespace("default"), client.MatchingLabels{clusterv1.ClusterNameLabel: clusterName}); err != nil {
			return "", err
		}
		if ref := c.Spec.ControlPlaneRef; ref.Kind == "KubeadmControlPlane" {
			kcp := &controlplanev1.KubeadmControlPlane{}
			if err := d.client.Get(ctx, client.ObjectKey{Namespace: "default", Name: ref.Name}, kcp); err != nil {
				return "", err
			}
			if want, ready := ptr.Deref(kcp.Spec.Replicas, 1), ptr.Deref(kcp.Status.ReadyReplicas, 0); ready != want {
				msg := fmt.Sprintf("waiting for KubeadmControlPlane %s: %d/%d ready", kcp.Name, ready, want)
				return msg, errors.New(msg)
			}
		}
		for _, md := range mds.Items {
			want, ready := ptr.Deref(md.Spec.Replicas, 1), ptr.Deref(md.Status.ReadyReplicas, 0)
			if ready != want {
				msg := fmt.Sprintf("waiting for MachineDeployment %s: %d/%d ready", md.Name, ready, want)
				return msg, errors.New(msg)
			}
		}
		return "", nil
	})
}

// workloadKubeconfig is where the demo writes the edge cluster's admin
// kubeconfig, which reaches it through the hub.
func (d *demo) workloadKubeconfig() string {
	return filepath.Join(d.dataDir, clusterName+".kubeconfig")
}

// showNodes writes the cluster's kubeconfig with `kubectl fleet
// kubeconfig` and lists its nodes through it, as an operator would, once
// every node is Ready.
func (d *demo) showNodes(ctx context.Context) error {
	fmt.Fprintf(d.out, "$ kubectl fleet kubeconfig %s > %s\n", clusterName, d.workloadKubeconfig())
	var kc, stderr strings.Builder
	if err := d.runFleet(ctx, &kc, &stderr, "kubeconfig", clusterName); err != nil {
		return fmt.Errorf("%w: %s", err, stderr.String())
	}
	if err := os.WriteFile(d.workloadKubeconfig(), []byte(kc.String()), 0o600); err != nil {
		return err
	}
	err := waitFor(ctx, 3*time.Minute, "every node Ready", func(s string) { fmt.Fprintf(d.out, "    %s\n", s) }, func() (string, error) {
		out, err := d.kubectl(ctx, "get", "nodes", "-o", `jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status} {end}`)
		if err != nil {
			return "", err
		}
		ready := strings.Count(out, "=True")
		if ready < len(d.hosts) {
			return fmt.Sprintf("%d/%d nodes Ready", ready, len(d.hosts)), errors.New("not all Ready")
		}
		return "", nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(d.out, "$ kubectl --kubeconfig %s get nodes -o wide\n", d.workloadKubeconfig())
	out, err := d.kubectl(ctx, "get", "nodes", "-o", "wide")
	fmt.Fprint(d.out, out)
	return err
}

// kubectl runs bin/k8s/kubectl against the edge cluster.
func (d *demo) kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(d.binDir, "k8s", "kubectl"), append([]string{"--kubeconfig", d.workloadKubeconfig()}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// writeWorkloadKubeconfig stores the kubeconfig of the local API server
// that plays the edge cluster's as <cluster>-kubeconfig, before the
// Cluster exists. With real kubeadm, Cluster API writes this Secret itself
// from the cluster CA; here the API server is a local stand-in with
// certificates of its own. Not of Cluster API's Secret type: KCP leaves
// such a Secret as the user's, where it would adopt one of its type and
// re-sign its client certificate with a CA the stand-in does not trust.
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
		s.Type = corev1.SecretTypeOpaque
		s.Data = map[string][]byte{"value": kc}
		return nil
	})
	if err != nil {
		return fmt.Errorf("writing the workload cluster's kubeconfig Secret: %w", err)
	}
	return nil
}
