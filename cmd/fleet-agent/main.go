// Command fleet-agent runs on each edge machine, dials out to the hub,
// provisions its machine and reports on it.
//
// This release ships only the version command: the session, enrollment and
// sync loop land with the hub↔agent work (see the README's status table).
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
	fmt.Fprintln(os.Stderr, "fleet-agent: only `fleet-agent version` exists in this release; enrollment and the sync loop are not built yet (see README, Status)")
	os.Exit(2)
}
