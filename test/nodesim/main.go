// Command nodesim stands in for kubeadm and the kubelet on machines that
// cannot run them (tests, the local demo). Installed as `kubeadm` in a
// sandbox root, it does what a successful `kubeadm init`/`join` leaves
// behind that Cluster API can see — a Ready Node with the configured name and
// providerID in the workload cluster — and `kubeadm reset` removes it. It
// short-cuts nothing else: the bootstrap data around it runs for real.
//
// It reads the workload cluster's kubeconfig from /etc/fleet-sim/kubeconfig
// inside the sandbox.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

const (
	kubeconfigPath = "/etc/fleet-sim/kubeconfig"
	nodeFile       = "/var/lib/fleet-sim/node"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "kubeadm (fleet node simulator): %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: kubeadm init|join|reset …")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	switch args[0] {
	case "init", "join":
		fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
		config := fs.String("config", "", "kubeadm configuration file")
		fs.Int("v", 0, "verbosity")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *config == "" {
			return errors.New(args[0] + " needs --config")
		}
		name, providerID, err := readConfig(*config)
		if err != nil {
			return err
		}
		return register(ctx, name, providerID)
	case "reset":
		return reset(ctx)
	case "version":
		fmt.Println("kubeadm version: fleet-node-simulator")
		return nil
	default:
		return fmt.Errorf("unsupported subcommand %q", args[0])
	}
}

// readConfig finds nodeRegistration.name and the kubelet's provider-id in
// the Init/JoinConfiguration, in kubeadm v1beta4 (list) or v1beta3 (map)
// form.
func readConfig(path string) (name, providerID string, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", "", err
	}
	for _, doc := range strings.Split(string(b), "\n---") {
		var d struct {
			Kind             string `json:"kind"`
			NodeRegistration struct {
				Name             string          `json:"name"`
				KubeletExtraArgs json.RawMessage `json:"kubeletExtraArgs"`
			} `json:"nodeRegistration"`
		}
		if err := yaml.Unmarshal([]byte(doc), &d); err != nil {
			return "", "", fmt.Errorf("parsing %s: %w", path, err)
		}
		if d.Kind != "InitConfiguration" && d.Kind != "JoinConfiguration" {
			continue
		}
		name = d.NodeRegistration.Name
		var list []struct{ Name, Value string }
		var m map[string]string
		if json.Unmarshal(d.NodeRegistration.KubeletExtraArgs, &list) == nil {
			for _, a := range list {
				if a.Name == "provider-id" {
					providerID = a.Value
				}
			}
		} else if json.Unmarshal(d.NodeRegistration.KubeletExtraArgs, &m) == nil {
			providerID = m["provider-id"]
		}
	}
	if name == "" {
		h, _ := os.ReadFile("/etc/hostname")
		name = strings.TrimSpace(string(h))
	}
	if name == "" || providerID == "" {
		return "", "", fmt.Errorf("%s names no node (%q) or no kubelet provider-id (%q)", path, name, providerID)
	}
	return strings.ToLower(name), providerID, nil
}

func client() (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfigPath)
	if err != nil {
		return nil, fmt.Errorf("workload cluster kubeconfig: %w", err)
	}
	return kubernetes.NewForConfig(cfg)
}

// register does what the kubelet does on first start: a Node with the
// providerID, then Ready.
func register(ctx context.Context, name, providerID string) error {
	cs, err := client()
	if err != nil {
		return err
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Spec: corev1.NodeSpec{ProviderID: providerID}}
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
	n.Status.NodeInfo.KubeletVersion = "v1.36.3"
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("marking node %s Ready: %w", name, err)
	}
	if err := os.MkdirAll("/var/lib/fleet-sim", 0o755); err != nil {
		return err
	}
	fmt.Printf("[fleet-sim] node %s registered with providerID %s\n", name, providerID)
	return os.WriteFile(nodeFile, []byte(name), 0o644)
}

func reset(ctx context.Context) error {
	b, err := os.ReadFile(nodeFile)
	if errors.Is(err, os.ErrNotExist) {
		fmt.Println("[fleet-sim] nothing to reset")
		return nil
	}
	if err != nil {
		return err
	}
	cs, err := client()
	if err != nil {
		return err
	}
	name := strings.TrimSpace(string(b))
	if err := cs.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing node %s: %w", name, err)
	}
	fmt.Printf("[fleet-sim] node %s reset\n", name)
	return os.Remove(nodeFile)
}
