// Package ociref reads the oci://REGISTRY/REPOSITORY[:TAG] references an
// EdgeKubernetesRelease may name its archive by, as the wire codec, the hub
// and the agent must all read them alike. It imports nothing but the
// standard library; pkg/ociblob fetches what one names.
package ociref
