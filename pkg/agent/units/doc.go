// Package units restarts the systemd units a bootstrap reconfigured
// (containerd, the kubelet) through systemd's D-Bus API, the way
// `systemctl daemon-reload && systemctl restart …` would, without shelling
// out. cloud-init leaves this to the bootstrap's own commands; the agent
// does it so that the files CABPK writes (a containerd config, kubelet
// drop-ins) take effect before kubeadm runs.
//
// Where there is no system bus (containers, minimal images, the demo's
// sandboxes) Apply says so in plain words and changes nothing: the
// bootstrap goes on, and its own commands may still restart what they need.
package units
