package hubmux

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The yamux wire format: a 12-byte header (version, type, flags, stream id,
// length), then, for data frames, length bytes.
const (
	protoVersion = 0

	typeData         = 0
	typeWindowUpdate = 1
	typePing         = 2
	typeGoAway       = 3

	flagSYN = 1
	flagACK = 2
	flagFIN = 4
	flagRST = 8

	goAwayNormal   = 0
	goAwayProtoErr = 1

	headerSize = 12

	// window is each stream's receive window. yamux starts every stream
	// with 256 KiB of credit in both directions, and the agent's
	// hashicorp/yamux assumes it.
	window = 256 << 10
	// maxWrite bounds the data in one frame this end writes: the agent
	// refuses websocket messages over transport.MaxMessageSize.
	maxWrite = 64 << 10
)

var (
	// ErrSessionClosed is returned by a stream's writes, and by Open, once
	// the session has ended.
	ErrSessionClosed = errors.New("hubmux: session closed")
	// ErrStreamClosed is returned by a write after Close.
	ErrStreamClosed = errors.New("hubmux: stream closed")
	// ErrStreamReset is returned once the peer reset the stream, or it
	// was reset here because the peer did not close its end in time.
	ErrStreamReset = errors.New("hubmux: stream reset")
	// ErrProtocol is a frame that breaks the protocol: the session ends.
	ErrProtocol = errors.New("hubmux: protocol error")
)

type header [headerSize]byte

func (h *header) encode(typ uint8, flags uint16, id, length uint32) {
	h[0] = protoVersion
	h[1] = typ
	binary.BigEndian.PutUint16(h[2:4], flags)
	binary.BigEndian.PutUint32(h[4:8], id)
	binary.BigEndian.PutUint32(h[8:12], length)
}

func (h *header) typ() uint8       { return h[1] }
func (h *header) flags() uint16    { return binary.BigEndian.Uint16(h[2:4]) }
func (h *header) streamID() uint32 { return binary.BigEndian.Uint32(h[4:8]) }
func (h *header) length() uint32   { return binary.BigEndian.Uint32(h[8:12]) }

func (h *header) String() string {
	return fmt.Sprintf("type %d flags %#x stream %d length %d", h.typ(), h.flags(), h.streamID(), h.length())
}
