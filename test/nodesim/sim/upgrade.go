package sim

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/blang/semver/v4"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"
)

// upgrade does `kubeadm upgrade apply VERSION` (the first control plane:
// the cluster's configuration, then this node's static pods) and `kubeadm
// upgrade node` (another node: its static pods, if it has any, on the
// version the cluster was moved to). Like kubeadm's, they leave the
// kubelet alone: the Node reports the new version only once the kubelet is
// replaced and restarted (RestartKubelet).
func (s *Simulator) upgrade(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errors.New("usage: kubeadm upgrade apply VERSION | node")
	}
	fs := flag.NewFlagSet("upgrade "+args[0], flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Bool("yes", false, "")
	fs.String("patches", "", "")
	fs.String("ignore-preflight-errors", "", "")
	fs.Int("v", 0, "")
	// Flags may come before and after the version, as kubeadm's cobra
	// takes them.
	var positional []string
	for rest := args[1:]; ; {
		if err := fs.Parse(rest); err != nil {
			return fmt.Errorf("upgrade %s: %w", args[0], err)
		}
		if fs.NArg() == 0 {
			break
		}
		positional, rest = append(positional, fs.Arg(0)), fs.Args()[1:]
	}
	node, err := s.nodeName()
	if err != nil {
		return err
	}
	controlPlane := s.controlPlane()
	cluster, err := s.ClusterVersion(ctx)
	if err != nil {
		return err
	}
	switch args[0] {
	case "apply":
		if len(positional) != 1 {
			return errors.New("upgrade apply needs the version to upgrade to")
		}
		to := positional[0]
		if !controlPlane {
			return errors.New("[upgrade] this node has no control plane to upgrade; run `kubeadm upgrade node`")
		}
		if err := checkUpgrade(cluster, to, s.version()); err != nil {
			return err
		}
		if err := s.setClusterVersion(ctx, to); err != nil {
			return err
		}
		if err := s.staticPods(ctx, node); err != nil {
			return err
		}
		s.printf("[upgrade] SUCCESS! A control plane node of your cluster was upgraded to %q.\n", to)
	case "node":
		if cluster != s.version() {
			return fmt.Errorf("[upgrade] the cluster runs %s and this kubeadm is %s: upgrade the first control plane first", cluster, s.version())
		}
		if controlPlane {
			if err := s.staticPods(ctx, node); err != nil {
				return err
			}
		}
		s.printf("[upgrade] The configuration for this node was successfully upgraded to %s!\n", s.version())
	default:
		return fmt.Errorf("unsupported subcommand \"upgrade %s\"", args[0])
	}
	return nil
}

// checkUpgrade refuses what kubeadm upgrade apply refuses: a version newer
// than kubeadm itself, a downgrade, a skipped minor version.
func checkUpgrade(cluster, to, kubeadm string) error {
	c, errC := semver.ParseTolerant(cluster)
	t, errT := semver.ParseTolerant(to)
	k, errK := semver.ParseTolerant(kubeadm)
	if err := errors.Join(errC, errT, errK); err != nil {
		return fmt.Errorf("[upgrade/versions] %w", err)
	}
	switch {
	case t.GT(k):
		return fmt.Errorf("[upgrade/versions] specified version to upgrade to %q is higher than the kubeadm version %q", to, kubeadm)
	case t.LT(c):
		return fmt.Errorf("[upgrade/versions] specified version to upgrade to %q is lower than the cluster version %q", to, cluster)
	case t.Major != c.Major || t.Minor > c.Minor+1:
		return fmt.Errorf("[upgrade/versions] specified version to upgrade to %q is at least one minor release higher than the cluster version %q", to, cluster)
	}
	return nil
}

func (s *Simulator) nodeName() (string, error) {
	b, err := os.ReadFile(s.path(nodeFile))
	if err != nil {
		return "", fmt.Errorf("this machine has not joined a cluster: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

func (s *Simulator) controlPlane() bool {
	_, err := os.Stat(s.path(manifestsDir + "/kube-apiserver.yaml"))
	return err == nil
}

// ClusterVersion is ClusterConfiguration's kubernetesVersion in
// kube-system/kubeadm-config.
func (s *Simulator) ClusterVersion(ctx context.Context) (string, error) {
	cm, err := s.Client.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, "kubeadm-config", metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("[upgrade/config] reading kube-system/kubeadm-config: %w", err)
	}
	var cc struct {
		KubernetesVersion string `json:"kubernetesVersion"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data["ClusterConfiguration"]), &cc); err != nil {
		return "", fmt.Errorf("[upgrade/config] parsing the ClusterConfiguration: %w", err)
	}
	if cc.KubernetesVersion == "" {
		return "", errors.New("[upgrade/config] the ClusterConfiguration names no kubernetesVersion")
	}
	return cc.KubernetesVersion, nil
}

func (s *Simulator) setClusterVersion(ctx context.Context, version string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cms := s.Client.CoreV1().ConfigMaps(metav1.NamespaceSystem)
		cm, err := cms.Get(ctx, "kubeadm-config", metav1.GetOptions{})
		if err != nil {
			return err
		}
		var cc map[string]any
		if err := yaml.Unmarshal([]byte(cm.Data["ClusterConfiguration"]), &cc); err != nil {
			return err
		}
		cc["kubernetesVersion"] = version
		b, err := yaml.Marshal(cc)
		if err != nil {
			return err
		}
		cm.Data["ClusterConfiguration"] = string(b)
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		return err
	})
}

// RestartKubelet does what a restarted kubelet does: its Node reports
// the kubelet's version (s.Version, the binary now in place) and a fresh
// Ready heartbeat.
func (s *Simulator) RestartKubelet(ctx context.Context) error {
	name, err := s.nodeName()
	if err != nil {
		return err
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := s.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		n.Status.NodeInfo.KubeletVersion = s.version()
		for i := range n.Status.Conditions {
			n.Status.Conditions[i].LastHeartbeatTime = now
		}
		_, err = s.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

// Serving says why the node does not yet serve on version, or nil: what
// the agent's probe checks on a real host — the Node Ready on the
// version and, on a control plane, its static pods running it.
func (s *Simulator) Serving(ctx context.Context, version, nodeName string, controlPlane bool) error {
	n, err := s.Client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if n.Status.NodeInfo.KubeletVersion != version {
		return fmt.Errorf("node %s runs kubelet %s", nodeName, n.Status.NodeInfo.KubeletVersion)
	}
	ready := false
	for _, c := range n.Status.Conditions {
		ready = ready || c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
	}
	if !ready {
		return fmt.Errorf("node %s is not Ready", nodeName)
	}
	if !controlPlane {
		return nil
	}
	for _, component := range staticPods {
		p, err := s.Client.CoreV1().Pods(metav1.NamespaceSystem).Get(ctx, component+"-"+nodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got := p.Spec.Containers[0].Image; got != image(component, version) {
			return fmt.Errorf("%s runs %s", p.Name, got)
		}
	}
	return nil
}
