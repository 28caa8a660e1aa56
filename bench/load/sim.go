package load

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/edgefleet/fleet/pkg/agent/cloudconfig"
	"github.com/edgefleet/fleet/pkg/agent/kubeupgrade"
	"github.com/edgefleet/fleet/pkg/agent/units"
	"github.com/edgefleet/fleet/test/nodesim/sim"
)

// SimRunner runs a host's bootstrap and upgrade commands for the load
// driver: `kubeadm …` goes to the node simulator (a Ready Node with the
// host's name and providerID in the workload cluster, as in the e2e tests,
// but in-process instead of a sandboxed binary), `kubelet --version`
// prints the version of the kubelet in place; anything else (the
// sentinel's `echo`, which the provisioner writes itself when a command
// did not) is not run. Files the bootstrap writes land under the host's
// root for real.
//
// A simulated host's kubelet and kubeadm are files holding their version
// (SimKubernetes): the simulator plays the version of the binary named.
type SimRunner struct {
	Sim *sim.Simulator
}

// Run runs the kubeadm and kubelet parts of c.
func (r SimRunner) Run(ctx context.Context, c cloudconfig.Command) ([]byte, error) {
	parts := [][]string{c.Argv}
	if c.Argv == nil {
		parts = nil
		for _, seg := range strings.Split(c.Shell, "&&") {
			parts = append(parts, strings.Fields(seg))
		}
	}
	var out strings.Builder
	for _, argv := range parts {
		if len(argv) == 0 {
			continue
		}
		switch path.Base(argv[0]) {
		case "kubeadm":
			s := r.as(argv[0])
			s.Out = &out
			if err := s.Run(ctx, argv[1:]); err != nil {
				return []byte(out.String()), fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
			}
		case "kubelet":
			if slices.Contains(argv[1:], "--version") {
				fmt.Fprintf(&out, "Kubernetes %s\n", r.as(argv[0]).Version)
			}
		}
	}
	return []byte(out.String()), nil
}

// as is the simulator playing the binary at p (a bare name is the one in
// /usr/local/bin): of the version the file holds, or the simulator's
// default for a file that holds none.
func (r SimRunner) as(p string) sim.Simulator {
	s := *r.Sim
	if s.Version == "" {
		s.Version = sim.DefaultVersion
	}
	if !strings.Contains(p, "/") {
		p = path.Join(simBinDir, p)
	}
	if b, err := os.ReadFile(filepath.Join(s.Root, p)); err == nil && len(b) < 64 && strings.HasPrefix(string(b), "v") {
		s.Version = strings.TrimSpace(string(b))
	}
	return s
}

// Apply restarts the units of p the simulator plays: the kubelet, which
// comes back as the version now in place.
func (r SimRunner) Apply(ctx context.Context, p units.Plan) ([]string, error) {
	if !slices.Contains(p.Units, "kubelet.service") {
		return nil, nil
	}
	s := r.as("kubelet")
	if err := s.RestartKubelet(ctx); err != nil {
		return nil, fmt.Errorf("restarting the simulated kubelet: %w", err)
	}
	return []string{"restarted kubelet.service (simulated, " + s.Version + ")"}, nil
}

const simBinDir = "/usr/local/bin"

// SimKubernetes lays out a simulated host's Kubernetes under root: the
// kubelet and kubeadm of installed in /usr/local/bin, and those of each
// staged version under kubeupgrade's staging directory, as an edge image
// carries them. Each "binary" is an executable file holding its version.
func SimKubernetes(root, installed string, staged ...string) error {
	write := func(dir, version string) error {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			return err
		}
		for _, name := range []string{"kubelet", "kubeadm"} {
			if err := os.WriteFile(filepath.Join(root, dir, name), []byte(version+"\n"), 0o755); err != nil {
				return err
			}
		}
		return nil
	}
	if err := write(simBinDir, installed); err != nil {
		return err
	}
	for _, v := range staged {
		if err := write(path.Join(kubeupgrade.DefaultStagingDir, v), v); err != nil {
			return err
		}
	}
	return nil
}

// SimUpgrader is the agent's real in-place upgrader (journal, backup,
// kubeadm, binary swap, kubelet restart, readiness wait, rollback) on a
// simulated host laid out by SimKubernetes: kubeadm and the kubelet are
// played by r's simulator.
func SimUpgrader(r SimRunner, stateDir string) *kubeupgrade.Upgrader {
	return kubeupgrade.New(kubeupgrade.Options{Root: r.Sim.Root, StateDir: stateDir, Runner: r, Units: r,
		Probe: func(ctx context.Context, version, nodeName string, controlPlane bool) error {
			return r.Sim.Serving(ctx, version, nodeName, controlPlane)
		},
		ClusterVersion: r.Sim.ClusterVersion})
}
