//go:build !linux

package transport

// canPeek: on this system a HubConn never waits without reading (its
// reader parks inside the TLS read, as with gorilla).
const canPeek = false

func peekReadable(uintptr) bool { return true }
