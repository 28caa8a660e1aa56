package kube

import (
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/edgefleet/fleet/internal/version"
)

// ConfigFlags are kubectl's connection flags (--kubeconfig, --context,
// -n, -s, --token, --as, …), read with client-go's clientcmd as kubectl
// reads them. cli-runtime's genericclioptions has the same flags, but it
// links kubectl's resource builder, discovery and every built-in API type.
type ConfigFlags struct {
	loadingRules *clientcmd.ClientConfigLoadingRules
	overrides    clientcmd.ConfigOverrides
	userExtra    []string
}

// NewConfigFlags returns kubectl's connection flags, unbound.
func NewConfigFlags() *ConfigFlags {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	// As kubectl: no kubeconfig at all is an error, not a localhost:8080
	// guess.
	rules.DefaultClientConfig = &clientcmd.DefaultClientConfig
	return &ConfigFlags{loadingRules: rules, overrides: clientcmd.ConfigOverrides{ClusterDefaults: clientcmd.ClusterDefaults}}
}

// AddFlags binds the flags kubectl has, with kubectl's names and help.
func (f *ConfigFlags) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&f.loadingRules.ExplicitPath, clientcmd.RecommendedConfigPathFlag, "", "Path to the kubeconfig file to use for CLI requests.")
	names := clientcmd.RecommendedConfigOverrideFlags("")
	// kubectl offers neither basic authentication nor a proxy flag.
	names.AuthOverrideFlags.Username.LongName = ""
	names.AuthOverrideFlags.Password.LongName = ""
	names.ClusterOverrideFlags.ProxyURL.LongName = ""
	names.ClusterOverrideFlags.APIServer.ShortName = "s"
	names.AuthOverrideFlags.ImpersonateUID.Description = "UID to impersonate for the operation."
	names.ClusterOverrideFlags.TLSServerName.Description = "Server name to use for server certificate validation. If it is not provided, the hostname used to contact the server is used"
	names.ContextOverrideFlags.Namespace.Description = "If present, the namespace scope for this CLI request"
	names.ContextOverrideFlags.ClusterName.Description = "The name of the kubeconfig cluster to use"
	names.ContextOverrideFlags.AuthInfoName.Description = "The name of the kubeconfig user to use"
	names.CurrentContext.Description = "The name of the kubeconfig context to use"
	names.AuthOverrideFlags.Impersonate.Description = "Username to impersonate for the operation. User could be a regular user or a service account in a namespace."
	clientcmd.BindOverrideFlags(&f.overrides, fs, names)
	fs.StringArrayVar(&f.userExtra, "as-user-extra", nil, "User extras to impersonate for the operation, this flag can be repeated to specify multiple values for the same key.")
	// Taken, so that a kubectl command line works unchanged, and hidden:
	// with no discovery there is no cache to keep.
	fs.StringVar(new(string), "cache-dir", "", "Unused: kubectl fleet keeps no discovery cache.")
	_ = fs.MarkHidden("cache-dir")
}

// Namespace is -n's value ("" when not given).
func (f *ConfigFlags) Namespace() string { return f.overrides.Context.Namespace }

// ToRawKubeConfigLoader is the kubeconfig as the flags amend it.
func (f *ConfigFlags) ToRawKubeConfigLoader() clientcmd.ClientConfig {
	overrides := f.overrides
	if len(f.userExtra) > 0 {
		extra := map[string][]string{}
		for _, kv := range f.userExtra {
			if k, v, ok := strings.Cut(kv, "="); ok {
				extra[k] = append(extra[k], v)
			}
		}
		overrides.AuthInfo.ImpersonateUserExtra = extra
	}
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(f.loadingRules, &overrides)
}

// ToRESTConfig is the client configuration the flags select, announcing
// itself as kubectl-fleet to the API server.
func (f *ConfigFlags) ToRESTConfig() (*rest.Config, error) {
	cfg, err := f.ToRawKubeConfigLoader().ClientConfig()
	if err != nil {
		return nil, emptyConfig(err)
	}
	cfg.UserAgent = "kubectl-fleet/" + version.Version
	return cfg, nil
}

// emptyConfig says in one line where kubectl looks for a kubeconfig.
func emptyConfig(err error) error {
	if clientcmd.IsEmptyConfig(err) {
		return clientcmd.NewEmptyConfigError("no kubeconfig: give --kubeconfig, set KUBECONFIG or write ~/.kube/config")
	}
	return err
}
