package reach

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"sync"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	"github.com/edgefleet/fleet/pkg/pki"
)

// SetupOptions configure edge reach in a hub.
type SetupOptions struct {
	Options
	// AdvertiseURL is the proxy as Cluster API's controllers (and, through
	// `kubectl fleet kubeconfig`, operators) reach it, e.g.
	// http://fleet-hub-proxy.fleet-system.svc:8081. Default: http://Addr.
	AdvertiseURL string
	// Controller options for the kubeconfig reconciler.
	Controller controller.Options
}

// Gateway is the hub's gateway as edge reach needs it: it carries the
// tunnels and owns the CA the credentials derive from (once Ready).
type Gateway interface {
	ClusterDialer
	Ready() <-chan struct{}
	CA() *pki.CA
}

// Setup adds the proxy and the kubeconfig reconciler to mgr.
func Setup(_ context.Context, mgr ctrl.Manager, gw Gateway, opts SetupOptions) (*Proxy, error) {
	u, err := advertiseURL(opts.AdvertiseURL, opts.Addr)
	if err != nil {
		return nil, err
	}
	var once sync.Once
	var creds *Credentials
	credentials := func() *Credentials {
		select {
		case <-gw.Ready():
			once.Do(func() { creds = NewCredentials(gw.CA()) })
			return creds
		default:
			return nil
		}
	}
	p := New(opts.Options, mgr.GetClient(), gw, credentials)
	if err := mgr.Add(p); err != nil {
		return nil, err
	}
	if err := (&KubeconfigReconciler{
		Client:      mgr.GetClient(),
		APIReader:   mgr.GetAPIReader(),
		ProxyURL:    u,
		Credentials: credentials,
	}).SetupWithManager(mgr, opts.Controller); err != nil {
		return nil, fmt.Errorf("setting up the edge-reach kubeconfig reconciler: %w", err)
	}
	return p, nil
}

// SetupDisabled runs only the kubeconfig reconciler, removing the proxy-url
// an earlier run with edge reach wrote: with the proxy gone it would only
// cut Cluster API off from every fleet cluster.
func SetupDisabled(mgr ctrl.Manager, options controller.Options) error {
	if err := (&KubeconfigReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Disabled: true}).
		SetupWithManager(mgr, options); err != nil {
		return fmt.Errorf("setting up the edge-reach kubeconfig reconciler: %w", err)
	}
	return nil
}

// advertiseURL is where Cluster API's controllers reach the proxy: the
// flag's URL, or http://<bind address> when that names a host. Go's
// clients verify an https proxy with the target's CA, so only http works.
func advertiseURL(adv, bind string) (*url.URL, error) {
	if adv == "" {
		host, _, err := net.SplitHostPort(bind)
		if err != nil || host == "" || net.ParseIP(host) != nil && net.ParseIP(host).IsUnspecified() {
			return nil, fmt.Errorf("edge-reach proxy: --proxy-advertise-url is required when --proxy-bind-address (%q) names no host: "+
				"it is how Cluster API's controllers reach this hub, e.g. http://fleet-hub-proxy.fleet-system.svc:7444", bind)
		}
		adv = "http://" + bind
	}
	u, err := url.Parse(adv)
	if err != nil || u.Scheme != "http" || u.Hostname() == "" || u.Port() == "" || u.User != nil || (u.Path != "" && u.Path != "/") {
		return nil, fmt.Errorf("edge-reach proxy advertise URL %q: want http://host:port (no credentials, no path; "+
			"https cannot work: Go clients check an https proxy against the target cluster's CA)", adv)
	}
	u.Path = ""
	return u, nil
}
