// Package atomicfile writes a file so that a power cut leaves the old or
// the new one, never half of one: a temporary file in the same directory,
// synced, renamed over the target, and the directory synced. The agent's
// state store and the provisioner's record of what a bootstrap wrote both
// use it.
package atomicfile
