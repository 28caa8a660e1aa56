package agent

import (
	"os"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgefleet/fleet/pkg/agent/facts"
	"github.com/edgefleet/fleet/pkg/agent/logring"
	"github.com/edgefleet/fleet/pkg/contract/wire"
)

// UseLogRing lets the hub read the agent's own recent log from ring (the
// logger writes to it). Call before Run.
func (a *Agent) UseLogRing(ring *logring.Ring) { a.hostAccess.Ring = ring }

// factsReport is what `kubectl fleet host facts` shows.
func (a *Agent) factsReport() wire.FactsReport {
	cur := a.Applied()
	f := facts.Read(a.cfg.RootDir)
	f.AgentVersion = a.cfg.Version
	if a.upgrader != nil {
		f.KubernetesVersions = a.upgrader.Staged()
	}
	return wire.FactsReport{
		Facts:             f,
		Kernel:            facts.Kernel(),
		BootTime:          facts.BootTime(),
		AgentStarted:      &metav1.Time{Time: a.started.UTC()},
		Interfaces:        facts.Interfaces(),
		Disks:             facts.Disks(),
		KubernetesVersion: cur.KubernetesVersion,
		Link:              a.link.Load(),
		Certificates:      facts.Certificates(os.DirFS(a.cfg.RootDir), facts.CertificateDirs),
		Provisioning:      cur.Workload,
	}
}
