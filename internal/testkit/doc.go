// Package testkit holds the small helpers fleet's test suites share:
// waiting for a condition, a free loopback address, a connected TCP pair
// and a buffer safe to write from one goroutine and read from another.
// The rest of the test kit lives beneath it: testenv (a real API server and
// Cluster API), testhost (real edge hosts) and unitd (the systemd stand-in
// those hosts run).
package testkit
