package testhost

import (
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"slices"

	"sigs.k8s.io/yaml"

	agentunit "github.com/edgefleet/fleet/manifests/agent"
)

// containerdConfig is the host's /etc/containerd/config.toml. The CRI
// settings are this machine's, not an edge image's: no registry (the
// sandbox image is preloaded), no CAP_SYS_RESOURCE (runc cannot lower a
// pod's oom_score_adj), cgroup v1 without systemd (cgroupfs).
const containerdConfig = `version = 2
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
  address = "/run/containerd/containerd.sock"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10.2"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "/etc/cni/net.d"
`

// containerdUnit is Debian's containerd.service, less what this machine
// cannot do (modprobe, OOMScoreAdjust).
const containerdUnit = `[Unit]
Description=containerd container runtime
After=network.target local-fs.target

[Service]
ExecStart=/usr/bin/containerd
Type=notify
Delegate=yes
KillMode=process
Restart=always
RestartSec=5

[Install]
WantedBy=multi-user.target
`

// kubeletUnit and kubeadmDropIn are the kubelet packages' unit and
// kubeadm drop-in, with the binary in /usr/local/bin.
const kubeletUnit = `[Unit]
Description=kubelet: The Kubernetes Node Agent
Wants=network-online.target
After=network-online.target

[Service]
ExecStart=/usr/local/bin/kubelet
Restart=always
StartLimitInterval=0
RestartSec=10

[Install]
WantedBy=multi-user.target
`

const kubeadmDropIn = `[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=/usr/local/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
`

// agentDropIn points fleet-agent's packaged unit at the binary's place in
// this image.
const agentDropIn = `[Service]
ExecStart=
ExecStart=/usr/local/bin/fleet-agent --config /etc/fleet-agent/config.yaml
`

const dbusConfig = `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=/run/dbus/system_bus_socket</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="root"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
    <allow own="*"/>
  </policy>
</busconfig>
`

// writeImage lays out the host's own files: what its OS image would ship.
func (h *Host) writeImage(o HostOptions) error {
	root := filepath.Join(h.Dir, "root")
	for _, d := range bound {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	without := func(part string) bool { return slices.Contains(o.Without, part) }
	files := map[string]string{
		"root/etc/hostname":                                           h.Name + "\n",
		"root/etc/machine-id":                                         fmt.Sprintf("%032x\n", fnv64(h.Name)),
		"root/etc/hosts":                                              fmt.Sprintf("127.0.0.1 localhost\n%s %s\n", h.Addr, h.Name),
		"root/etc/containerd/config.toml":                             containerdConfig,
		"root/etc/cni/net.d/10-fleet.conflist":                        cniConfig(h.PodCIDR),
		"root/etc/systemd/system/fleet-agent.service":                 string(agentunit.Unit),
		"root/etc/systemd/system/fleet-agent.service.d/10-image.conf": agentDropIn,
		"dbus.conf": dbusConfig,
	}
	if !without("containerd") {
		files["root/etc/systemd/system/containerd.service"] = containerdUnit
	}
	if !without("kubelet") {
		files["root/etc/systemd/system/kubelet.service"] = kubeletUnit
		files["root/etc/systemd/system/kubelet.service.d/10-kubeadm.conf"] = kubeadmDropIn
	}
	for k, v := range sysctls {
		files["sysctl/"+filepath.Base(filepath.Dir(k))+"."+filepath.Base(k)] = v + "\n"
	}
	for p, c := range files {
		full := filepath.Join(h.Dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			return err
		}
	}
	// unitd is also the host's systemctl, ahead of the machine's on PATH.
	links := map[string]string{"fleet-agent": o.Bin.Agent, "unitd": o.Bin.Unitd, "systemctl": o.Bin.Unitd,
		"kubeadm": filepath.Join(o.Bin.K8s, "kubeadm")}
	if !without("kubelet") {
		links["kubelet"] = filepath.Join(o.Bin.K8s, "kubelet")
	}
	// Paths under the host's root, for links outside /usr/local/bin.
	rooted := map[string]string{}
	for name, target := range links {
		rooted[filepath.Join("usr/local/bin", name)] = target
	}
	for version, dir := range o.Staged {
		for _, name := range []string{"kubeadm", "kubelet", "images"} {
			rooted[filepath.Join("opt/fleet/kubernetes", version, name)] = filepath.Join(dir, name)
		}
	}
	for name, target := range rooted {
		abs, err := filepath.Abs(target)
		if err == nil {
			_, err = os.Stat(abs)
		}
		if err != nil {
			return fmt.Errorf("the host image needs %s: %w", name, err)
		}
		link := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			return err
		}
		if err := os.Symlink(abs, link); err != nil {
			return err
		}
	}
	return nil
}

// AgentConfig is what the host's /etc/fleet-agent/config.yaml says, as
// an image's first-boot step or an installer would write it.
type AgentConfig struct {
	Hub            string `json:"hub"`
	Token          string `json:"token,omitempty"`
	CACertHash     string `json:"caCertHash"`
	ResyncInterval string `json:"resyncInterval,omitempty"`
}

// StartAgent configures fleet-agent and starts its unit.
func (h *Host) StartAgent(ctx context.Context, c AgentConfig) error {
	b, err := yaml.Marshal(c)
	if err != nil {
		return fmt.Errorf("host %s: the agent's config: %w", h.Name, err)
	}
	if err := os.WriteFile(h.Root("etc/fleet-agent/config.yaml"), b, 0o600); err != nil {
		return fmt.Errorf("host %s: writing the agent's config: %w", h.Name, err)
	}
	return h.Unit(ctx, "start", "fleet-agent.service")
}

func fnv64(s string) uint64 {
	f := fnv.New64a()
	_, _ = f.Write([]byte(s))
	return f.Sum64()
}

// shortHash names a host's link on the site side (15 characters at most).
func shortHash(s string) string { return fmt.Sprintf("%08x", uint32(fnv64(s))) }
