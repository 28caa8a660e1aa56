// Package progress is what every `kubectl fleet` command that starts long
// work does with --wait and --timeout: look again until the work is done,
// print a line whenever where it stands changes, and give up at the timeout
// (or on Ctrl-C) saying where it stood.
package progress
