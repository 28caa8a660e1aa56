package describe

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/yaml"

	"github.com/edgefleet/fleet/pkg/cli/kube"
	"github.com/edgefleet/fleet/pkg/cli/validate"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// CertWarning is how close a certificate expiry must be to be flagged.
const CertWarning = 30 * 24 * time.Hour

// Options is `kubectl fleet describe cluster`.
type Options struct {
	flags *kube.ConfigFlags
	genericiooptions.IOStreams
	Name           string
	Output         string
	ShowConditions bool
	// Now is the clock (tests fix it).
	Now func() time.Time

	conn *kube.Connection
}

// Complete takes the cluster name and builds the client.
func (o *Options) Complete(args []string) error {
	o.Name = args[0]
	var err error
	o.conn, err = kube.Connect(o.flags)
	return err
}

// Validate checks the name and -o.
func (o *Options) Validate() error {
	if o.Output != "" && o.Output != "json" && o.Output != "yaml" {
		return fmt.Errorf("-o %q: want json or yaml", o.Output)
	}
	return validate.ClusterName(o.Name)
}

// Run reads the cluster's tree and prints it.
func (o *Options) Run(ctx context.Context) error {
	tree, err := Build(ctx, o.conn.Client, o.conn.Namespace, o.Name, o.Now())
	if err != nil {
		return o.conn.Explain(err)
	}
	return o.Print(tree)
}

// Node is one object in the tree.
type Node struct {
	Kind     string `json:"kind"`
	Name     string `json:"name"`
	Ready    string `json:"ready"`
	Phase    string `json:"phase,omitempty"`
	Replicas string `json:"replicas,omitempty"`
	// Class and Version are a topology Cluster's ClusterClass and
	// Kubernetes version; Topology is a MachineDeployment's name in it.
	Class      string             `json:"class,omitempty"`
	Version    string             `json:"version,omitempty"`
	Topology   string             `json:"topology,omitempty"`
	Message    string             `json:"message,omitempty"`
	Machine    *MachineInfo       `json:"machine,omitempty"`
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	Children   []*Node            `json:"children,omitempty"`
}

// MachineInfo is what fleet adds about a machine.
type MachineInfo struct {
	Host           string   `json:"host,omitempty"`
	AgentConnected string   `json:"agentConnected,omitempty"`
	LastSeen       string   `json:"lastSeen,omitempty"`
	ProviderID     string   `json:"providerID,omitempty"`
	Node           string   `json:"node,omitempty"`
	Addresses      []string `json:"addresses,omitempty"`
	CertExpiry     string   `json:"certificatesExpiry,omitempty"`
	CertWarning    bool     `json:"certificatesExpiryWarning,omitempty"`
	// Health is what a MachineHealthCheck found wrong with the machine and
	// what its owner did about it, when the check failed.
	Health string `json:"health,omitempty"`
}

func ready(conds []metav1.Condition) (string, string) {
	for _, c := range conds {
		if c.Type == clusterv1.ReadyCondition || c.Type == clusterv1.AvailableCondition {
			msg := ""
			if c.Status != metav1.ConditionTrue {
				msg = c.Message
			}
			return string(c.Status), msg
		}
	}
	return "Unknown", ""
}

// Build reads the cluster with a fixed number of requests — the Cluster,
// its EdgeCluster and control plane, and one list each of
// MachineDeployments, Machines, EdgeMachines and EdgeHosts — and assembles
// the tree.
func Build(ctx context.Context, c *kube.Client, ns, name string, now time.Time) (*Node, error) {
	cluster := &clusterv1.Cluster{}
	if err := c.Get(ctx, kube.ObjectKey{Namespace: ns, Name: name}, cluster); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("cluster %q not found in namespace %s (see `kubectl fleet get clusters`)", name, ns)
		}
		return nil, err
	}
	byCluster := kube.MatchingLabels{clusterv1.ClusterNameLabel: name}
	mds := &clusterv1.MachineDeploymentList{}
	machines := &clusterv1.MachineList{}
	ems := &infrav1.EdgeMachineList{}
	hosts := &infrav1.EdgeHostList{}
	for _, l := range []kube.ObjectList{mds, machines, ems} {
		if err := c.List(ctx, l, kube.InNamespace(ns), byCluster); err != nil {
			return nil, err
		}
	}
	if err := c.List(ctx, hosts, kube.InNamespace(ns)); err != nil {
		return nil, err
	}
	fleet := &fleetView{now: now, edgeMachines: map[string]*infrav1.EdgeMachine{}, hosts: map[string]*infrav1.EdgeHost{}}
	for i := range ems.Items {
		fleet.edgeMachines[ems.Items[i].Name] = &ems.Items[i]
	}
	for i := range hosts.Items {
		fleet.hosts[hosts.Items[i].Name] = &hosts.Items[i]
	}

	r, msg := ready(cluster.Status.Conditions)
	root := &Node{Kind: "Cluster", Name: name, Ready: r, Phase: cluster.Status.Phase, Message: msg, Conditions: cluster.Status.Conditions}
	if t := cluster.Spec.Topology; t.IsDefined() {
		root.Class, root.Version = t.ClassRef.Name, t.Version
		root.Phase = strings.TrimSpace(fmt.Sprintf("%s class %s %s", root.Phase, t.ClassRef.Name, t.Version))
		// Why the topology is not what it should be (a missing class, a
		// variable its schema refuses) comes first: nothing else moves.
		if c := meta.FindStatusCondition(cluster.Status.Conditions, clusterv1.ClusterTopologyReconciledCondition); c != nil && c.Status == metav1.ConditionFalse {
			root.Message = strings.TrimSuffix("topology: "+oneLine(c.Message)+"; "+root.Message, "; ")
		}
	}
	if ec := edgeClusterNode(ctx, c, ns, cluster); ec != nil {
		root.Children = append(root.Children, ec)
	}
	cp := controlPlaneNode(ctx, c, ns, cluster)
	if why := notRemediated(machines.Items); why != "" && cp.Kind == "KubeadmControlPlane" {
		cp.Message = strings.TrimSuffix(why+"; "+cp.Message, "; ")
	}
	mdList, mdNodes := machineDeploymentNodes(mds.Items)
	sort.Slice(machines.Items, func(i, j int) bool { return machines.Items[i].Name < machines.Items[j].Name })
	for i := range machines.Items {
		m := &machines.Items[i]
		n := fleet.machineNode(m)
		if _, isCP := m.Labels[clusterv1.MachineControlPlaneLabel]; isCP {
			cp.Children = append(cp.Children, n)
			continue
		}
		if md := mdNodes[m.Labels[clusterv1.MachineDeploymentNameLabel]]; md != nil {
			md.Children = append(md.Children, n)
			continue
		}
		root.Children = append(root.Children, n)
	}
	root.Children = append(root.Children, cp)
	root.Children = append(root.Children, mdList...)
	return root, nil
}

// fleetView is what fleet knows about a cluster's machines, by name.
type fleetView struct {
	now          time.Time
	edgeMachines map[string]*infrav1.EdgeMachine
	hosts        map[string]*infrav1.EdgeHost
}

// machineNode is a Machine with its edge host, the agent's connectivity,
// node, addresses and certificate expiry.
func (f *fleetView) machineNode(m *clusterv1.Machine) *Node {
	r, msg := ready(m.Status.Conditions)
	info := &MachineInfo{ProviderID: m.Spec.ProviderID}
	if m.Status.NodeRef.IsDefined() {
		info.Node = m.Status.NodeRef.Name
	}
	for _, a := range m.Status.Addresses {
		if a.Type == clusterv1.MachineInternalIP || a.Type == clusterv1.MachineExternalIP {
			info.Addresses = append(info.Addresses, a.Address)
		}
	}
	expiry := m.Status.CertificatesExpiryDate
	if em := f.edgeMachines[m.Spec.InfrastructureRef.Name]; em != nil {
		info.Host = em.Status.HostRef
		if expiry.IsZero() && em.Status.CertificatesExpiryDate != nil {
			expiry = *em.Status.CertificatesExpiryDate
		}
		if r != string(metav1.ConditionTrue) {
			if _, emMsg := ready(em.Status.Conditions); emMsg != "" {
				msg = emMsg
			}
		}
		// An in-place upgrade ordered, running or failed is not part of
		// Ready (a rolled-back host serves): say it beside, its first line
		// (the command's output follows on the condition).
		if up := meta.FindStatusCondition(em.Status.Conditions, infrav1.KubernetesVersionCondition); up != nil && up.Status == metav1.ConditionFalse {
			first, _, _ := strings.Cut(up.Message, "\n")
			msg = strings.TrimPrefix(msg+"; "+first, "; ")
		}
	}
	if info.Health = health(m); info.Health != "" {
		msg = strings.TrimSuffix(info.Health+"; "+msg, "; ")
	}
	if !expiry.IsZero() {
		info.CertExpiry = expiry.UTC().Format("2006-01-02")
		info.CertWarning = expiry.Sub(f.now) < CertWarning
	}
	if h := f.hosts[info.Host]; h != nil {
		info.AgentConnected = "Unknown"
		for _, c := range h.Status.Conditions {
			if c.Type == infrav1.AgentConnectedCondition {
				info.AgentConnected = string(c.Status)
			}
		}
		if h.Status.LastSeenTime != nil {
			info.LastSeen = duration.HumanDuration(f.now.Sub(h.Status.LastSeenTime.Time)) + " ago"
		}
	}
	return &Node{Kind: "Machine", Name: m.Name, Ready: r, Phase: m.Status.Phase, Message: msg, Machine: info, Conditions: m.Status.Conditions}
}

// health says why a MachineHealthCheck found m unhealthy, on one line,
// and what its owner (MachineSet, KubeadmControlPlane) did about it: a
// control plane of one machine is never remediated, and Cluster API only
// says so in the Machine's OwnerRemediated condition.
func health(m *clusterv1.Machine) string {
	hc := meta.FindStatusCondition(m.Status.Conditions, clusterv1.MachineHealthCheckSucceededCondition)
	if hc == nil || hc.Status != metav1.ConditionFalse {
		return ""
	}
	s := "unhealthy: " + oneLine(strings.TrimPrefix(hc.Message, "Health check failed:"))
	if or := meta.FindStatusCondition(m.Status.Conditions, clusterv1.MachineOwnerRemediatedCondition); or != nil && or.Status == metav1.ConditionFalse {
		switch {
		case ownerRefuses(or):
			s += "; not remediated: " + oneLine(or.Message)
		case ownerHasNotAnswered(or):
			s += "; waiting for its owner to remediate it"
		default:
			s += "; remediation: " + oneLine(or.Message)
		}
	}
	return s
}

// ownerRefuses tells an OwnerRemediated condition by which the Machine's
// owner (KubeadmControlPlane or MachineSet) says it will not remediate,
// for now or for good.
func ownerRefuses(or *metav1.Condition) bool {
	return or.Reason == controlplanev1.KubeadmControlPlaneMachineCannotBeRemediatedReason ||
		or.Reason == controlplanev1.KubeadmControlPlaneMachineRemediationDeferredReason ||
		or.Reason == clusterv1.MachineSetMachineCannotBeRemediatedReason ||
		or.Reason == clusterv1.MachineSetMachineRemediationDeferredReason
}

// ownerHasNotAnswered tells an OwnerRemediated condition as the
// MachineHealthCheck sets it (its owner has not looked yet) from one the
// owner rewrote with its reason for waiting.
func ownerHasNotAnswered(or *metav1.Condition) bool {
	return or.Message == "" || or.Message == "Waiting for remediation"
}

// notRemediated is the control plane's line for an unhealthy
// control-plane Machine its owner will not remediate, or "".
func notRemediated(machines []clusterv1.Machine) string {
	replicas := 0
	var why string
	for i := range machines {
		m := &machines[i]
		if _, isCP := m.Labels[clusterv1.MachineControlPlaneLabel]; !isCP {
			continue
		}
		replicas++
		or := meta.FindStatusCondition(m.Status.Conditions, clusterv1.MachineOwnerRemediatedCondition)
		if why == "" && or != nil && or.Status == metav1.ConditionFalse && ownerRefuses(or) {
			why = fmt.Sprintf("Machine %s unhealthy, not remediated: %s", m.Name, oneLine(or.Message))
		}
	}
	if why == "" {
		return ""
	}
	return fmt.Sprintf("%d %s: %s", replicas, plural(replicas, "machine", "machines"), why)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// oneLine joins a condition's message lines ("* a", "* b") with "; ".
func oneLine(msg string) string {
	var parts []string
	for _, l := range strings.Split(msg, "\n") {
		if l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "*")); l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, "; ")
}

// edgeClusterNode is the cluster's EdgeCluster with its endpoint, or nil.
func edgeClusterNode(ctx context.Context, c *kube.Client, ns string, cluster *clusterv1.Cluster) *Node {
	ref := cluster.Spec.InfrastructureRef
	if ref.Name == "" {
		return nil
	}
	ec := &infrav1.EdgeCluster{}
	if err := c.Get(ctx, kube.ObjectKey{Namespace: ns, Name: ref.Name}, ec); err != nil {
		return nil
	}
	r, msg := ready(ec.Status.Conditions)
	n := &Node{Kind: "EdgeCluster", Name: ec.Name, Ready: r, Message: msg, Conditions: ec.Status.Conditions}
	if ec.Spec.ControlPlaneEndpoint.IsValid() {
		n.Phase = fmt.Sprintf("endpoint %s:%d", ec.Spec.ControlPlaneEndpoint.Host, ec.Spec.ControlPlaneEndpoint.Port)
	}
	return n
}

// controlPlaneNode is the KubeadmControlPlane, or a "machines" node for
// a control plane of plain Machines.
func controlPlaneNode(ctx context.Context, c *kube.Client, ns string, cluster *clusterv1.Cluster) *Node {
	ref := cluster.Spec.ControlPlaneRef
	if ref.Kind == "" && cluster.Spec.Topology.IsDefined() {
		return &Node{Kind: "ControlPlane", Name: "-", Ready: "-", Message: "not made yet from ClusterClass " + cluster.Spec.Topology.ClassRef.Name}
	}
	if ref.Kind != "KubeadmControlPlane" {
		return &Node{Kind: "ControlPlane", Name: "machines", Ready: "-"}
	}
	cp := &Node{Kind: "KubeadmControlPlane", Name: ref.Name, Ready: "Unknown"}
	kcp := &controlplanev1.KubeadmControlPlane{}
	if err := c.Get(ctx, kube.ObjectKey{Namespace: ns, Name: ref.Name}, kcp); err == nil {
		cp.Ready, cp.Message = ready(kcp.Status.Conditions)
		cp.Conditions = kcp.Status.Conditions
		cp.Replicas = fmt.Sprintf("%d/%d", ptr.Deref(kcp.Status.ReadyReplicas, 0), ptr.Deref(kcp.Spec.Replicas, 0))
	}
	return cp
}

// machineDeploymentNodes returns the MachineDeployments' nodes by name
// order, and by name.
func machineDeploymentNodes(mds []clusterv1.MachineDeployment) ([]*Node, map[string]*Node) {
	sort.Slice(mds, func(i, j int) bool { return mds[i].Name < mds[j].Name })
	var list []*Node
	byName := map[string]*Node{}
	for i := range mds {
		md := &mds[i]
		r, msg := ready(md.Status.Conditions)
		n := &Node{Kind: "MachineDeployment", Name: md.Name, Ready: r, Message: msg, Conditions: md.Status.Conditions,
			Replicas: fmt.Sprintf("%d/%d", ptr.Deref(md.Status.ReadyReplicas, 0), ptr.Deref(md.Spec.Replicas, 0))}
		if pool := md.Labels[clusterv1.ClusterTopologyMachineDeploymentNameLabel]; pool != "" {
			n.Topology, n.Phase = pool, "topology "+pool
		}
		byName[md.Name] = n
		list = append(list, n)
	}
	return list, byName
}

// Print writes the tree as text, JSON or YAML.
func (o *Options) Print(tree *Node) error {
	switch o.Output {
	case "json":
		b, err := json.MarshalIndent(tree, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(o.Out, string(b))
		return err
	case "yaml":
		b, err := yaml.Marshal(tree)
		if err != nil {
			return err
		}
		_, err = o.Out.Write(b)
		return err
	}
	return WriteTree(o.Out, tree, o.ShowConditions)
}

// WriteTree writes the tree as an aligned table with clusterctl's prefixes.
func WriteTree(out io.Writer, tree *Node, showConditions bool) error {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tREADY\tPHASE\tHOST\tAGENT\tLAST-SEEN\tPROVIDERID\tNODE\tADDRESSES\tCERT-EXPIRY\tMESSAGE")
	var walk func(n *Node, prefix, childPrefix string)
	walk = func(n *Node, prefix, childPrefix string) {
		phase := n.Phase
		if n.Replicas != "" {
			phase = strings.TrimSpace(n.Replicas + " ready " + phase)
		}
		cols := []string{prefix + n.Kind + "/" + n.Name, n.Ready, dash(phase)}
		if mi := n.Machine; mi != nil {
			expiry := dash(mi.CertExpiry)
			if mi.CertWarning {
				expiry += " (<30d!)"
			}
			cols = append(cols, dash(mi.Host), dash(mi.AgentConnected), dash(mi.LastSeen), dash(mi.ProviderID), dash(mi.Node),
				dash(strings.Join(mi.Addresses, ",")), expiry)
		} else {
			cols = append(cols, "", "", "", "", "", "", "")
		}
		cols = append(cols, n.Message)
		fmt.Fprintln(w, strings.Join(cols, "\t"))
		if showConditions {
			for _, c := range n.Conditions {
				fmt.Fprintf(w, "%s    %s=%s\t\t%s\t\t\t\t\t\t\t\t%s\n", childPrefix, c.Type, c.Status, c.Reason, c.Message)
			}
		}
		for i, child := range n.Children {
			last := i == len(n.Children)-1
			p, cp := childPrefix+"├─", childPrefix+"│ "
			if last {
				p, cp = childPrefix+"└─", childPrefix+"  "
			}
			walk(child, p, cp)
		}
	}
	walk(tree, "", "")
	return w.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
