package kube

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

func TestExplainMissingCRDs(t *testing.T) {
	c := &Connection{Context: "prod-hub", Config: &rest.Config{Host: "https://10.0.0.1:6443"}}
	err := c.Explain(fmt.Errorf("listing: %w", &meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: "infrastructure.cluster.x-k8s.io", Kind: "EdgeHost"}}))
	for _, want := range []string{"fleet's CRDs are not installed", `context "prod-hub"`, "kubectl apply -k manifests/default"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Explain() = %v, want it to say %q", err, want)
		}
	}
	if c.Explain(nil) != nil {
		t.Error("Explain(nil) != nil")
	}
}

// A 404 that names no object is the API server saying it does not serve
// the resource: fleet's CRDs are missing, not the object.
func TestNoKind(t *testing.T) {
	gvk := schema.GroupVersionKind{Group: "infrastructure.cluster.x-k8s.io", Version: "v1alpha1", Kind: "EdgeHost"}
	missing := apierrors.NewNotFound(schema.GroupResource{Group: gvk.Group, Resource: "edgehosts"}, "kiosk-1")
	if err := NoKind(missing, gvk); !apierrors.IsNotFound(err) {
		t.Errorf("an object that is not there: %v, want NotFound", err)
	}
	unserved := &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: 404,
		Reason: metav1.StatusReasonNotFound, Message: "the server could not find the requested resource", Details: &metav1.StatusDetails{}}}
	if err := NoKind(unserved, gvk); !meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
		t.Errorf("a resource the server does not serve: %v, want a NoKindMatchError", err)
	}
}

// The plugin takes kubectl's connection flags: the same names, shorthands
// and defaults as cli-runtime's genericclioptions (--cache-dir, which only
// discovery's cache reads, is taken and unused).
func TestFlagsAreKubectls(t *testing.T) {
	ours := pflag.NewFlagSet("fleet", pflag.ContinueOnError)
	NewConfigFlags().AddFlags(ours)
	kubectl := pflag.NewFlagSet("kubectl", pflag.ContinueOnError)
	genericclioptions.NewConfigFlags(true).AddFlags(kubectl)
	kubectl.VisitAll(func(k *pflag.Flag) {
		f := ours.Lookup(k.Name)
		if f == nil {
			t.Errorf("--%s missing", k.Name)
			return
		}
		if k.Name == "cache-dir" {
			return
		}
		if f.Shorthand != k.Shorthand || f.DefValue != k.DefValue || f.Value.Type() != k.Value.Type() {
			t.Errorf("--%s: -%s %s default %q, kubectl has -%s %s default %q", k.Name, f.Shorthand, f.Value.Type(), f.DefValue,
				k.Shorthand, k.Value.Type(), k.DefValue)
		}
	})
	ours.VisitAll(func(f *pflag.Flag) {
		if kubectl.Lookup(f.Name) == nil {
			t.Errorf("--%s is not kubectl's", f.Name)
		}
	})
}

// The flags reach the client's configuration as kubectl's do.
func TestFlagsConfigure(t *testing.T) {
	dir := t.TempDir()
	kc := filepath.Join(dir, "kubeconfig")
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["a"] = &clientcmdapi.Cluster{Server: "https://a.example:6443"}
	cfg.Clusters["b"] = &clientcmdapi.Cluster{Server: "https://b.example:6443"}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "from-file"}
	cfg.Contexts["a"] = &clientcmdapi.Context{Cluster: "a", AuthInfo: "u", Namespace: "ns-a"}
	cfg.Contexts["b"] = &clientcmdapi.Context{Cluster: "b", AuthInfo: "u"}
	cfg.CurrentContext = "a"
	if err := clientcmd.WriteToFile(*cfg, kc); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args                    []string
		host, ns, token, asUser string
		extra                   map[string][]string
	}{
		{args: nil, host: "https://a.example:6443", ns: "ns-a", token: "from-file"},
		{args: []string{"--context", "b"}, host: "https://b.example:6443", ns: "default", token: "from-file"},
		{args: []string{"-n", "other", "-s", "https://c.example", "--token", "t"}, host: "https://c.example", ns: "other", token: "t"},
		{args: []string{"--as", "alice", "--as-user-extra", "scopes=a", "--as-user-extra", "scopes=b"}, host: "https://a.example:6443",
			ns: "ns-a", token: "from-file", asUser: "alice", extra: map[string][]string{"scopes": {"a", "b"}}},
	} {
		f := NewConfigFlags()
		fs := pflag.NewFlagSet("fleet", pflag.ContinueOnError)
		f.AddFlags(fs)
		if err := fs.Parse(append([]string{"--kubeconfig", kc}, tc.args...)); err != nil {
			t.Fatal(err)
		}
		rc, err := f.ToRESTConfig()
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		ns, _, err := f.ToRawKubeConfigLoader().Namespace()
		if err != nil || rc.Host != tc.host || ns != tc.ns || rc.BearerToken != tc.token || rc.Impersonate.UserName != tc.asUser ||
			!reflect.DeepEqual(rc.Impersonate.Extra, tc.extra) || !strings.HasPrefix(rc.UserAgent, "kubectl-fleet/") {
			t.Errorf("%v: host %s ns %s (%v) token %s as %q %v agent %s", tc.args, rc.Host, ns, err, rc.BearerToken,
				rc.Impersonate.UserName, rc.Impersonate.Extra, rc.UserAgent)
		}
	}
	f := NewConfigFlags()
	fs := pflag.NewFlagSet("fleet", pflag.ContinueOnError)
	f.AddFlags(fs)
	_ = fs.Parse([]string{"--kubeconfig", kc, "--context", "nope"})
	if _, err := f.ToRESTConfig(); err == nil || !strings.Contains(err.Error(), `context "nope" does not exist`) {
		t.Errorf("unknown context: %v", err)
	}
}

// A list option that cannot be applied is an error, never a wider List.
func TestListRefusesOptionsItCannotApply(t *testing.T) {
	c := NewClient(nil, Scheme())
	for _, opt := range []ListOption{HasLabels{"not a key!"}, MatchingLabelsSelector{labels.Nothing()}} {
		if err := c.List(context.Background(), &corev1.SecretList{}, opt); err == nil {
			t.Errorf("List with %#v: no error", opt)
		}
	}
}
