package scale

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/edgefleet/fleet/pkg/cli/kube"
	"github.com/edgefleet/fleet/pkg/cli/progress"
	"github.com/edgefleet/fleet/pkg/clustertemplate"
)

// jsonPatchOp is one RFC 6902 operation.
type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// scaleTopology changes the replicas in the Cluster's spec.topology in one
// JSON patch whose test operations refuse it if the worker pools changed
// since they were read: both counts change, or neither.
func (o *Options) scaleTopology(ctx context.Context, cluster *clusterv1.Cluster) error {
	topo := cluster.Spec.Topology
	pools := topo.Workers.MachineDeployments
	var ops []jsonPatchOp
	var said []string
	if o.WorkerMachines != nil {
		mds := topo.Workers.MachineDeployments
		i, err := o.workerPool(cluster)
		if err != nil {
			return err
		}
		ops = append(ops, jsonPatchOp{Op: "test", Path: "/spec/topology/workers/machineDeployments", Value: mds})
		updated := slices.Clone(mds)
		if i < 0 {
			updated = append(updated, clusterv1.MachineDeploymentTopology{Class: clustertemplate.WorkerClass,
				Name: clustertemplate.TopologyWorkers, Replicas: o.WorkerMachines})
			i = len(updated) - 1
		} else {
			updated[i].Replicas = o.WorkerMachines
		}
		switch {
		case mds == nil && len(topo.Workers.MachinePools) > 0:
			ops = []jsonPatchOp{{Op: "add", Path: "/spec/topology/workers/machineDeployments", Value: updated}}
		case mds == nil:
			// A topology without workers has no workers field to test.
			ops = []jsonPatchOp{{Op: "add", Path: "/spec/topology/workers", Value: map[string]any{"machineDeployments": updated}}}
		default:
			ops = append(ops, jsonPatchOp{Op: "replace", Path: "/spec/topology/workers/machineDeployments", Value: updated})
		}
		said = append(said, fmt.Sprintf("workers %s to %d", updated[i].Name, *o.WorkerMachines))
		pools = updated
	}
	if o.ControlPlaneMachines != nil {
		ops = append(ops, jsonPatchOp{Op: "add", Path: "/spec/topology/controlPlane/replicas", Value: *o.ControlPlaneMachines})
		said = append(said, fmt.Sprintf("control plane to %d", *o.ControlPlaneMachines))
	}
	data, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	if err := o.conn.Client.Patch(ctx, cluster, kube.RawPatch(types.JSONPatchType, data)); err != nil {
		if strings.Contains(err.Error(), "testing value") {
			return fmt.Errorf("cluster %s: its worker pools changed while being scaled; nothing was changed, run the command again", o.Name)
		}
		return o.conn.Explain(fmt.Errorf("scaling cluster %s: %w", o.Name, err))
	}
	fmt.Fprintf(o.Out, "cluster/%s scaled (ClusterClass %s): %s\n", o.Name, topo.ClassRef.Name, strings.Join(said, ", "))
	if !o.Wait {
		return nil
	}
	// What the topology says once patched; the topology controller and
	// then KCP and the MachineSets make it so.
	cp := int(ptr.Deref(topo.ControlPlane.Replicas, 1))
	if o.ControlPlaneMachines != nil {
		cp = int(*o.ControlPlaneMachines)
	}
	workers := 0
	for _, md := range pools {
		workers += int(ptr.Deref(md.Replicas, 1))
	}
	if err := progress.Until(ctx, o.Out, o.Timeout, "cluster "+o.Name, progress.Machines(o.conn.Client, o.conn.Namespace, o.Name, cp, workers)); err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "cluster %s: %d control-plane and %d worker machine(s) Running\n", o.Name, cp, workers)
	return nil
}

// workerPool is the index of the worker pool --worker-machines scales:
// the one --machine-deployment names, or the only one; -1 when the
// topology has none yet and one is to be added.
func (o *Options) workerPool(cluster *clusterv1.Cluster) (int, error) {
	mds := cluster.Spec.Topology.Workers.MachineDeployments
	var names []string
	for _, md := range mds {
		names = append(names, md.Name)
	}
	if o.MachineDeployment != "" {
		if i := slices.Index(names, o.MachineDeployment); i >= 0 {
			return i, nil
		}
		return 0, fmt.Errorf("cluster %s has no worker pool %q in its topology (it has: %s)", o.Name, o.MachineDeployment, strings.Join(names, ", "))
	}
	switch len(names) {
	case 0:
		return -1, nil
	case 1:
		return 0, nil
	}
	return 0, fmt.Errorf("cluster %s has worker pools %s: say which with --machine-deployment", o.Name, strings.Join(names, ", "))
}
