// Command fleet-agent runs on each edge machine: it dials out to the hub,
// enrolls with a one-time token and a pinned hub CA, keeps one session, and
// applies the desired state the hub sends.
//
//	fleet-agent --hub https://hub.example.com:8443 --token abcdef.0123456789abcdef \
//	    --ca-cert-hash sha256:<hex>
//
// Settings may also come from /etc/fleet-agent/config.yaml; flags win.
package main
