// Command echoserver is the workload the real-node tests run in a pod: an
// HTTP server that answers with the pod's name, so a test can tell the
// answer came from the pod it scheduled.
package main
