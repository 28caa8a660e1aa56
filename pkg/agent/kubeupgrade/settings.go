package kubeupgrade

import (
	"fmt"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/edgefleet/fleet/pkg/agent/cloudconfig"
)

// kubeadmConfigPaths are where CABPK's cloud-config writes kubeadm's
// configuration: for kubeadm init, and for kubeadm join.
var kubeadmConfigPaths = []string{"/run/kubeadm/kubeadm.yaml", "/run/kubeadm/kubeadm-join-config.yaml"}

// settings are what the host's bootstrap told kubeadm that an upgrade must
// tell it again: the preflight errors to ignore, and the patches directory
// (kubeadm upgrade rewrites the static pods and the kubelet's configuration,
// and would drop the bootstrap's patches otherwise).
type settings struct {
	ignorePreflightErrors []string
	patchesDir            string
}

func (s settings) flags() []string {
	var out []string
	if len(s.ignorePreflightErrors) > 0 {
		out = append(out, "--ignore-preflight-errors="+strings.Join(s.ignorePreflightErrors, ","))
	}
	if s.patchesDir != "" {
		out = append(out, "--patches="+s.patchesDir)
	}
	return out
}

// settingsFromBootstrap reads them from the Init- or JoinConfiguration of
// the kubeadm file a CABPK cloud-config writes; none without one.
func settingsFromBootstrap(data []byte) (settings, error) {
	if len(data) == 0 {
		return settings{}, nil
	}
	cfg, err := cloudconfig.Parse(data, cloudconfig.MetaData{})
	if err != nil {
		return settings{}, fmt.Errorf("reading the bootstrap data for kubeadm's settings: %w", err)
	}
	for _, f := range cfg.WriteFiles {
		if !slices.Contains(kubeadmConfigPaths, f.Path) {
			continue
		}
		content, err := f.Decode()
		if err != nil {
			return settings{}, fmt.Errorf("reading %s from the bootstrap data: %w", f.Path, err)
		}
		for _, doc := range strings.Split(string(content), "\n---") {
			var c struct {
				Kind             string `json:"kind"`
				NodeRegistration struct {
					IgnorePreflightErrors []string `json:"ignorePreflightErrors"`
				} `json:"nodeRegistration"`
				Patches struct {
					Directory string `json:"directory"`
				} `json:"patches"`
			}
			if err := yaml.Unmarshal([]byte(doc), &c); err != nil {
				return settings{}, fmt.Errorf("reading %s from the bootstrap data: %w", f.Path, err)
			}
			if c.Kind == "InitConfiguration" || c.Kind == "JoinConfiguration" {
				return settings{ignorePreflightErrors: c.NodeRegistration.IgnorePreflightErrors, patchesDir: c.Patches.Directory}, nil
			}
		}
	}
	return settings{}, nil
}
