package testhost

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// AgentConfig is what the host's /etc/fleet-agent/config.yaml says, as
// an image's first-boot step or an installer would write it.
type AgentConfig struct {
	Hub            string `json:"hub"`
	Token          string `json:"token,omitempty"`
	CACertHash     string `json:"caCertHash"`
	ResyncInterval string `json:"resyncInterval,omitempty"`
}

// StartAgent configures fleet-agent and restarts its unit, which until
// then waits for a configuration.
func (h *Host) StartAgent(ctx context.Context, c AgentConfig) error {
	b, err := yaml.Marshal(c)
	if err != nil {
		return fmt.Errorf("host %s: the agent's config: %w", h.Name, err)
	}
	if err := h.WriteFile("etc/fleet-agent/config.yaml", string(b), 0o600); err != nil {
		return fmt.Errorf("host %s: writing the agent's config: %w", h.Name, err)
	}
	return h.Unit(ctx, "restart", "fleet-agent.service")
}

// Unit starts, stops or restarts a unit of the host and waits for the
// job, with the box's systemctl.
func (h *Host) Unit(ctx context.Context, verb, unit string) error {
	switch verb {
	case "start", "stop", "restart":
	default:
		return fmt.Errorf("unit verb %q: want start, stop or restart", verb)
	}
	if out, err := h.Command(ctx, "systemctl", verb, unit).CombinedOutput(); err != nil {
		return fmt.Errorf("host %s: systemctl %s %s: %w: %s", h.Name, verb, unit, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Show returns properties of a unit, as systemctl show reports them.
func (h *Host) Show(ctx context.Context, unit string, props ...string) (map[string]string, error) {
	args := []string{"show", unit}
	for _, p := range props {
		args = append(args, "-p", p)
	}
	out, err := h.Command(ctx, "systemctl", args...).Output()
	if err != nil {
		return nil, fmt.Errorf("systemctl show %s on %s: %w", unit, h.Name, err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			m[k] = v
		}
	}
	return m, nil
}

// Journal is what a unit logged this boot.
func (h *Host) Journal(unit string) string {
	out, _ := h.Command(context.Background(), "journalctl", "--no-pager", "-o", "short", "-u", unit).CombinedOutput()
	return string(out)
}

// UnitLog is what a unit's processes printed this boot, the journal's
// messages alone, a line each.
func (h *Host) UnitLog(unit string) string {
	out, _ := h.Command(context.Background(), "journalctl", "--no-pager", "-o", "cat", "-u", unit).CombinedOutput()
	return string(out)
}

// ImportImages loads image archives of the machine's into the host's
// containerd, as `ctr images import` on a box would.
func (h *Host) ImportImages(ctx context.Context, archives ...string) error {
	for _, a := range archives {
		b, err := os.ReadFile(a)
		if err != nil {
			return fmt.Errorf("host %s: %w", h.Name, err)
		}
		inside := filepath.Join("var/tmp", "import-"+filepath.Base(a))
		if err := h.WriteFile(inside, string(b), 0o600); err != nil {
			return fmt.Errorf("host %s: copying %s in: %w", h.Name, filepath.Base(a), err)
		}
		out, err := h.Command(ctx, "ctr", "-n", "k8s.io", "images", "import", "--no-unpack", "/"+inside).CombinedOutput()
		_ = os.Remove(h.Root(inside))
		if err != nil {
			return fmt.Errorf("host %s: importing %s: %w: %s", h.Name, filepath.Base(a), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}
