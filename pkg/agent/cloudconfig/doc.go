// Package cloudconfig parses the cloud-config that Cluster API's kubeadm
// bootstrap provider (CABPK) emits, so fleet-agent can run it itself —
// without cloud-init and without a reboot.
//
// It understands exactly what CABPK writes: the "## template: jinja" header
// with the {{ ds.meta_data.* }} substitutions CABPK templates use
// (local_hostname, instance_id, and provider_id, which fleet defines),
// write_files (content, encoding b64/gzip/gz+b64, owner, permissions,
// append), runcmd and bootcmd (string and list forms), users and ntp.
// Everything else is refused by name — disk_setup, fs_setup, mounts, unknown
// keys, other template syntax — never silently skipped.
package cloudconfig
