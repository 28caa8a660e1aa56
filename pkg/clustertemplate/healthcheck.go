package clustertemplate

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// Defaults of the health checks `create cluster` writes.
const (
	// DefaultNodeStartupTimeout is twice Cluster API's: an edge host may
	// pull its images over a slow uplink.
	DefaultNodeStartupTimeout = 20 * time.Minute
	// DefaultUnhealthyTimeout is how long a Node may be NotReady or
	// unreachable (Ready False or Unknown) before its Machine is replaced.
	DefaultUnhealthyTimeout = 5 * time.Minute
	// DefaultHostUnreadyTimeout is how long a Machine's infrastructure may
	// read not ready — its host's agent gone, its host lost, its bootstrap
	// failed — before it is replaced. Longer than the Node's: an agent
	// alone being gone leaves the Node serving.
	DefaultHostUnreadyTimeout = 30 * time.Minute
	// DefaultMaxUnhealthy is Cluster API's default: remediation is never
	// short-circuited. A percentage would forbid any remediation in a
	// cluster of one or two workers.
	DefaultMaxUnhealthy = "100%"
)

// HealthCheck is what the MachineHealthChecks of a cluster check. A zero
// timeout turns its check off.
type HealthCheck struct {
	// NodeStartupTimeout: from the Machine's creation (or its
	// infrastructure getting ready) to its Node.
	NodeStartupTimeout time.Duration
	// UnhealthyTimeout: the Node's Ready False or Unknown.
	UnhealthyTimeout time.Duration
	// HostUnreadyTimeout: the Machine's InfrastructureReady False, which
	// mirrors the EdgeMachine's Ready (HostAgentConnected among others).
	HostUnreadyTimeout time.Duration
	// MaxUnhealthy is remediation.triggerIf.unhealthyLessThanOrEqualTo.
	MaxUnhealthy intstr.IntOrString
}

// DefaultHealthCheck is what `create cluster` writes unless told otherwise.
func DefaultHealthCheck() HealthCheck {
	return HealthCheck{NodeStartupTimeout: DefaultNodeStartupTimeout, UnhealthyTimeout: DefaultUnhealthyTimeout,
		HostUnreadyTimeout: DefaultHostUnreadyTimeout, MaxUnhealthy: intstr.FromString(DefaultMaxUnhealthy)}
}

func seconds(d time.Duration) *int32 { return ptr.To(int32(d.Round(time.Second) / time.Second)) }

// healthChecks returns a MachineHealthCheck for the workers and, with a
// KubeadmControlPlane, one for the control plane. Cluster API remediates
// only Machines a MachineSet or KubeadmControlPlane owns, so plain
// control-plane Machines get none.
func (s Spec) healthChecks() []Object {
	if s.HealthCheck == nil {
		return nil
	}
	var objs []Object
	if s.ControlPlane == "kubeadm" {
		objs = append(objs, s.healthCheck(s.controlPlaneName(), map[string]string{clusterv1.MachineControlPlaneLabel: ""}))
	}
	return append(objs, s.healthCheck(s.workersName(), map[string]string{clusterv1.MachineDeploymentNameLabel: s.workersName()}))
}

func (s Spec) healthCheck(name string, selector map[string]string) *clusterv1.MachineHealthCheck {
	hc := s.HealthCheck
	checks := clusterv1.MachineHealthCheckChecks{NodeStartupTimeoutSeconds: seconds(hc.NodeStartupTimeout)}
	if hc.UnhealthyTimeout > 0 {
		checks.UnhealthyNodeConditions = []clusterv1.UnhealthyNodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionFalse, TimeoutSeconds: seconds(hc.UnhealthyTimeout)},
			{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, TimeoutSeconds: seconds(hc.UnhealthyTimeout)},
		}
	}
	if hc.HostUnreadyTimeout > 0 {
		// Cluster API mirrors the EdgeMachine's Ready, nothing else of
		// it, into the Machine: that is where the agent's absence shows.
		checks.UnhealthyMachineConditions = []clusterv1.UnhealthyMachineCondition{
			{Type: clusterv1.MachineInfrastructureReadyCondition, Status: metav1.ConditionFalse, TimeoutSeconds: seconds(hc.HostUnreadyTimeout)},
		}
	}
	return &clusterv1.MachineHealthCheck{
		TypeMeta:   metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "MachineHealthCheck"},
		ObjectMeta: s.meta(name),
		Spec: clusterv1.MachineHealthCheckSpec{
			ClusterName: s.Name,
			Selector:    metav1.LabelSelector{MatchLabels: selector},
			Checks:      checks,
			Remediation: clusterv1.MachineHealthCheckRemediation{TriggerIf: clusterv1.MachineHealthCheckRemediationTriggerIf{
				UnhealthyLessThanOrEqualTo: ptr.To(hc.MaxUnhealthy)}},
		},
	}
}
