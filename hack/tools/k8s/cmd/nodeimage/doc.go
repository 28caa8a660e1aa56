// Command nodeimage builds container images from local binaries, as OCI
// layout tarballs that `ctr -n k8s.io images import` loads, so the
// real-node test hosts can run kubeadm's control plane with no registry.
//
// `nodeimage build` makes one single-layer linux/amd64 image: each binary at
// /usr/local/bin/<name> with a symlink /<name> to it (the pause image is run
// as /pause), the dynamic loader and every shared library the binaries link,
// found from their ELF PT_INTERP and DT_NEEDED entries in the host's library
// directories, /etc/passwd and /etc/group with root and nobody, and /tmp.
// Every entry has a fixed mtime and owner, so the same inputs give the same
// image digest.
//
// `nodeimage kubeadm` asks a kubeadm binary which images its version wants
// (kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy,
// coredns, etcd, pause) and builds each from the binary of its name into
// <image>.tar, skipping archives already newer than their inputs. The
// kube-proxy image also carries the iptables (nft backend) and nft that
// kube-proxy runs, taken with their extensions and libraries from the
// machine's Debian iptables and nftables packages.
package main
