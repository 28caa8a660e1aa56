package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"
)

// handshakeListener does the TLS handshakes of the connections it accepts
// before net/http sees them, at most limit at once; connections beyond
// that wait up to wait for a place, newest first (see newestFirst), and
// are closed if none comes.
//
// Why: after an outage a whole fleet dials at once. Behind tls.NewListener
// every connection's handshake runs in a goroutine of its own at the same
// time, and the scheduler shares the cores between all of them: with
// thousands in progress none finishes before the agents' 15-s dial timeout,
// all that work is lost, and the goroutines of the sessions already
// established wait so long for a core that their agents' pings time out,
// which brings those agents back too. A 10,000-agent cold start collapsed
// so for 40 minutes. Bounded, handshakes finish in milliseconds each, one
// after another, and established sessions keep their share of the cores.
type handshakeListener struct {
	raw     net.Listener
	cfg     *tls.Config
	places  *newestFirst
	wait    time.Duration
	timeout time.Duration

	ready  chan net.Conn
	ctx    context.Context
	cancel context.CancelFunc
	once   sync.Once
	mu     sync.Mutex
	err    error
}

// newHandshakeListener serves TLS on raw with at most limit handshakes at
// once, each bounded by timeout.
func newHandshakeListener(raw net.Listener, cfg *tls.Config, limit int, wait, timeout time.Duration) *handshakeListener {
	ctx, cancel := context.WithCancel(context.Background())
	l := &handshakeListener{raw: raw, cfg: cfg, places: newNewestFirst(limit), wait: wait, timeout: timeout,
		ready: make(chan net.Conn), ctx: ctx, cancel: cancel}
	go l.acceptLoop()
	return l
}

// Accept returns the next connection whose TLS handshake is done.
func (l *handshakeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ready:
		return c, nil
	case <-l.ctx.Done():
		l.mu.Lock()
		defer l.mu.Unlock()
		return nil, l.err
	}
}

// Close stops accepting; handshakes in progress are abandoned.
func (l *handshakeListener) Close() error {
	err := l.raw.Close()
	l.stop(net.ErrClosed)
	return err
}

func (l *handshakeListener) Addr() net.Addr { return l.raw.Addr() }

func (l *handshakeListener) stop(err error) {
	l.once.Do(func() {
		l.mu.Lock()
		l.err = err
		l.mu.Unlock()
		l.cancel()
	})
}

func (l *handshakeListener) acceptLoop() {
	var delay time.Duration
	for {
		c, err := l.raw.Accept()
		if err != nil {
			if l.ctx.Err() != nil {
				return
			}
			// Out of file descriptors and the like: back off as net/http
			// does, instead of failing the server.
			var te interface{ Temporary() bool }
			if errors.As(err, &te) && te.Temporary() {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			l.stop(err)
			return
		}
		delay = 0
		go l.handshake(c)
	}
}

// handshake waits for a place, does the TLS handshake and hands the
// connection to Accept.
func (l *handshakeListener) handshake(raw net.Conn) {
	if !l.places.take(l.ctx, l.wait) {
		tlsHandshakes.WithLabelValues("busy").Inc()
		_ = raw.Close()
		return
	}
	conn := tls.Server(raw, l.cfg)
	ctx, cancel := context.WithTimeout(l.ctx, l.timeout)
	err := conn.HandshakeContext(ctx)
	cancel()
	l.places.release()
	if err != nil {
		tlsHandshakes.WithLabelValues("failed").Inc()
		_ = conn.Close()
		return
	}
	tlsHandshakes.WithLabelValues("ok").Inc()
	select {
	case l.ready <- conn:
	case <-l.ctx.Done():
		_ = conn.Close()
	}
}
