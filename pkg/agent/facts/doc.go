// Package facts reads what the hub is told about an edge host: its
// hostname, machine ID, OS, architecture, CPUs and memory, and its
// addresses. Files are read under the host's root directory, so an agent
// managing a sandbox reports the sandbox.
package facts
