// Package version carries the version stamped into fleet's binaries at
// build time (make build sets it with -ldflags).
package version

// Version is the fleet release, or "dev" for an unstamped build.
var Version = "dev"
