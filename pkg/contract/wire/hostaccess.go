package wire

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// Host access: the hub opens a stream and asks for a log (Logs) or for
// what the agent knows of its host (FactsRequest), for an operator's
// `kubectl fleet host logs|facts`. Only agents that announce the
// capability are asked.
const (
	// CapabilityLogs says the agent serves Logs streams.
	CapabilityLogs = "logs"
	// CapabilityFacts says the agent serves FactsRequest streams.
	CapabilityFacts = "facts"
)

// LogSource names a log an agent keeps.
type LogSource string

// Log sources.
const (
	// LogAgent is the agent's own recent log.
	LogAgent LogSource = "agent"
	// LogBootstrap is the whole output of the last bootstrap's commands.
	LogBootstrap LogSource = "bootstrap"
	// LogReset is the whole output of the last reset's commands.
	LogReset LogSource = "reset"
)

// MaxLogBytes bounds what one Logs stream carries when it does not follow.
const MaxLogBytes = 8 << 20

// Logs asks for one of the agent's logs; LogsReady, then the log's bytes
// (secrets redacted), follow until the log's end or, with Follow, until
// the hub closes the stream.
type Logs struct {
	Source LogSource `json:"source"`
	// SinceSeconds keeps only lines newer than this (agent log only).
	SinceSeconds int64 `json:"sinceSeconds,omitempty"`
	// TailLines keeps only the last lines; 0 keeps all.
	TailLines int64 `json:"tailLines,omitempty"`
	// LimitBytes bounds the bytes sent, at most MaxLogBytes; 0 means that.
	LimitBytes int64 `json:"limitBytes,omitempty"`
	// Follow keeps the stream open for new lines (agent log only).
	Follow bool `json:"follow,omitempty"`
}

// LogsReady answers Logs: the log exists and its bytes follow.
type LogsReady struct {
	// Written is when the log was last written, if known.
	Written *metav1.Time `json:"written,omitempty"`
}

// FactsRequest asks what the agent knows of its host.
type FactsRequest struct {
	// Unused; present so the payload is an object.
	Detail bool `json:"detail,omitempty"`
}

// FactsReport answers FactsRequest.
type FactsReport struct {
	Facts infrav1.HostFacts `json:"facts"`
	// Kernel is the running kernel's release.
	Kernel string `json:"kernel,omitempty"`
	// BootTime is when the host booted.
	BootTime *metav1.Time `json:"bootTime,omitempty"`
	// AgentStarted is when this agent process started.
	AgentStarted *metav1.Time `json:"agentStarted,omitempty"`
	// Interfaces are the host's network interfaces and their addresses.
	Interfaces []Interface `json:"interfaces,omitempty"`
	// Disks are the mounted file systems that hold data.
	Disks []Disk `json:"disks,omitempty"`
	// KubernetesVersion is the kubelet's version once provisioned.
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// Link is the session's link health over the last window.
	Link *infrav1.LinkHealth `json:"link,omitempty"`
	// Certificates are the host's Kubernetes certificates and when each
	// ends.
	Certificates []CertificateDate `json:"certificates,omitempty"`
	// Provisioning is the workload on the host.
	Provisioning *infrav1.HostProvisioningStatus `json:"provisioning,omitempty"`
}

// Bounds of a FactsReport's lists.
const (
	MaxFactInterfaces   = 32
	MaxFactDisks        = 32
	MaxFactCertificates = 64
)

// Interface is a network interface.
type Interface struct {
	Name      string   `json:"name"`
	Up        bool     `json:"up,omitempty"`
	MAC       string   `json:"mac,omitempty"`
	Addresses []string `json:"addresses,omitempty"`
}

// Disk is a mounted file system.
type Disk struct {
	Mount      string `json:"mount"`
	Device     string `json:"device,omitempty"`
	Type       string `json:"type,omitempty"`
	SizeBytes  int64  `json:"sizeBytes,omitempty"`
	AvailBytes int64  `json:"availBytes,omitempty"`
}

// CertificateDate is one certificate file's validity.
type CertificateDate struct {
	Path     string      `json:"path"`
	Subject  string      `json:"subject,omitempty"`
	NotAfter metav1.Time `json:"notAfter"`
}
