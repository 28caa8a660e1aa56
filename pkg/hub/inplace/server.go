package inplace

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	runtimecatalog "sigs.k8s.io/cluster-api/api/runtime/catalog"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	runtimeserver "sigs.k8s.io/cluster-api/exp/runtime/server"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/edgefleet/fleet/pkg/hub/identity"
)

// ExtensionName names the ExtensionConfig that registers the hooks by
// default; the handlers register as "<handler>.fleet".
const ExtensionName = "fleet"

// Handler names, as Cluster API's ExtensionConfig status lists them.
const (
	CanUpdateMachineHandler    = "can-update-machine"
	CanUpdateMachineSetHandler = "can-update-machineset"
	UpdateMachineHandler       = "update-machine"
)

const servingValidity = 365 * 24 * time.Hour

// Options set the hooks server up.
type Options struct {
	// Addr is the host:port the hooks listen on; port 0 picks a free one.
	Addr string
	// Namespace and CASecretName name the Secret keeping the hooks' CA;
	// its ca.crt is what the ExtensionConfig's inject-ca-from-secret
	// annotation points at.
	Namespace, CASecretName string
	// DNSNames and IPs are the names the serving certificate covers: the
	// Service's in a cluster, the loopback address in an embedded hub.
	DNSNames []string
	IPs      []net.IP
	// Register makes the hub keep the ExtensionConfig that registers the
	// hooks with Cluster API: pointing at Service in Namespace (port 443)
	// when set, as an install runs it, else at https://Addr (embedded hub,
	// tests). Cluster API refuses it unless its RuntimeSDK gate is on.
	Register bool
	Service  string
	// Name of the ExtensionConfig (default ExtensionName), and the
	// namespaces whose Machines it serves (default all): tests that run
	// several hubs on one API server give each its own.
	Name              string
	NamespaceSelector *metav1.LabelSelector
}

// Setup adds the hooks server to mgr. It serves on every replica: the
// hooks only read, so no leader is needed.
func Setup(ctx context.Context, mgr ctrl.Manager, o Options) error {
	if o.CASecretName == "" {
		o.CASecretName = "fleet-runtime-extension-ca"
	}
	if o.Name == "" {
		o.Name = ExtensionName
	}
	host, portStr, err := net.SplitHostPort(o.Addr)
	if err != nil {
		return fmt.Errorf("in-place hooks address %q: %w", o.Addr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 {
		return fmt.Errorf("in-place hooks address %q: want a port", o.Addr)
	}
	if port == 0 {
		if port, err = freePort(host); err != nil {
			return err
		}
	}
	url := "https://" + net.JoinHostPort(host, strconv.Itoa(port))
	c, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme()})
	if err != nil {
		return fmt.Errorf("in-place hooks: %w", err)
	}
	ca, err := identity.EnsureCA(ctx, c, c, o.Namespace, o.CASecretName)
	if err != nil {
		return fmt.Errorf("in-place hooks: %w", err)
	}
	certs := &identity.ServingCert{CA: ca, DNSNames: o.DNSNames, IPs: o.IPs, Validity: servingValidity, Name: "the in-place hooks"}
	if _, err := certs.Get(); err != nil {
		return err
	}
	catalog := runtimecatalog.New()
	if err := runtimehooksv1.AddToCatalog(catalog); err != nil {
		return fmt.Errorf("in-place hooks: %w", err)
	}
	srv, err := runtimeserver.New(runtimeserver.Options{Catalog: catalog, Host: host, Port: port,
		TLSOpts: []func(*tls.Config){func(cfg *tls.Config) {
			cfg.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return certs.Get() }
			// HTTP/1.1 only, as Cluster API's own servers: HTTP/2's rapid
			// reset (CVE-2023-44487).
			cfg.NextProtos = []string{"http/1.1"}
		}}})
	if err != nil {
		return fmt.Errorf("in-place hooks server: %w", err)
	}
	h := &Handlers{Client: mgr.GetClient()}
	timeout, fail := int32(10), runtimehooksv1.FailurePolicyFail
	for _, eh := range []runtimeserver.ExtensionHandler{
		{Hook: runtimehooksv1.CanUpdateMachine, Name: CanUpdateMachineHandler, HandlerFunc: h.CanUpdateMachine},
		{Hook: runtimehooksv1.CanUpdateMachineSet, Name: CanUpdateMachineSetHandler, HandlerFunc: h.CanUpdateMachineSet},
		{Hook: runtimehooksv1.UpdateMachine, Name: UpdateMachineHandler, HandlerFunc: h.UpdateMachine},
	} {
		eh.TimeoutSeconds, eh.FailurePolicy = &timeout, &fail
		if err := srv.AddExtensionHandler(eh); err != nil {
			return fmt.Errorf("in-place hooks: %w", err)
		}
	}
	if err := mgr.Add(srv); err != nil {
		return fmt.Errorf("adding the in-place hooks server: %w", err)
	}
	if !o.Register {
		return nil
	}
	cc := runtimev1.ClientConfig{URL: url}
	if o.Service != "" {
		cc = runtimev1.ClientConfig{Service: runtimev1.ServiceReference{Namespace: o.Namespace, Name: o.Service, Port: ptr.To[int32](443)}}
	}
	log := mgr.GetLogger().WithName("inplace")
	return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		// Cluster API's webhook may not serve yet, or refuse while its
		// RuntimeSDK gate is off: retry, more and more slowly, rather
		// than stop the hub.
		for delay := 2 * time.Second; ; delay = min(2*delay, 5*time.Minute) {
			err := register(ctx, c, o, cc)
			if err == nil {
				return nil
			}
			log.Info("cannot register the in-place update hooks with Cluster API (are its RuntimeSDK and InPlaceUpdates "+
				"feature gates on? docs/INSTALL.md); Machines are replaced on every change until then", "error", err.Error(), "retryIn", delay)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(delay):
			}
		}
	}))
}

func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("finding a free port for the in-place hooks: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// register creates or corrects the ExtensionConfig, with Cluster API
// injecting the CA from the hooks' Secret.
func register(ctx context.Context, c client.Client, o Options, cc runtimev1.ClientConfig) error {
	inject := o.Namespace + "/" + o.CASecretName
	ec := &runtimev1.ExtensionConfig{}
	err := c.Get(ctx, client.ObjectKey{Name: o.Name}, ec)
	switch {
	case apierrors.IsNotFound(err):
		ec = &runtimev1.ExtensionConfig{
			ObjectMeta: metav1.ObjectMeta{Name: o.Name,
				Annotations: map[string]string{runtimev1.InjectCAFromSecretAnnotation: inject}},
			Spec: runtimev1.ExtensionConfigSpec{ClientConfig: cc, NamespaceSelector: o.NamespaceSelector},
		}
		if err := c.Create(ctx, ec); err != nil {
			return fmt.Errorf("registering the in-place hooks: %w", err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("reading ExtensionConfig %s: %w", o.Name, err)
	case equality.Semantic.DeepEqual(withoutCA(ec.Spec.ClientConfig), cc) && ec.Annotations[runtimev1.InjectCAFromSecretAnnotation] == inject &&
		equality.Semantic.DeepEqual(ec.Spec.NamespaceSelector, o.NamespaceSelector):
		return nil
	}
	patch := client.MergeFrom(ec.DeepCopy())
	ec.Spec.ClientConfig.URL, ec.Spec.ClientConfig.Service = cc.URL, cc.Service
	ec.Spec.NamespaceSelector = o.NamespaceSelector
	if ec.Annotations == nil {
		ec.Annotations = map[string]string{}
	}
	ec.Annotations[runtimev1.InjectCAFromSecretAnnotation] = inject
	if err := c.Patch(ctx, ec, patch); err != nil {
		return fmt.Errorf("updating ExtensionConfig %s: %w", o.Name, err)
	}
	return nil
}

// withoutCA is cc without the caBundle Cluster API injects.
func withoutCA(cc runtimev1.ClientConfig) runtimev1.ClientConfig {
	cc.CABundle = nil
	return cc
}
