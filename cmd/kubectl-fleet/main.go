// Command kubectl-fleet is the `kubectl fleet` plugin operators use on the
// hub cluster.
//
// This release ships only the version command: create, scale, describe, get,
// delete and token land with the kubectl plugin work (see the README's status
// table).
package main

import (
	"fmt"
	"os"

	"github.com/edgefleet/fleet/internal/version"
)

func main() {
	if len(os.Args) == 2 && (os.Args[1] == "version" || os.Args[1] == "--version") {
		fmt.Println(version.Version)
		return
	}
	fmt.Fprintln(os.Stderr, "kubectl fleet: only `kubectl fleet version` exists in this release; meanwhile use `kubectl get edgehosts,edgemachines,edgeclusters` (see README, Status)")
	os.Exit(2)
}
