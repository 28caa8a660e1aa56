package transport

import (
	"errors"
	"io"
	"syscall"
)

// ClosedUnserved reports whether a dial failed because the far end
// accepted the TCP connection and closed it before the TLS handshake got
// anywhere: reset, or end of stream, where the server's hello should have
// been. That is how the hub turns a connection away when more of them wait
// for a TLS handshake than it can serve (the gateway's handshake
// admission) — it cannot say 503 before TLS — so the caller may take it
// for a busy hub rather than an absent one. A refused connection or a
// timeout is not this.
func ClosedUnserved(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
