// Command kubectl-fleet is the `kubectl fleet` plugin operators use on the
// hub cluster. Installed on PATH (or through krew), kubectl finds it.
package main
