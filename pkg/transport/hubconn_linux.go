package transport

import "syscall"

// canPeek: this system can tell a socket has data without reading it.
const canPeek = true

// peekReadable is a syscall.RawConn read function that reads nothing: it
// says "not yet" (wait for the poller) while the socket has no data, and
// "done" once it has data, its end or an error, which the next Read finds.
// Buffered uses it to peek alone.
// It peeks rather than trusting the poller alone, which reports edges: data
// that arrived before the wait began may bring no new one.
func peekReadable(fd uintptr) bool {
	var b [1]byte
	for {
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch err {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		return true
	}
}
