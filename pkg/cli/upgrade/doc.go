// Package upgrade is `kubectl fleet upgrade cluster`: it moves a cluster's
// Machines to another Kubernetes version in place, through their hosts'
// agents, after checking every host can get the version.
package upgrade
