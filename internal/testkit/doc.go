// Package testkit holds the small helpers fleet's test suites share:
// waiting for a condition, a free loopback address, a connected TCP pair
// and a buffer safe to write from one goroutine and read from another.
// The rest of the test kit lives beneath it: testenv (a real API server and
// Cluster API) and testhost (real edge hosts booted from the edge image).
package testkit
