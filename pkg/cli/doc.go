// Package cli is `kubectl fleet`: the root command and its wiring. Each
// subcommand lives in its own package with an options struct
// (Complete/Validate/Run), in the style of kubectl and the CloudNativePG
// plugin.
package cli
