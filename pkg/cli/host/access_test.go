package host

import (
	"bytes"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgefleet/fleet/pkg/contract/hostaccess"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
)

func TestLogsFlagsThatDoNotGoTogether(t *testing.T) {
	for _, c := range []struct {
		o    LogsOptions
		want string
	}{
		{LogsOptions{Name: "h", Bootstrap: true, Reset: true}, "pick one"},
		{LogsOptions{Name: "h", Bootstrap: true, Follow: true}, "agent's own log only"},
		{LogsOptions{Name: "h", Reset: true, Since: time.Minute}, "agent's own log only"},
		{LogsOptions{Name: "h", Tail: -2}, "--tail -2"},
		{LogsOptions{Name: "h", Tail: -1, LimitBytes: wire.MaxLogBytes + 1}, "--limit-bytes"},
		{LogsOptions{Name: "Not_A_Host", Tail: -1}, "host name"},
	} {
		err := c.o.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.o, err, c.want)
		}
	}
	if err := (&LogsOptions{Name: "h", Tail: -1, Follow: true, Since: time.Hour}).Validate(); err != nil {
		t.Errorf("follow with since: %v", err)
	}
}

func TestFactsSummary(t *testing.T) {
	now := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	rtt := int64(42)
	f := &hostaccess.EdgeHostFacts{ObjectMeta: metav1.ObjectMeta{Namespace: "shops", Name: "kiosk-17"},
		Observed: metav1.Time{Time: now},
		Report: wire.FactsReport{
			Facts:  infrav1.HostFacts{Hostname: "kiosk-17", OS: "Debian GNU/Linux 12 (bookworm)", Arch: "arm64", CPUs: 4, MemoryBytes: 8 << 30, AgentVersion: "v0.4.0", KubernetesVersions: []string{"v1.35.4"}},
			Kernel: "6.1.0-28-arm64", BootTime: &metav1.Time{Time: now.Add(-49 * time.Hour)},
			Interfaces:        []wire.Interface{{Name: "eth0", Up: true, MAC: "02:00:00:00:00:01", Addresses: []string{"10.0.0.7/24"}}},
			Disks:             []wire.Disk{{Mount: "/", Device: "/dev/mmcblk0p2", Type: "ext4", SizeBytes: 30 << 30, AvailBytes: 3 << 29}},
			KubernetesVersion: "v1.36.3",
			Link:              &infrav1.LinkHealth{Probe: infrav1.LinkProbeRunning, WindowSeconds: 60, TCPRetransmits: 3, HubRTTMilliseconds: &rtt},
			Certificates:      []wire.CertificateDate{{Path: "/etc/kubernetes/pki/apiserver.crt", Subject: "kube-apiserver", NotAfter: metav1.Time{Time: now.Add(-time.Hour)}}},
			Provisioning:      &infrav1.HostProvisioningStatus{State: infrav1.ProvisioningSucceeded},
		}}
	var out bytes.Buffer
	if err := printFacts(&out, f, now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Kernel:        6.1.0-28-arm64",
		"Architecture:  arm64, 4 CPUs, 8.0 GiB memory",
		"Booted:        2026-12-03T23:00:00Z (2d1h ago)",
		"Kubernetes:    v1.36.3 (staged: v1.35.4)",
		"Workload:      Provisioned",
		"Link:          3 TCP retransmissions (0 to the hub), 0 packet drops in 60s; 42 ms to the hub",
		"  eth0  up     02:00:00:00:00:01  10.0.0.7/24",
		"  /      /dev/mmcblk0p2  ext4  30.0 GiB  1.5 GiB",
		"/etc/kubernetes/pki/apiserver.crt  kube-apiserver  2026-12-05T23:00:00Z  expired",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
}
