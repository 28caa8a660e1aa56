package kube

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/internal/version"
	"github.com/edgefleet/fleet/pkg/fleetscheme"
)

// Scheme knows every kind the plugin reads or writes.
func Scheme() *runtime.Scheme { return fleetscheme.New() }

// Connection is a client to the hub cluster and the namespace to work in.
type Connection struct {
	Client    client.Client
	Config    *rest.Config
	Namespace string
	Context   string
}

// NewConfigFlags returns kubectl's connection flags, with every client built
// from them announcing itself as kubectl-fleet to the API server.
func NewConfigFlags() *genericclioptions.ConfigFlags {
	flags := genericclioptions.NewConfigFlags(true)
	flags.WrapConfigFn = func(cfg *rest.Config) *rest.Config {
		cfg.UserAgent = "kubectl-fleet/" + version.Version
		return cfg
	}
	return flags
}

// Connect builds a client from kubectl's flags. The namespace is -n, else
// the kubeconfig context's, else "default".
func Connect(flags *genericclioptions.ConfigFlags) (*Connection, error) {
	cfg, err := flags.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("reading kubeconfig: %w", err)
	}
	ns, _, err := flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, fmt.Errorf("resolving the namespace: %w", err)
	}
	raw, _ := flags.ToRawKubeConfigLoader().RawConfig()
	ctxName := raw.CurrentContext
	if flags.Context != nil && *flags.Context != "" {
		ctxName = *flags.Context
	}
	c, err := client.New(cfg, client.Options{Scheme: Scheme()})
	if err != nil {
		return nil, fmt.Errorf("connecting to the cluster of context %q (%s): %w", ctxName, cfg.Host, err)
	}
	return &Connection{Client: c, Config: cfg, Namespace: ns, Context: ctxName}, nil
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
