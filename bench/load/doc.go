// Package load drives fleet at scale for the benchmarks: a real fleet-hub
// process (gateway and reconcilers) against a real API server, and many
// real agents in this process — the real session, TLS, websocket and
// protocol code, with a provisioner that only records — spread over
// loopback source addresses so that no port range runs out.
//
// Every run is bounded: agents and hub stop with the context or Stop, and
// the helpers wait with timeouts.
package load
