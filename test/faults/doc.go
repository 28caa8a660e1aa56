// Package faults runs fleet through the faults an edge fleet lives
// through, chosen at random from a printed seed, and checks what must hold
// whatever happened, not how long it took: no bootstrap ran twice for a
// Machine, no host served two Machines at once, no agent reset its host
// without an order, and every Machine and EdgeHost converged to the truth
// once the faults stopped.
//
// The parts are real: a kube-apiserver and etcd, Cluster API's and CABPK's
// reconcilers, fleet's hub with its TLS gateway (the fleet-hub binary where
// the suite kills it), and fleet-agent processes (kubeadm simulated by
// test/nodesim) in a site's network namespace whose only way out is an
// uplink the suite drives: cut (connections reset, new ones refused),
// half-open (bytes dropped both ways, connections kept), slow (seconds of
// latency) and lossy (packets dropped). The agents write a history of
// what they did on their own disks; the suite reads it with the API
// server's view.
//
// go test ./test/faults runs the short form (as root); -faults.seed=N
// replays a run, -faults.rounds=N runs more faults per phase and
// -faults.hosts=N more hosts where hubs are killed. A failing run logs its
// seed and writes its history to a file it names.
package faults
