// Package kube turns kubectl's connection flags into a client for the hub
// cluster, with errors a person can act on.
package kube
