package kube

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/edgefleet/fleet/pkg/fleetscheme"
)

// Scheme knows every kind the plugin reads or writes.
func Scheme() *runtime.Scheme { return fleetscheme.New() }

// Connection is a client to the hub cluster and the namespace to work in.
type Connection struct {
	Client *Client
	// REST is a client for requests the typed client does not make (the
	// API server's tables); it decodes what it reads as unstructured.
	REST      rest.Interface
	Config    *rest.Config
	Namespace string
	Context   string
}

// Connect builds a client from kubectl's flags. The namespace is -n, else
// the kubeconfig context's, else "default".
func Connect(flags *ConfigFlags) (*Connection, error) {
	cfg, err := flags.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("reading kubeconfig: %w", err)
	}
	loader := flags.ToRawKubeConfigLoader()
	ns, _, err := loader.Namespace()
	if err != nil {
		return nil, fmt.Errorf("resolving the namespace: %w", emptyConfig(err))
	}
	raw, _ := loader.RawConfig()
	ctxName := raw.CurrentContext
	if c := flags.overrides.CurrentContext; c != "" {
		ctxName = c
	}
	conn, err := NewConnection(cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to the cluster of context %q (%s): %w", ctxName, cfg.Host, err)
	}
	conn.Namespace, conn.Context = ns, ctxName
	return conn, nil
}

// NewConnection is a Connection to the API server of cfg, with no
// namespace or context set.
func NewConnection(cfg *rest.Config) (*Connection, error) {
	dcfg := dynamic.ConfigFor(cfg)
	httpClient, err := rest.HTTPClientFor(dcfg)
	if err != nil {
		return nil, err
	}
	dcfg.GroupVersion = nil
	rc, err := rest.UnversionedRESTClientForConfigAndClient(dcfg, httpClient)
	if err != nil {
		return nil, err
	}
	return &Connection{Client: NewClient(dynamic.New(rc), Scheme()), REST: rc, Config: cfg}, nil
}

// Explain turns common API errors into advice.
func (c *Connection) Explain(err error) error {
	if err == nil {
		return nil
	}
	var noKind *meta.NoKindMatchError
	if errors.As(err, &noKind) || meta.IsNoMatchError(err) {
		return fmt.Errorf("fleet's CRDs are not installed in the cluster of context %q (%s): install the hub with `kubectl apply -k manifests/default`, or pick another --context: %w",
			c.Context, c.Config.Host, err)
	}
	return err
}
