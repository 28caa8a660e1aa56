// Package admission decides what work the hub's gateway takes on before
// a peer has proven who it is, and how much of it at once: the TLS
// listener (a ClientHello first, then one of a bounded number of handshake
// places, served newest first and capped per source address, and bounded
// pending and established connections per source), the Places every
// bounded kind of work holds (session handshakes, enrollments, status
// writes), and Waves: whether a wave of connections is queueing now, which
// lets writes that can wait stand aside while it lasts.
//
// The limits and what a well-behaved agent is guaranteed under a flood are
// in docs/PROTOCOL.md, "Security limits"; why handshakes are bounded and
// served newest first is in docs/PERFORMANCE.md, "Cold start and reconnect
// storm".
package admission
