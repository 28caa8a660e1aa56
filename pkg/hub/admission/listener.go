package admission

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"
)

// Listener does the TLS handshakes of the connections it accepts
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
// which brings those agents back too (docs/PERFORMANCE.md, "Cold start and
// reconnect storm"). Bounded, handshakes finish in milliseconds each, one
// after another, and established sessions keep their share of the cores.
type Listener struct {
	raw     net.Listener
	cfg     *tls.Config
	places  *newestFirst
	conns   *connCounts
	wait    time.Duration
	timeout time.Duration

	ready  chan net.Conn
	ctx    context.Context
	cancel context.CancelFunc
	once   sync.Once
	mu     sync.Mutex
	err    error
}

// clientHelloWait is how long an accepted connection has to send its
// ClientHello: an agent sends it at once, so this is a few round trips of a
// slow uplink, and an idle connection holds a pending place no longer.
const clientHelloWait = 3 * time.Second

// Limits bound what connections that have proven nothing yet
// can hold, in total and per source address.
type Limits struct {
	// Handshakes is how many TLS handshakes run at once, PerSource how
	// many of them one source address may hold.
	Handshakes, HandshakesPerSource int
	// Pending is how many connections may be between accept and a
	// finished handshake (waiting for a ClientHello or a place), in all
	// and from one source.
	Pending, PendingPerSource int
	// Connections is how many established connections the listener keeps
	// open, in all and from one source.
	Connections, ConnectionsPerSource int
	// Wait is how long a connection waits for its ClientHello and then for
	// a place; Timeout bounds the handshake itself.
	Wait, Timeout time.Duration
}

// NewListener serves TLS on raw within lim.
func NewListener(raw net.Listener, cfg *tls.Config, lim Limits) *Listener {
	ctx, cancel := context.WithCancel(context.Background())
	l := &Listener{raw: raw, cfg: cfg, places: newNewestFirstPerSource(lim.Handshakes, lim.HandshakesPerSource),
		conns: newConnCounts(lim), wait: lim.Wait, timeout: lim.Timeout,
		ready: make(chan net.Conn), ctx: ctx, cancel: cancel}
	go l.acceptLoop()
	return l
}

// Accept returns the next connection whose TLS handshake is done.
func (l *Listener) Accept() (net.Conn, error) {
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
func (l *Listener) Close() error {
	err := l.raw.Close()
	l.stop(net.ErrClosed)
	return err
}

// Addr is the address the listener accepts on.
func (l *Listener) Addr() net.Addr { return l.raw.Addr() }

func (l *Listener) stop(err error) {
	l.once.Do(func() {
		l.mu.Lock()
		l.err = err
		l.mu.Unlock()
		l.cancel()
	})
}

func (l *Listener) acceptLoop() {
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

// handshake waits for the ClientHello and a place, does the TLS handshake
// and hands the connection to Accept. A connection takes a place only once
// its ClientHello is in: idle TCP connections hold none.
func (l *Listener) handshake(raw net.Conn) {
	src := sourceOf(raw)
	if reason := l.conns.enter(src); reason != "" {
		tlsHandshakes.WithLabelValues(reason).Inc()
		_ = raw.Close()
		return
	}
	hello, err := readClientHello(raw, min(l.wait, clientHelloWait))
	if err != nil {
		l.conns.leave(src, false)
		tlsHandshakes.WithLabelValues("no_client_hello").Inc()
		_ = raw.Close()
		return
	}
	if !l.places.take(l.ctx, src, l.wait) {
		l.conns.leave(src, false)
		tlsHandshakes.WithLabelValues("busy").Inc()
		_ = raw.Close()
		return
	}
	sc := &sourceConn{Conn: raw, pre: hello}
	conn := tls.Server(sc, l.cfg)
	ctx, cancel := context.WithTimeout(l.ctx, l.timeout)
	err = conn.HandshakeContext(ctx)
	cancel()
	l.places.release(src)
	if err != nil {
		l.conns.leave(src, false)
		tlsHandshakes.WithLabelValues("failed").Inc()
		_ = conn.Close()
		return
	}
	if !l.conns.leave(src, true) {
		tlsHandshakes.WithLabelValues("too_many_connections").Inc()
		_ = conn.Close()
		return
	}
	sc.release = func() { l.conns.closed(src) }
	tlsHandshakes.WithLabelValues("ok").Inc()
	select {
	case l.ready <- conn:
	case <-l.ctx.Done():
		_ = conn.Close()
	}
}
