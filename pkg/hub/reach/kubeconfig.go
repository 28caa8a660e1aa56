package reach

import (
	"context"
	"fmt"
	"net/url"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/clientcmd"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/secret"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// How often a stamped kubeconfig is checked again: a control-plane
// provider that rotates the Secret (KubeadmControlPlane does, before its
// client certificate expires) writes it without our proxy-url.
const (
	recheckInterval = 5 * time.Minute
	missingInterval = 15 * time.Second
)

// KubeconfigReconciler points the `<cluster>-kubeconfig` Secret of every
// fleet cluster at the edge-reach proxy (proxy-url with the cluster's
// credential), so Cluster API's ClusterCache — nodeRef, MachineHealthCheck,
// KubeadmControlPlane, the kubeadm bootstrap provider's join tokens —
// reaches the cluster through its agents. Clusters annotated
// fleet.edgefleet.io/edge-reach=disabled are left direct.
//
// The Secret, not the controllers' HTTPS_PROXY, carries the proxy: it
// applies per cluster, so a management cluster that also runs clusters of
// other providers keeps dialling those directly, and no Cluster API
// Deployment needs changing.
type KubeconfigReconciler struct {
	Client    client.Client
	APIReader client.Reader
	// ProxyURL is the proxy as Cluster API's controllers reach it.
	ProxyURL *url.URL
	// Credentials is called per reconcile; nil until the hub CA is known.
	Credentials func() *Credentials
	// Disabled removes proxy-url from every fleet cluster's kubeconfig
	// (the hub runs without edge reach).
	Disabled bool
}

// SetupWithManager registers the reconciler.
func (r *KubeconfigReconciler) SetupWithManager(mgr ctrl.Manager, options controller.Options) error {
	if r.Client == nil || r.APIReader == nil || (!r.Disabled && (r.ProxyURL == nil || r.Credentials == nil)) {
		return fmt.Errorf("edge-reach kubeconfig reconciler: Client, APIReader, and unless Disabled ProxyURL and Credentials, must be set")
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&clusterv1.Cluster{}, builder.WithPredicates(predicate.NewPredicateFuncs(isFleetCluster))).
		Named("edgereach-kubeconfig").
		WithOptions(options).
		Complete(r)
}

func isFleetCluster(o client.Object) bool {
	c, ok := o.(*clusterv1.Cluster)
	return ok && c.Spec.InfrastructureRef.Kind == "EdgeCluster" && c.Spec.InfrastructureRef.APIGroup == infrav1.GroupVersion.Group
}

// Reconcile brings one cluster's kubeconfig Secret's proxy-url up to date.
func (r *KubeconfigReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cluster := &clusterv1.Cluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, cluster); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !cluster.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	want := ""
	if !r.Disabled && cluster.Annotations[infrav1.EdgeReachAnnotation] != "disabled" {
		creds := r.Credentials()
		if creds == nil {
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
		want = creds.ProxyURL(r.ProxyURL, cluster)
	}
	s := &corev1.Secret{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: secret.Name(cluster.Name, secret.Kubeconfig)}, s)
	if apierrors.IsNotFound(err) {
		// Written later by the control-plane provider (or the user).
		return ctrl.Result{RequeueAfter: missingInterval}, nil
	}
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("reading the kubeconfig Secret of cluster %s: %w", req, err)
	}
	data, changed, err := withProxyURL(s.Data[secret.KubeconfigDataName], want)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("kubeconfig Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	if changed {
		patch := client.MergeFromWithOptions(s.DeepCopy(), client.MergeFromWithOptimisticLock{})
		s.Data[secret.KubeconfigDataName] = data
		if err := r.Client.Patch(ctx, s, patch); err != nil {
			return ctrl.Result{}, fmt.Errorf("setting proxy-url in %s/%s: %w", s.Namespace, s.Name, err)
		}
		ctrl.LoggerFrom(ctx).Info("Pointed the cluster's kubeconfig at the edge-reach proxy", "Secret", s.Name, "enabled", want != "")
	}
	return ctrl.Result{RequeueAfter: recheckInterval}, nil
}

// withProxyURL sets every cluster entry's proxy-url to want ("" removes it).
func withProxyURL(raw []byte, want string) ([]byte, bool, error) {
	cfg, err := clientcmd.Load(raw)
	if err != nil {
		return nil, false, fmt.Errorf("parsing kubeconfig: %w", err)
	}
	changed := false
	for _, c := range cfg.Clusters {
		if c.ProxyURL != want {
			c.ProxyURL = want
			changed = true
		}
	}
	if !changed {
		return raw, false, nil
	}
	out, err := clientcmd.Write(*cfg)
	return out, true, err
}
