// Command hubimage builds fleet-hub's container image without a container
// runtime: one image per platform from cross-compiled, static fleet-hub
// binaries, joined in an OCI image index and written as an OCI layout
// tarball (an "oci-archive"); and pushes such an archive to a registry.
//
// The image has no base and no shell: the binary at /fleet-hub, /etc/passwd
// and /etc/group naming the non-root user it runs as (65532, as distroless'
// "nonroot"), the host's CA bundle for TLS to anything outside the cluster,
// and an empty /tmp. Every file has a fixed owner and mtime, so the same
// binaries give the same digest.
package main
