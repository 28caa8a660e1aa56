package hostupgrade

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// Parse reads a "v"-prefixed semantic version such as v1.36.3.
func Parse(v string) (*version.Version, error) {
	if !strings.HasPrefix(v, "v") {
		return nil, fmt.Errorf("version %q: want vMAJOR.MINOR.PATCH", v)
	}
	s, err := version.ParseSemantic(v)
	if err != nil {
		return nil, fmt.Errorf("version %q: want vMAJOR.MINOR.PATCH: %w", v, err)
	}
	return s, nil
}

// Step refuses what kubeadm cannot do from one version to another: a
// downgrade or a skipped minor version. The same version is no step.
func Step(from, to string) error {
	f, err := Parse(from)
	if err != nil {
		return err
	}
	t, err := Parse(to)
	if err != nil {
		return err
	}
	switch {
	case t.LessThan(f):
		return fmt.Errorf("%s would be a downgrade, which kubeadm cannot do", to)
	case t.Major() != f.Major() || t.Minor() > f.Minor()+1:
		return fmt.Errorf("%s skips a minor version; upgrade one minor version at a time", to)
	}
	return nil
}

// Staged says whether the host runs version to or has it staged, and if
// not, how far its agent is in fetching it (an EdgeKubernetesRelease).
func Staged(h *infrav1.EdgeHost, to string) error {
	if h.Status.KubernetesVersion == to || slices.Contains(h.Status.Facts.KubernetesVersions, to) {
		return nil
	}
	for _, s := range h.Status.Staging {
		if s.Version != to {
			continue
		}
		switch s.State {
		case infrav1.StagingFailed:
			return fmt.Errorf("EdgeHost %s could not fetch %s: %s", h.Name, to, s.Message)
		case infrav1.StagingDownloading:
			msg := fmt.Sprintf("EdgeHost %s is still fetching %s", h.Name, to)
			if s.TotalBytes > 0 {
				msg += fmt.Sprintf(" (%d%% of %d MiB)", s.Bytes*100/s.TotalBytes, s.TotalBytes>>20)
			}
			if s.Message != "" {
				msg += ": " + s.Message
			}
			return errors.New(msg + "; wait until it is staged")
		}
	}
	staged := "none"
	if v := h.Status.Facts.KubernetesVersions; len(v) > 0 {
		staged = strings.Join(v, ", ")
	}
	return fmt.Errorf("EdgeHost %s cannot get %s: stage it under /opt/fleet/kubernetes/%s on the host (staged: %s), "+
		"or create an EdgeKubernetesRelease of %s that selects it", h.Name, to, to, staged, to)
}

// Check says why host h cannot move to version to in place, or nil: its
// agent must report the version it runs (only an agent that does can
// upgrade), the step must be one kubeadm takes, and the version staged.
func Check(h *infrav1.EdgeHost, to string) error {
	running := h.Status.KubernetesVersion
	if running == "" {
		return fmt.Errorf("the agent of EdgeHost %s reports no Kubernetes version (a fleet-agent too old, or not run by systemd) and cannot upgrade in place", h.Name)
	}
	if err := Step(running, to); err != nil {
		return fmt.Errorf("EdgeHost %s runs %s: %w", h.Name, running, err)
	}
	return Staged(h, to)
}

// Failed is the host's report of a failed upgrade to version to, or nil.
// Its agent does not try the same order again by itself.
func Failed(h *infrav1.EdgeHost, to string) *infrav1.HostUpgradeStatus {
	if h == nil {
		return nil
	}
	u := h.Status.Upgrade
	if u != nil && u.To == to && (u.State == infrav1.UpgradeFailed || u.State == infrav1.UpgradeRolledBack) {
		return u
	}
	return nil
}
