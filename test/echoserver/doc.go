// Command echoserver is the workload the real-node tests run in a pod: an
// HTTP server that answers with the pod's name, so a test can tell the
// answer came from the pod it scheduled. With --get URL it is the client
// instead: it fetches URL once and prints the answer, so a pod of the same
// image can reach a Service by its DNS name (there is no shell or wget in
// the image).
package main
