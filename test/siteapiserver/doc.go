// Command siteapiserver plays an edge cluster's API server in tests of edge
// reach: etcd and kube-apiserver (from bin/k8s) started in the network
// namespace it is run in, listening on every address of that namespace,
// with a serving certificate for the cluster's endpoint name — as kubeadm
// would issue it — so clients that reach it through the hub's tunnel
// verify TLS against that name, end to end.
//
// It writes an administrator kubeconfig whose server is the endpoint name,
// prints "ready", and runs until SIGTERM or SIGINT.
package main
