// Package ociblob fetches a blob from an OCI distribution registry by its
// digest: an archive pushed as an OCI artifact (`oras push`) and named by
// an oci://REGISTRY/REPOSITORY reference and the archive's sha256, which is
// the blob's digest. Anonymous pulls only, with the registry's bearer-token
// challenge answered.
package ociblob
