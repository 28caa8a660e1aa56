package sim

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

const nodeFile = "/var/lib/fleet-sim/node"

// ResetFailsFile makes `kubeadm reset` fail with its content while it
// exists in the machine's root, as a real reset fails on a broken disk: a
// test removes it and has the reset ordered again.
const ResetFailsFile = "/etc/fleet-sim/reset-fails"

// Simulator runs kubeadm subcommands against a workload cluster.
type Simulator struct {
	// Client reaches the workload cluster.
	Client kubernetes.Interface
	// Root is the machine's root directory: "/" inside a sandbox, a
	// host's directory when many simulated hosts share one process.
	Root string
	// Out hears what kubeadm would print (nil: nothing).
	Out io.Writer
	// Version is that of the kubeadm run and of the kubelet it sets up
	// ("" = DefaultVersion): the Node reports it, the static pods run it.
	Version string
}

// DefaultVersion is the simulated kubeadm's and kubelet's version unless
// a Simulator says otherwise: the edge image's.
const DefaultVersion = "v1.36.3"

func (s *Simulator) version() string {
	if s.Version == "" {
		return DefaultVersion
	}
	return s.Version
}

func (s *Simulator) path(p string) string { return filepath.Join(s.Root, p) }

func (s *Simulator) printf(format string, args ...any) {
	if s.Out != nil {
		fmt.Fprintf(s.Out, format, args...)
	}
}

// Run does `kubeadm <args>`: init, join (--config FILE), upgrade apply
// VERSION, upgrade node, or reset.
func (s *Simulator) Run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errors.New("usage: kubeadm init|join|upgrade|reset …")
	}
	switch args[0] {
	case "init", "join":
		fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		config := fs.String("config", "", "kubeadm configuration file")
		fs.Int("v", 0, "verbosity")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *config == "" {
			return errors.New(args[0] + " needs --config")
		}
		reg, err := s.readConfig(*config)
		if err != nil {
			return err
		}
		if err := s.register(ctx, reg); err != nil {
			return err
		}
		if args[0] == "init" {
			return s.uploadConfig(ctx, *config)
		}
		return nil
	case "upgrade":
		return s.upgrade(ctx, args[1:])
	case "reset":
		return s.reset(ctx)
	case "version":
		s.printf("kubeadm version: fleet-node-simulator %s\n", s.version())
		return nil
	default:
		return fmt.Errorf("unsupported subcommand %q", args[0])
	}
}

// registration is what kubeadm's configuration says of the node it makes.
type registration struct {
	name, providerID string
	// controlPlane: init, or a join with a controlPlane section.
	controlPlane bool
	// taints the node registers with.
	taints []corev1.Taint
}

// readConfig finds nodeRegistration's name and taints and the kubelet's
// provider-id in the Init/JoinConfiguration, in kubeadm v1beta4 (list) or
// v1beta3 (map) form, and whether the node is a control-plane one.
func (s *Simulator) readConfig(path string) (registration, error) {
	var r registration
	b, err := os.ReadFile(s.path(path))
	if err != nil {
		return r, err
	}
	for _, doc := range strings.Split(string(b), "\n---") {
		var d struct {
			Kind             string          `json:"kind"`
			ControlPlane     json.RawMessage `json:"controlPlane"`
			NodeRegistration struct {
				Name             string          `json:"name"`
				KubeletExtraArgs json.RawMessage `json:"kubeletExtraArgs"`
				Taints           *[]corev1.Taint `json:"taints"`
			} `json:"nodeRegistration"`
		}
		if err := yaml.Unmarshal([]byte(doc), &d); err != nil {
			return r, fmt.Errorf("parsing %s: %w", path, err)
		}
		if d.Kind != "InitConfiguration" && d.Kind != "JoinConfiguration" {
			continue
		}
		r.controlPlane = d.Kind == "InitConfiguration" || (len(d.ControlPlane) > 0 && string(d.ControlPlane) != "null")
		r.name = d.NodeRegistration.Name
		r.taints = nil
		switch {
		case d.NodeRegistration.Taints != nil:
			r.taints = *d.NodeRegistration.Taints
		case r.controlPlane:
			// kubeadm's default when taints are unset (null): a
			// control-plane node takes no ordinary pods. KCP checks it.
			r.taints = []corev1.Taint{{Key: controlPlaneRole, Effect: corev1.TaintEffectNoSchedule}}
		}
		var list []struct{ Name, Value string }
		var m map[string]string
		if json.Unmarshal(d.NodeRegistration.KubeletExtraArgs, &list) == nil {
			for _, a := range list {
				if a.Name == "provider-id" {
					r.providerID = a.Value
				}
			}
		} else if json.Unmarshal(d.NodeRegistration.KubeletExtraArgs, &m) == nil {
			r.providerID = m["provider-id"]
		}
	}
	if r.name == "" {
		h, _ := os.ReadFile(s.path("/etc/hostname"))
		r.name = strings.TrimSpace(string(h))
	}
	if r.name == "" || r.providerID == "" {
		return r, fmt.Errorf("%s names no node (%q) or no kubelet provider-id (%q)", path, r.name, r.providerID)
	}
	r.name = strings.ToLower(r.name)
	return r, nil
}

// register does what the kubelet does on first start: a Node with the
// providerID and the configuration's taints, then Ready; on a control-plane
// node also what kubeadm and the kubelet leave for KubeadmControlPlane to
// inspect: the control-plane role label and Running mirror pods of the
// static control-plane pods.
func (s *Simulator) register(ctx context.Context, r registration) error {
	cs := s.Client
	name, providerID, controlPlane := r.name, r.providerID, r.controlPlane
	labels := map[string]string{"kubernetes.io/hostname": name}
	if controlPlane {
		labels[controlPlaneRole] = ""
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.NodeSpec{ProviderID: providerID, Taints: r.taints}}
	if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("registering node %s: %w", name, err)
	}
	n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	now := metav1.Now()
	// What a healthy kubelet reports; Cluster API's NodeHealthy looks at
	// all four.
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: "fleet node simulator",
			LastHeartbeatTime: now, LastTransitionTime: now}
	}
	n.Status.Conditions = []corev1.NodeCondition{
		cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady"),
		cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory"),
		cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure"),
		cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID"),
	}
	n.Status.NodeInfo.KubeletVersion = s.version()
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("marking node %s Ready: %w", name, err)
	}
	if err := untaintNotReady(ctx, cs, name); err != nil {
		return err
	}
	if controlPlane {
		if err := s.staticPods(ctx, name); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(s.path("/var/lib/fleet-sim"), 0o755); err != nil {
		return err
	}
	s.printf("[fleet-sim] node %s registered with providerID %s (control plane: %t)\n", name, providerID, controlPlane)
	return os.WriteFile(s.path(nodeFile), []byte(name), 0o644)
}

// uploadConfig does what `kubeadm init` does in its upload-config phase:
// the ClusterConfiguration goes into kube-system/kubeadm-config, which is
// how KubeadmControlPlane learns that the control plane is initialised.
func (s *Simulator) uploadConfig(ctx context.Context, path string) error {
	b, err := os.ReadFile(s.path(path))
	if err != nil {
		return err
	}
	clusterConfig := ""
	for _, doc := range strings.Split(string(b), "\n---") {
		var d struct {
			Kind string `json:"kind"`
		}
		if yaml.Unmarshal([]byte(doc), &d) == nil && d.Kind == "ClusterConfiguration" {
			clusterConfig = strings.TrimPrefix(doc, "\n")
		}
	}
	cs := s.Client
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kubeadm-config", Namespace: metav1.NamespaceSystem},
		Data: map[string]string{"ClusterConfiguration": clusterConfig}}
	if _, err := cs.CoreV1().ConfigMaps(metav1.NamespaceSystem).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("uploading kubeadm-config: %w", err)
	}
	s.printf("[fleet-sim] uploaded the cluster configuration to kube-system/kubeadm-config\n")
	return nil
}

const controlPlaneRole = "node-role.kubernetes.io/control-plane"

// untaintNotReady does for a Ready node what the node lifecycle controller
// of kube-controller-manager, which the simulated cluster lacks, does:
// it lifts the not-ready taint the API server puts on every new Node.
// Cluster API may be editing the Node's taints meanwhile: retry on a
// conflict.
func untaintNotReady(ctx context.Context, cs kubernetes.Interface, name string) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var kept []corev1.Taint
		for _, t := range n.Spec.Taints {
			if t.Key != corev1.TaintNodeNotReady {
				kept = append(kept, t)
			}
		}
		if len(kept) == len(n.Spec.Taints) {
			return nil
		}
		n.Spec.Taints = kept
		_, err = cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("lifting the not-ready taint of node %s: %w", name, err)
	}
	return nil
}

// The static pods kubeadm writes on a control-plane node (etcd is left out:
// the simulator's clusters use external etcd).
var staticPods = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"}

// staticPods writes, as kubeadm does, a manifest for each control-plane
// component on the version s runs, and creates or updates, as the kubelet
// does, its mirror pod, Running and Ready on that version.
func (s *Simulator) staticPods(ctx context.Context, node string) error {
	if err := os.MkdirAll(s.path(manifestsDir), 0o755); err != nil {
		return err
	}
	for _, component := range staticPods {
		manifest := fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\n  namespace: kube-system\nspec:\n  containers:\n  - name: %s\n    image: %s\n",
			component, component, image(component, s.version()))
		if err := os.WriteFile(s.path(filepath.Join(manifestsDir, component+".yaml")), []byte(manifest), 0o600); err != nil {
			return err
		}
	}
	return mirrorPods(ctx, s.Client, node, s.version())
}

// manifestsDir is where kubeadm writes the static pods' manifests.
const manifestsDir = "/etc/kubernetes/manifests"

func image(component, version string) string { return "registry.k8s.io/" + component + ":" + version }

// mirrorPods creates, as the kubelet does for static pods, a mirror pod
// for each control-plane component, Running and Ready on version; one
// already there is restarted on it.
func mirrorPods(ctx context.Context, cs kubernetes.Interface, node, version string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: metav1.NamespaceSystem}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating %s: %w", metav1.NamespaceSystem, err)
	}
	now := metav1.Now()
	for _, component := range staticPods {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: component + "-" + node, Namespace: metav1.NamespaceSystem,
				Labels:      map[string]string{"component": component, "tier": "control-plane"},
				Annotations: map[string]string{"kubernetes.io/config.mirror": "fleet-node-simulator", "kubernetes.io/config.source": "file"}},
			Spec: corev1.PodSpec{NodeName: node, PriorityClassName: "system-node-critical",
				Containers: []corev1.Container{{Name: component, Image: image(component, version)}}},
		}
		created, err := cs.CoreV1().Pods(metav1.NamespaceSystem).Create(ctx, pod, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			created, err = cs.CoreV1().Pods(metav1.NamespaceSystem).Get(ctx, pod.Name, metav1.GetOptions{})
			if err == nil && created.Spec.Containers[0].Image != pod.Spec.Containers[0].Image {
				// A pod's image may change in place, as the kubelet's
				// mirror of a replaced static pod would.
				created.Spec.Containers[0].Image = pod.Spec.Containers[0].Image
				created, err = cs.CoreV1().Pods(metav1.NamespaceSystem).Update(ctx, created, metav1.UpdateOptions{})
			}
		}
		if err != nil {
			return fmt.Errorf("creating mirror pod %s: %w", pod.Name, err)
		}
		ready := func(t corev1.PodConditionType) corev1.PodCondition {
			return corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now}
		}
		created.Status = corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &now,
			Conditions: []corev1.PodCondition{ready(corev1.PodScheduled), ready(corev1.PodInitialized), ready(corev1.ContainersReady), ready(corev1.PodReady)},
			ContainerStatuses: []corev1.ContainerStatus{{Name: component, Ready: true, Started: ptr.To(true), Image: created.Spec.Containers[0].Image,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}}
		if _, err := cs.CoreV1().Pods(metav1.NamespaceSystem).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("marking mirror pod %s Running: %w", pod.Name, err)
		}
	}
	return nil
}

func (s *Simulator) reset(ctx context.Context) error {
	if why, err := os.ReadFile(s.path(ResetFailsFile)); err == nil {
		return fmt.Errorf("[reset] %s", strings.TrimSpace(string(why)))
	}
	b, err := os.ReadFile(s.path(nodeFile))
	if errors.Is(err, os.ErrNotExist) {
		s.printf("[fleet-sim] nothing to reset\n")
		return nil
	}
	if err != nil {
		return err
	}
	cs := s.Client
	name := strings.TrimSpace(string(b))
	for _, component := range staticPods {
		if err := cs.CoreV1().Pods(metav1.NamespaceSystem).Delete(ctx, component+"-"+name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("removing mirror pod %s-%s: %w", component, name, err)
		}
	}
	if err := cs.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing node %s: %w", name, err)
	}
	if err := os.RemoveAll(s.path(manifestsDir)); err != nil {
		return err
	}
	s.printf("[fleet-sim] node %s reset\n", name)
	return os.Remove(s.path(nodeFile))
}
