//go:build tools

// Package tools pins clusterctl for `go build` in this module: tests run the
// real clusterctl against fleet's release artifacts.
package tools

import (
	_ "sigs.k8s.io/cluster-api/cmd/clusterctl"
)
