// Package testkit holds the small helpers fleet's test suites share:
// waiting for a condition, a free loopback address, a connected TCP pair
// and a buffer safe to write from one goroutine and read from another.
// Real Kubernetes for tests is internal/testenv's job.
package testkit
