package kubeconfig

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/secret"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/edgefleet/fleet/pkg/cli/kube"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

func kubeconfigSecret(t *testing.T, proxyURL string) *corev1.Secret {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["store"] = &clientcmdapi.Cluster{Server: "https://store.default.fleet.internal:6443", ProxyURL: proxyURL}
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "store-kubeconfig"},
		Data: map[string][]byte{secret.KubeconfigDataName: data}}
}

// Cluster API writes the Cluster often: a rotation that meets a conflict
// reads the Cluster again and bumps the epoch it finds, once.
func TestRotateRetriesAConflict(t *testing.T) {
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "store",
		Annotations: map[string]string{infrav1.ReachCredentialEpochAnnotation: "4"}}}
	s := kubeconfigSecret(t, "http://epoch4@proxy:7444")
	conflicts := 2
	c := interceptor.NewClient(fake.NewClientBuilder().WithScheme(kube.Scheme()).WithObjects(cluster.DeepCopy(), s.DeepCopy()).Build(),
		interceptor.Funcs{Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if _, ok := obj.(*clusterv1.Cluster); ok && conflicts > 0 {
				conflicts--
				// Cluster API wrote it meanwhile.
				cur := &clusterv1.Cluster{}
				if err := cl.Get(ctx, client.ObjectKeyFromObject(obj), cur); err != nil {
					return err
				}
				cur.Labels = map[string]string{"written": fmt.Sprint(conflicts)}
				if err := cl.Update(ctx, cur); err != nil {
					return err
				}
			}
			if err := cl.Patch(ctx, obj, patch, opts...); err != nil {
				return err
			}
			// The hub writes the new credential.
			return cl.Update(ctx, kubeconfigSecret(t, "http://epoch5@proxy:7444"))
		}})
	var errOut bytes.Buffer
	o := &Options{Name: "store", RotateCredential: true, Timeout: 10 * time.Second,
		IOStreams: genericiooptions.IOStreams{Out: &bytes.Buffer{}, ErrOut: &errOut}}
	conn := &kube.Connection{Client: c, Namespace: "default"}
	read := &clusterv1.Cluster{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(cluster), read); err != nil {
		t.Fatal(err)
	}
	got, err := o.rotate(context.Background(), conn, read, s)
	if err != nil {
		t.Fatalf("rotate: %v", err)
	}
	if proxyURLs(got) != "http://epoch5@proxy:7444" {
		t.Errorf("the kubeconfig returned has %q", proxyURLs(got))
	}
	cur := &clusterv1.Cluster{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(cluster), cur); err != nil {
		t.Fatal(err)
	}
	if e := cur.Annotations[infrav1.ReachCredentialEpochAnnotation]; e != "5" || conflicts != 0 {
		t.Errorf("epoch %s after %d conflicts left, want 5 after 2 met", e, conflicts)
	}
}
