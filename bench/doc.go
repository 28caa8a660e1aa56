// Package bench holds fleet's benchmarks, run by `make bench` against a real
// API server (never by `make test`). Their figures go into
// docs/PERFORMANCE.md with the command that produced them.
package bench
