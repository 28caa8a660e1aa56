// Package command is the one shape every `kubectl fleet` subcommand has, as
// in kubectl and the CloudNativePG plugin: options that Complete (take the
// arguments, build clients; nothing is sent yet), Validate (check every
// input; still nothing sent) and Run (talk to the API server). Each
// subcommand package keeps its cobra wiring in cmd.go, apart from that logic.
package command
