package kubeconfig

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

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
		Data: map[string][]byte{kubeconfigDataKey: data}}
}

// Cluster API writes the Cluster often: a rotation that meets a conflict
// reads the Cluster again and bumps the epoch it finds, once.
func TestRotateRetriesAConflict(t *testing.T) {
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "store", ResourceVersion: "1",
		Annotations: map[string]string{infrav1.ReachCredentialEpochAnnotation: "4"}}}
	s := kubeconfigSecret(t, "http://epoch4@proxy:7444")
	s.ResourceVersion = "1"
	dyn := dynamicfake.NewSimpleDynamicClient(kube.Scheme(), cluster.DeepCopy(), s.DeepCopy())
	clusters := clusterv1.GroupVersion.WithResource("clusters")
	secrets := corev1.SchemeGroupVersion.WithResource("secrets")
	conflicts := 2
	// The API server's optimistic lock: a patch that carries a
	// resourceVersion other than the stored one is a Conflict.
	dyn.PrependReactor("patch", "clusters", func(a clienttesting.Action) (bool, runtime.Object, error) {
		tracker := dyn.Tracker()
		cur, err := tracker.Get(clusters, "default", "store")
		if err != nil {
			return true, nil, err
		}
		stored := cur.(*unstructured.Unstructured)
		if conflicts > 0 {
			conflicts--
			// Cluster API wrote it meanwhile.
			stored.SetLabels(map[string]string{"written": fmt.Sprint(conflicts)})
			rv, _ := strconv.Atoi(stored.GetResourceVersion())
			stored.SetResourceVersion(strconv.Itoa(rv + 1))
			if err := tracker.Update(clusters, stored, "default"); err != nil {
				return true, nil, err
			}
		}
		var patch struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(a.(clienttesting.PatchAction).GetPatch(), &patch); err != nil {
			return true, nil, err
		}
		if patch.Metadata.ResourceVersion != stored.GetResourceVersion() {
			return true, nil, apierrors.NewConflict(clusters.GroupResource(), "store", errors.New("the object has been modified"))
		}
		// The hub writes the new credential once the epoch moves.
		next := kubeconfigSecret(t, "http://epoch5@proxy:7444")
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(next)
		if err != nil {
			return true, nil, err
		}
		if err := tracker.Update(secrets, &unstructured.Unstructured{Object: u}, "default"); err != nil {
			return true, nil, err
		}
		return false, nil, nil
	})
	c := kube.NewClient(dyn, kube.Scheme())
	var errOut bytes.Buffer
	o := &Options{Name: "store", RotateCredential: true, Timeout: 10 * time.Second,
		IOStreams: genericiooptions.IOStreams{Out: &bytes.Buffer{}, ErrOut: &errOut}}
	conn := &kube.Connection{Client: c, Namespace: "default"}
	read := &clusterv1.Cluster{}
	if err := c.Get(context.Background(), kube.ObjectKeyFromObject(cluster), read); err != nil {
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
	if err := c.Get(context.Background(), kube.ObjectKeyFromObject(cluster), cur); err != nil {
		t.Fatal(err)
	}
	if e := cur.Annotations[infrav1.ReachCredentialEpochAnnotation]; e != "5" || conflicts != 0 {
		t.Errorf("epoch %s after %d conflicts left, want 5 after 2 met", e, conflicts)
	}
}
