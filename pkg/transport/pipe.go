package transport

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// halfCloser is a connection whose write side can be closed alone.
type halfCloser interface {
	net.Conn
	CloseWrite() error
}

// yamuxHalfCloser closes a yamux stream's write side: yamux's Close sends
// FIN and still reads until the peer's FIN.
type yamuxHalfCloser struct{ net.Conn }

func (y yamuxHalfCloser) CloseWrite() error { return y.Close() }

// Pipe copies bytes both ways between a and b until both directions end,
// one direction has ended and the other is still open after halfClose, or
// nothing moved either way for idle. Each side's write end is closed when
// its source ends, so a request/response protocol sees EOF properly. A
// yamux stream's Close is such a half-close.
func Pipe(a net.Conn, b net.Conn, idle, halfClose time.Duration) (aToB, bToA int64) {
	ha, hb := asHalfCloser(a), asHalfCloser(b)
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	done := make(chan struct{}, 2)
	var n [2]int64
	var wg sync.WaitGroup
	cp := func(i int, dst halfCloser, src net.Conn) {
		defer wg.Done()
		n[i], _ = io.CopyBuffer(activity{dst, &last}, src, make([]byte, 16<<10))
		_ = dst.CloseWrite()
		done <- struct{}{}
	}
	wg.Add(2)
	go cp(0, hb, a)
	go cp(1, ha, b)

	if idle <= 0 || halfClose <= 0 {
		panic("transport.Pipe: idle and halfClose must be positive")
	}
	tick := time.NewTicker(max(min(idle, halfClose)/4, time.Millisecond))
	defer tick.Stop()
	ended := 0
	var firstEnd time.Time
	for ended < 2 {
		select {
		case <-done:
			ended++
			firstEnd = time.Now()
		case now := <-tick.C:
			if ended == 1 && now.Sub(firstEnd) > halfClose ||
				now.Sub(time.Unix(0, last.Load())) > idle {
				// A deadline wakes blocked reads at once; a yamux stream
				// whose write side is already closed ignores a second
				// Close until its own close timeout.
				_ = a.SetDeadline(now)
				_ = b.SetDeadline(now)
				_ = a.Close()
				_ = b.Close()
				wg.Wait()
				return n[0], n[1]
			}
		}
	}
	wg.Wait()
	return n[0], n[1]
}

func asHalfCloser(c net.Conn) halfCloser {
	if h, ok := c.(halfCloser); ok {
		return h
	}
	return yamuxHalfCloser{c}
}

// activity is a writer that notes when bytes last moved.
type activity struct {
	w    io.Writer
	last *atomic.Int64
}

func (a activity) Write(p []byte) (int, error) {
	n, err := a.w.Write(p)
	a.last.Store(time.Now().UnixNano())
	return n, err
}
