// Package wire is the hub↔agent protocol: a versioned envelope, the messages
// it carries, and the length-prefixed framing of the control stream.
//
// The protocol is level-triggered, like the kubelet's: the hub always sends
// a host's full desired state (with the generation it was computed from) and
// the agent always reports its full status (with the generation it has acted
// on). Re-sending either is harmless; a receiver never needs history.
//
// Everything here is input from the other side of a network: every length is
// bounded before anything is allocated, and a malformed frame is an error,
// never a panic. The decoder is fuzzed (FuzzDecode).
package wire
