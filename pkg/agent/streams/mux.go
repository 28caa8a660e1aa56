package streams

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/go-logr/logr"
	"github.com/hashicorp/yamux"

	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/transport"
)

// FirstFrameTimeout bounds the wait for a stream's first frame.
const FirstFrameTimeout = 10 * time.Second

// Handler serves one stream whose first frame, msg, was written in
// protocol version v. It owns the stream and closes it.
type Handler func(st net.Conn, v int, msg any)

// Mux routes streams by the type of their first frame.
type Mux struct {
	Handlers map[wire.Type]Handler
	Log      logr.Logger
}

// Accept serves the streams the hub opens on mux until the session ends.
func (m *Mux) Accept(ctx context.Context, mux *yamux.Session) {
	for {
		st, err := mux.AcceptStreamWithContext(ctx)
		if err != nil {
			return
		}
		go m.serve(st)
	}
}

func (m *Mux) serve(st net.Conn) {
	_ = st.SetDeadline(time.Now().Add(FirstFrameTimeout))
	frame, err := wire.ReadFrame(st, wire.MaxTunnelFrameSize)
	if err != nil {
		Refuse(st, 1, wire.ErrBadFrame, "reading the stream's first frame: "+err.Error())
		_ = st.Close()
		return
	}
	msg, v, err := wire.DecodeVersion(frame)
	if err != nil {
		var we *wire.Error
		if errors.As(err, &we) {
			Refuse(st, 1, we.Code, we.Message)
		}
		_ = st.Close()
		return
	}
	t, _ := wire.TypeOf(msg)
	h := m.Handlers[t]
	if h == nil {
		m.Log.Info("Refused a stream of a kind this agent does not serve", "type", string(t))
		Refuse(st, v, wire.ErrUnexpected, "this agent serves no stream that starts with "+string(t))
		_ = st.Close()
		return
	}
	h(st, v, msg)
}

// Refuse answers a stream with an Error in protocol version v.
func Refuse(st net.Conn, v int, code wire.ErrorCode, msg string) {
	_ = Write(st, v, &wire.Error{Code: code, Message: msg})
}

// Write writes msg as one frame in protocol version v.
func Write(c net.Conn, v int, msg any) error {
	frame, err := wire.EncodeAs(v, msg)
	if err != nil {
		return err
	}
	_ = c.SetWriteDeadline(time.Now().Add(transport.WriteTimeout))
	return wire.WriteFrame(c, frame)
}
