// Package localkube runs a local etcd and kube-apiserver (the binaries
// `make k8s` builds into bin/k8s) whose data lives in a directory, so a
// stopped and restarted server still holds everything it held.
//
// It is what the embedded hub (`fleet-hub dev`) and the local demo run on.
// The API server's certificates are made fresh at each start (only etcd's
// data persists) and a kubeconfig for an administrator is written next to
// the data. A lock file keeps two processes off one directory, and
// processes left behind by a run that was killed outright are stopped
// before a new start.
package localkube
