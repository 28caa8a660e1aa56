// Package version carries the version stamped into fleet's binaries at
// build time (make build sets it with -ldflags).
package version
