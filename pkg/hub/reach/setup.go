package reach

import (
	"context"
	"fmt"
	"net/url"
	"sync"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	"github.com/edgefleet/fleet/pkg/hub/gateway"
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

// Setup adds the proxy and the kubeconfig reconciler to mgr. The gateway
// carries the tunnels and owns the CA the credentials derive from.
func Setup(_ context.Context, mgr ctrl.Manager, gw *gateway.Server, opts SetupOptions) (*Proxy, error) {
	adv := opts.AdvertiseURL
	if adv == "" {
		adv = "http://" + opts.Addr
	}
	u, err := url.Parse(adv)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") || u.User != nil {
		return nil, fmt.Errorf("edge-reach proxy advertise URL %q: want http://host:port", adv)
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
