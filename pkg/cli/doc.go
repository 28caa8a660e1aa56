// Package cli is `kubectl fleet`: the root command and its wiring. Each
// subcommand lives in its own package, in the shape of kubectl and the
// CloudNativePG plugin: cmd.go builds the cobra command and binds flags into
// an options struct, whose Complete, Validate and Run (package command) hold
// the logic. Inputs are checked (package validate) before anything is sent.
package cli
