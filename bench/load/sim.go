package load

import (
	"context"
	"fmt"
	"strings"

	"github.com/edgefleet/fleet/pkg/agent/cloudconfig"
	"github.com/edgefleet/fleet/test/nodesim/sim"
)

// SimRunner runs a host's bootstrap commands for the load driver: `kubeadm
// init|join|reset` go to the node simulator (a Ready Node with the host's
// name and providerID in the workload cluster, as in the e2e tests, but
// in-process instead of a sandboxed binary); anything else (the sentinel's
// `echo`, which the provisioner writes itself when a command did not) is
// not run. Files the bootstrap writes land under the host's root for real.
type SimRunner struct {
	Sim *sim.Simulator
}

// Run runs the kubeadm parts of c.
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
		if len(argv) == 0 || argv[0] != "kubeadm" {
			continue
		}
		s := *r.Sim
		s.Out = &out
		if err := s.Run(ctx, argv[1:]); err != nil {
			return []byte(out.String()), fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
		}
	}
	return []byte(out.String()), nil
}
