// Command capicrds bundles the CustomResourceDefinitions that Cluster API
// ships in its Go module (core, kubeadm bootstrap, kubeadm control plane)
// into one gzipped multi-document YAML file, and their admission webhook
// configurations into another, so that the embedded hub can install them
// without a Go toolchain or module cache at run time.
//
//	go run ./hack/capicrds -o pkg/hub/embedded/clusterapi/crds.yaml.gz
//
// The output is deterministic (sorted inputs, no gzip timestamp), so `make
// verify` can tell when it is stale.
package main
