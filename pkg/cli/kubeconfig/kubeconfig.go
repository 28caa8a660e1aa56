package kubeconfig

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/edgefleet/fleet/pkg/cli/kube"
	"github.com/edgefleet/fleet/pkg/cli/validate"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// The kubeconfig Secret Cluster API writes for a cluster, as
// sigs.k8s.io/cluster-api/util/secret names it; that package links
// controller-runtime's client, which the plugin does without.
const kubeconfigDataKey = "value"

func kubeconfigSecretName(cluster string) string { return cluster + "-kubeconfig" }

// Options is `kubectl fleet kubeconfig`.
type Options struct {
	flags *kube.ConfigFlags
	genericiooptions.IOStreams
	Name string
	// ProxyURL replaces the scheme, host and port of the proxy the hub
	// wrote (which is how Cluster API reaches it, often a cluster-internal
	// Service), keeping the cluster's credentials.
	ProxyURL string
	proxy    *url.URL
	// RotateCredential retires the cluster's proxy credential (bumps its
	// epoch) and prints the kubeconfig once the hub has written the new one.
	RotateCredential bool
	// Timeout bounds the wait for the hub after a rotation.
	Timeout time.Duration

	conn *kube.Connection
}

// Complete takes the cluster name and builds the client.
func (o *Options) Complete(args []string) error {
	o.Name = args[0]
	var err error
	o.conn, err = kube.Connect(o.flags)
	return err
}

// Validate checks the name, --proxy-url and --timeout.
func (o *Options) Validate() error {
	if err := validate.ClusterName(o.Name); err != nil {
		return err
	}
	if o.RotateCredential && o.Timeout <= 0 {
		return fmt.Errorf("--timeout %s: want a positive duration", o.Timeout)
	}
	if o.ProxyURL == "" {
		return nil
	}
	u, err := url.Parse(o.ProxyURL)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") || u.Path != "" && u.Path != "/" {
		return fmt.Errorf("--proxy-url %q: want http://host:port", o.ProxyURL)
	}
	if u.User != nil {
		return errors.New("--proxy-url must not hold credentials: the cluster's own are kept from the kubeconfig")
	}
	o.proxy = u
	return nil
}

// Run prints the kubeconfig.
func (o *Options) Run(ctx context.Context) error {
	conn := o.conn
	cluster := &clusterv1.Cluster{}
	if err := conn.Client.Get(ctx, kube.ObjectKey{Namespace: conn.Namespace, Name: o.Name}, cluster); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("cluster %q not found in namespace %s (see `kubectl fleet get clusters`)", o.Name, conn.Namespace)
		}
		return conn.Explain(err)
	}
	s := &corev1.Secret{}
	name := kubeconfigSecretName(o.Name)
	if err := conn.Client.Get(ctx, kube.ObjectKey{Namespace: conn.Namespace, Name: name}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("cluster %s has no kubeconfig Secret %s yet: its control plane has not been initialised", o.Name, name)
		}
		return conn.Explain(err)
	}
	if o.RotateCredential {
		var err error
		if s, err = o.rotate(ctx, conn, cluster, s); err != nil {
			return err
		}
	}
	cfg, err := clientcmd.Load(s.Data[kubeconfigDataKey])
	if err != nil {
		return fmt.Errorf("the Secret %s holds no valid kubeconfig: %w", name, err)
	}
	proxied := 0
	for entry, c := range cfg.Clusters {
		if c.ProxyURL == "" {
			continue
		}
		proxied++
		if o.proxy != nil {
			u, err := url.Parse(c.ProxyURL)
			if err != nil {
				return fmt.Errorf("cluster entry %s: proxy-url: %w", entry, err)
			}
			u.Scheme, u.Host = o.proxy.Scheme, o.proxy.Host
			c.ProxyURL = u.String()
		}
	}
	if proxied == 0 {
		why := "the hub has not written its proxy-url yet (it does within seconds of the Secret appearing)"
		if cluster.Annotations[infrav1.EdgeReachAnnotation] == "disabled" {
			why = "edge reach is disabled for it (annotation " + infrav1.EdgeReachAnnotation + "=disabled)"
		}
		fmt.Fprintf(o.ErrOut, "Warning: this kubeconfig dials cluster %s's API server directly: %s\n", o.Name, why)
	}
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		return err
	}
	_, err = o.Out.Write(out)
	return err
}

// rotate bumps the cluster's credential epoch and waits until the hub has
// rewritten the kubeconfig Secret's proxy-url with the new credential.
func (o *Options) rotate(ctx context.Context, conn *kube.Connection, cluster *clusterv1.Cluster, s *corev1.Secret) (*corev1.Secret, error) {
	if cluster.Annotations[infrav1.EdgeReachAnnotation] == "disabled" {
		return nil, fmt.Errorf("edge reach is disabled for cluster %s: it has no proxy credential to rotate", o.Name)
	}
	before := proxyURLs(s)
	// The epoch read is bumped with that resourceVersion, so each rotation
	// retires one credential; Cluster API writes the Cluster often, so a
	// conflict is read again and retried.
	var epoch uint64
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := conn.Client.Get(ctx, kube.ObjectKeyFromObject(cluster), cluster); err != nil {
			return err
		}
		epoch, _ = strconv.ParseUint(cluster.Annotations[infrav1.ReachCredentialEpochAnnotation], 10, 63)
		patch := kube.MergeFromWithOptimisticLock(cluster.DeepCopy())
		if cluster.Annotations == nil {
			cluster.Annotations = map[string]string{}
		}
		cluster.Annotations[infrav1.ReachCredentialEpochAnnotation] = strconv.FormatUint(epoch+1, 10)
		return conn.Client.Patch(ctx, cluster, patch)
	})
	if err != nil {
		return nil, conn.Explain(err)
	}
	fmt.Fprintf(o.ErrOut, "Retired the edge-reach credential of cluster %s (epoch %d); waiting for the hub to write the new one…\n", o.Name, epoch+1)
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	key := kube.ObjectKeyFromObject(s)
	for {
		cur := &corev1.Secret{}
		if err := conn.Client.Get(ctx, key, cur); err == nil && proxyURLs(cur) != before {
			return cur, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("the old credential is retired, but the hub did not write the new one into Secret %s within %s: "+
				"is fleet-hub running? Run `kubectl fleet kubeconfig %s` again later", s.Name, o.Timeout, o.Name)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// proxyURLs joins the proxy-urls of a kubeconfig Secret's cluster entries.
func proxyURLs(s *corev1.Secret) string {
	cfg, err := clientcmd.Load(s.Data[kubeconfigDataKey])
	if err != nil {
		return ""
	}
	var urls []string
	for _, c := range cfg.Clusters {
		urls = append(urls, c.ProxyURL)
	}
	slices.Sort(urls)
	return strings.Join(urls, ",")
}
