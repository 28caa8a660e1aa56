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

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/tools/clientcmd"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/secret"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/pkg/cli/completion"
	"github.com/edgefleet/fleet/pkg/cli/kube"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// Options is `kubectl fleet kubeconfig`.
type Options struct {
	flags *genericclioptions.ConfigFlags
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
}

// NewCmd returns `kubectl fleet kubeconfig`.
func NewCmd(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{flags: flags, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "kubeconfig CLUSTER [--proxy-url http://HUB:7444]",
		Short: "Print a kubeconfig that reaches an edge cluster through the hub",
		Long: "Print the admin kubeconfig of a fleet cluster. Its cluster entry has the hub's edge-reach proxy as\n" +
			"proxy-url, with this cluster's proxy credentials, so kubectl reaches the cluster's API server through\n" +
			"one of its agents from anywhere the hub's proxy is reachable. TLS is end to end: the hub never sees\n" +
			"inside the connection. Treat the output as a secret: it holds the cluster's admin credentials.",
		Example: "  kubectl fleet kubeconfig store-042 > store-042.kubeconfig\n" +
			"  # a kubeconfig leaked: retire the credential in it\n" +
			"  kubectl fleet kubeconfig store-042 --rotate-credential > store-042.kubeconfig\n" +
			"  kubectl --kubeconfig store-042.kubeconfig get nodes\n\n" +
			"  # from outside the management cluster, through the proxy's external address:\n" +
			"  kubectl fleet kubeconfig store-042 --proxy-url http://fleet-proxy.example.com:7444",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completion.Clusters(flags),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(args); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&o.ProxyURL, "proxy-url", "", "Reach the hub's edge-reach proxy at this URL instead of the one the hub wrote (http://host:port).")
	cmd.Flags().BoolVar(&o.RotateCredential, "rotate-credential", false, "Retire the cluster's edge-reach proxy credential (every kubeconfig printed before stops working; Cluster API's Secret is rewritten by the hub) and print a kubeconfig with the new one.")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", 2*time.Minute, "With --rotate-credential: how long to wait for the hub to write the new credential.")
	return cmd
}

// Complete takes the arguments.
func (o *Options) Complete(args []string) error {
	o.Name = args[0]
	return nil
}

// Validate checks --proxy-url.
func (o *Options) Validate() error {
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
	conn, err := kube.Connect(o.flags)
	if err != nil {
		return err
	}
	cluster := &clusterv1.Cluster{}
	if err := conn.Client.Get(ctx, client.ObjectKey{Namespace: conn.Namespace, Name: o.Name}, cluster); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("cluster %q not found in namespace %s (see `kubectl fleet get clusters`)", o.Name, conn.Namespace)
		}
		return conn.Explain(err)
	}
	s := &corev1.Secret{}
	name := secret.Name(o.Name, secret.Kubeconfig)
	if err := conn.Client.Get(ctx, client.ObjectKey{Namespace: conn.Namespace, Name: name}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("cluster %s has no kubeconfig Secret %s yet: its control plane has not been initialised", o.Name, name)
		}
		return conn.Explain(err)
	}
	if o.RotateCredential {
		if s, err = o.rotate(ctx, conn, cluster, s); err != nil {
			return err
		}
	}
	cfg, err := clientcmd.Load(s.Data[secret.KubeconfigDataName])
	if err != nil {
		return fmt.Errorf("Secret %s holds no valid kubeconfig: %w", name, err)
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
	epoch, _ := strconv.ParseUint(cluster.Annotations[infrav1.ReachCredentialEpochAnnotation], 10, 63)
	patch := client.MergeFromWithOptions(cluster.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if cluster.Annotations == nil {
		cluster.Annotations = map[string]string{}
	}
	cluster.Annotations[infrav1.ReachCredentialEpochAnnotation] = strconv.FormatUint(epoch+1, 10)
	if err := conn.Client.Patch(ctx, cluster, patch); err != nil {
		return nil, conn.Explain(err)
	}
	fmt.Fprintf(o.ErrOut, "Retired the edge-reach credential of cluster %s (epoch %d); waiting for the hub to write the new one…\n", o.Name, epoch+1)
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	key := client.ObjectKeyFromObject(s)
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
	cfg, err := clientcmd.Load(s.Data[secret.KubeconfigDataName])
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
