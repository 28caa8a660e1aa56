// Package render renders fleet's clusterctl release artifacts: the
// provider components (manifests/release through kustomize, with the hub's
// image set in one place), the provider metadata, and the cluster templates
// made from the same objects `kubectl fleet create cluster` writes.
package render
