package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/edgefleet/fleet/pkg/contract/ociref"
)

// MaxFrameSize bounds one control-stream frame. Bootstrap data from CABPK
// is tens of KiB; 1 MiB leaves room without letting a peer make the other
// side allocate without limit.
const MaxFrameSize = 1 << 20

// MaxHelloSize bounds the Hello, the one frame read before a session is
// set up: a Hello is a name, a version and a few capabilities.
const MaxHelloSize = 4 << 10

// frameChunk is what ReadFrame allocates before more data has arrived.
const frameChunk = 16 << 10

// Envelope wraps every message.
type Envelope struct {
	Protocol string          `json:"protocol"`
	Type     Type            `json:"type"`
	Payload  json.RawMessage `json:"payload"`
}

// ErrTooLarge is returned for frames over the size limit.
var ErrTooLarge = errors.New("frame exceeds size limit")

// Encode wraps msg in an envelope of version 1. msg must be one of this
// package's message types (by value or pointer).
func Encode(msg any) ([]byte, error) { return EncodeAs(1, msg) }

// EncodeAs wraps msg in an envelope of protocol version v: one this
// release speaks and msg's type is part of. Hello and Error, whose shape
// never changes, can be written in any version, so a side can tell a peer
// it shares no version with why.
func EncodeAs(v int, msg any) ([]byte, error) {
	t, err := TypeOf(msg)
	if err != nil {
		return nil, err
	}
	frozen := t == TypeHello || t == TypeError
	if v < 1 || !frozen && (v < MinProtocol || v > MaxProtocol) || v < Since(t) {
		return nil, fmt.Errorf("wire: %s cannot be written in protocol %s", t, ProtocolName(v))
	}
	payload, err := json.Marshal(msg)
	if err != nil {
		return nil, fmt.Errorf("encoding %s: %w", t, err)
	}
	return json.Marshal(Envelope{Protocol: ProtocolName(v), Type: t, Payload: payload})
}

// versionOf is the version an envelope names, 0 when it names none.
func versionOf(protocol string) int {
	n, ok := strings.CutPrefix(protocol, ProtocolGroup+"/v")
	if !ok || n == "" || len(n) > 4 || n[0] == '0' {
		return 0
	}
	v, err := strconv.Atoi(n)
	if err != nil {
		return 0
	}
	return v
}

// TypeOf is the envelope type of msg, one of this package's message types
// (by value or pointer).
func TypeOf(msg any) (Type, error) {
	switch msg.(type) {
	case Hello, *Hello:
		return TypeHello, nil
	case DesiredState, *DesiredState:
		return TypeDesiredState, nil
	case Status, *Status:
		return TypeStatus, nil
	case CertificateRequest, *CertificateRequest:
		return TypeCertificateRequest, nil
	case Certificate, *Certificate:
		return TypeCertificate, nil
	case Error, *Error:
		return TypeError, nil
	case Tunnel, *Tunnel:
		return TypeTunnel, nil
	case TunnelReady, *TunnelReady:
		return TypeTunnelReady, nil
	case Welcome, *Welcome:
		return TypeWelcome, nil
	case Logs, *Logs:
		return TypeLogs, nil
	case LogsReady, *LogsReady:
		return TypeLogsReady, nil
	case FactsRequest, *FactsRequest:
		return TypeFactsRequest, nil
	case FactsReport, *FactsReport:
		return TypeFactsReport, nil
	case ReleaseRequest, *ReleaseRequest:
		return TypeReleaseRequest, nil
	case ReleaseData, *ReleaseData:
		return TypeReleaseData, nil
	default:
		return "", fmt.Errorf("wire: %T is not a message type", msg)
	}
}

// Decode parses one frame into a pointer to its message. Errors are *Error
// values whose code says what was wrong, ready to send back to the peer.
func Decode(frame []byte) (any, error) {
	msg, _, err := DecodeVersion(frame)
	return msg, err
}

// DecodeVersion is Decode that also returns the protocol version the
// frame is written in: one this release speaks, or for Hello and Error
// (whose shape never changes) any version.
func DecodeVersion(frame []byte) (any, int, error) {
	if len(frame) > MaxFrameSize {
		return nil, 0, &Error{Code: ErrFrameTooLarge, Message: fmt.Sprintf("frame of %d bytes exceeds %d", len(frame), MaxFrameSize)}
	}
	var env Envelope
	if err := json.Unmarshal(frame, &env); err != nil {
		return nil, 0, &Error{Code: ErrBadFrame, Message: "envelope: " + err.Error()}
	}
	v := versionOf(env.Protocol)
	frozen := env.Type == TypeHello || env.Type == TypeError
	if v == 0 || !frozen && (v < MinProtocol || v > MaxProtocol) {
		return nil, 0, &Error{Code: ErrUnsupportedProtocol, Message: fmt.Sprintf("protocol %q, this side speaks %s", env.Protocol, Speaks)}
	}
	if v < Since(env.Type) {
		return nil, 0, &Error{Code: ErrUnexpected, Message: fmt.Sprintf("%s is not part of protocol %s", env.Type, env.Protocol)}
	}
	msg, err := decodePayload(env)
	if err != nil {
		return nil, 0, err
	}
	return msg, v, nil
}

func decodePayload(env Envelope) (any, error) {
	var msg any
	switch env.Type {
	case TypeHello:
		msg = &Hello{}
	case TypeDesiredState:
		msg = &DesiredState{}
	case TypeStatus:
		msg = &Status{}
	case TypeCertificateRequest:
		msg = &CertificateRequest{}
	case TypeCertificate:
		msg = &Certificate{}
	case TypeError:
		msg = &Error{}
	case TypeTunnel:
		msg = &Tunnel{}
	case TypeTunnelReady:
		msg = &TunnelReady{}
	case TypeWelcome:
		msg = &Welcome{}
	case TypeLogs:
		msg = &Logs{}
	case TypeLogsReady:
		msg = &LogsReady{}
	case TypeFactsRequest:
		msg = &FactsRequest{}
	case TypeFactsReport:
		msg = &FactsReport{}
	case TypeReleaseRequest:
		msg = &ReleaseRequest{}
	case TypeReleaseData:
		msg = &ReleaseData{}
	default:
		return nil, &Error{Code: ErrUnknownType, Message: fmt.Sprintf("unknown message type %q", env.Type)}
	}
	if len(bytes.TrimSpace(env.Payload)) == 0 || bytes.Equal(bytes.TrimSpace(env.Payload), []byte("null")) {
		return nil, &Error{Code: ErrBadFrame, Message: fmt.Sprintf("%s without payload", env.Type)}
	}
	// Unknown fields are allowed: a newer peer may add some.
	if err := json.Unmarshal(env.Payload, msg); err != nil {
		return nil, &Error{Code: ErrBadFrame, Message: fmt.Sprintf("%s payload: %v", env.Type, err)}
	}
	if err := validate(msg); err != nil {
		return nil, err
	}
	return msg, nil
}

// validate checks what the JSON shape cannot.
func validate(msg any) error {
	bad := func(format string, args ...any) error {
		return &Error{Code: ErrBadFrame, Message: fmt.Sprintf(format, args...)}
	}
	switch m := msg.(type) {
	case *Hello:
		if m.ObservedGeneration < 0 {
			return bad("Hello.observedGeneration is negative")
		}
		if p := m.Protocols; p != nil && (p.Min < 1 || p.Max < p.Min) {
			return bad("Hello.protocols %d–%d is not a range of versions", p.Min, p.Max)
		}
	case *Logs:
		switch m.Source {
		case LogAgent, LogBootstrap, LogReset:
		default:
			return bad("Logs.source %q is none of agent, bootstrap, reset", m.Source)
		}
		if m.SinceSeconds < 0 || m.TailLines < 0 || m.LimitBytes < 0 || m.LimitBytes > MaxLogBytes {
			return bad("Logs: sinceSeconds, tailLines and limitBytes must be ≥ 0, limitBytes ≤ %d", MaxLogBytes)
		}
	case *FactsReport:
		if len(m.Interfaces) > MaxFactInterfaces || len(m.Disks) > MaxFactDisks || len(m.Certificates) > MaxFactCertificates {
			return bad("FactsReport lists more than %d interfaces, %d disks or %d certificates",
				MaxFactInterfaces, MaxFactDisks, MaxFactCertificates)
		}
	case *DesiredState:
		if m.Generation < 0 {
			return bad("DesiredState.generation is negative")
		}
		if m.Assignment != nil && m.Deprovision {
			return bad("DesiredState has both an assignment and a deprovision order")
		}
		if a := m.Assignment; a != nil && (a.ClaimUID == "" || len(a.BootstrapData) == 0) {
			return bad("DesiredState.assignment needs claimUID and bootstrapData")
		}
		if a := m.Assignment; a != nil && (a.CertificatesRenewBeforeDays < 0 || a.CertificatesRenewBeforeDays > MaxCertificatesRenewBeforeDays) {
			return bad("DesiredState.assignment.certificatesRenewBeforeDays %d is not in 0–%d", a.CertificatesRenewBeforeDays, MaxCertificatesRenewBeforeDays)
		}
		if r := m.Reach; r != nil {
			if err := validHostPort(r.Endpoint); err != nil {
				return bad("DesiredState.reach.endpoint: %v", err)
			}
			if len(r.Addresses) > MaxReachAddresses {
				return bad("DesiredState.reach has %d addresses, at most %d", len(r.Addresses), MaxReachAddresses)
			}
			for _, a := range r.Addresses {
				if net.ParseIP(a) == nil {
					return bad("DesiredState.reach.addresses: %q is not an IP address", a)
				}
			}
		}
		if len(m.Stage) > MaxStageOrders {
			return bad("DesiredState.stage has %d orders, at most %d", len(m.Stage), MaxStageOrders)
		}
		for _, o := range m.Stage {
			if err := o.validate(); err != nil {
				return bad("DesiredState.stage: %v", err)
			}
		}
		if o := m.AgentRelease; o != nil {
			if err := o.validate(); err != nil {
				return bad("DesiredState.agentRelease: %v", err)
			}
		}
	case *Status:
		if m.ObservedGeneration < 0 {
			return bad("Status.observedGeneration is negative")
		}
		if len(m.Addresses) > 128 {
			return bad("Status has %d addresses, at most 128", len(m.Addresses))
		}
		if p := m.Provisioning; p != nil && (p.ClaimUID == "" || p.State == "") {
			return bad("Status.provisioning needs claimUID and state")
		}
		if r := m.CertificatesRenewal; r != nil && (r.State == "" || len(r.Step) > 256 || len(r.Message) > 4096) {
			return bad("Status.certificatesRenewal needs a state, a step of at most 256 bytes and a message of at most 4096")
		}
		if len(m.Staging) > MaxStageOrders {
			return bad("Status.staging has %d entries, at most %d", len(m.Staging), MaxStageOrders)
		}
		for _, st := range m.Staging {
			if !versionPattern.MatchString(st.Version) || len(st.Version) > 64 || st.State == "" {
				return bad("Status.staging: %q needs a version vX.Y.Z and a state", st.Version)
			}
		}
	case *ReleaseRequest:
		if err := validRange(m.SHA256, m.Offset, 0); err != nil {
			return bad("ReleaseRequest: %v", err)
		}
	case *ReleaseData:
		if err := validRange(m.SHA256, m.Offset, m.Size); err != nil || m.Offset > m.Size {
			return bad("ReleaseData: offset %d of %d bytes is not a range of at most %d bytes (sha256 %q)", m.Offset, m.Size, MaxTransferSize, m.SHA256)
		}
	case *CertificateRequest:
		if len(m.CSR) == 0 {
			return bad("CertificateRequest without csr")
		}
	case *Error:
		if m.Code == "" {
			return bad("Error without code")
		}
	case *Tunnel:
		if err := validHostPort(m.Target); err != nil {
			return bad("Tunnel.target: %v", err)
		}
	}
	return nil
}

// versionPattern is a Kubernetes version as hosts name their staging
// directories: no separator can reach a path.
var versionPattern = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)([-+][0-9A-Za-z.+-]*)?$`)

var sha256Pattern = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Validate says why the codec would refuse o, or nil: the hub checks an
// order before it sends it, since an agent refuses the whole DesiredState
// that carries a bad one.
func (o StageOrder) Validate() error { return o.validate() }

func (o StageOrder) validate() error {
	if !versionPattern.MatchString(o.Version) || len(o.Version) > 64 {
		return fmt.Errorf("version %q is not vMAJOR.MINOR.PATCH", o.Version)
	}
	if !sha256Pattern.MatchString(o.SHA256) {
		return fmt.Errorf("%s: sha256 %q is not 64 lower-case hex digits", o.Version, o.SHA256)
	}
	if o.Hub {
		// The hub does not tell a site where it fetched from.
		if o.URL != "" {
			return fmt.Errorf("%s: an archive the hub carries has no url", o.Version)
		}
		return nil
	}
	if len(o.URL) > 2048 {
		return fmt.Errorf("%s: url is longer than 2048 bytes", o.Version)
	}
	if ociref.IsRef(o.URL) {
		if _, err := ociref.Parse(o.URL); err != nil {
			return fmt.Errorf("%s: %w", o.Version, err)
		}
		return nil
	}
	u, err := url.Parse(o.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%s: url %q is not an http, https or oci URL", o.Version, o.URL)
	}
	return nil
}

// validHostPort accepts host:port where host is an IP address or a DNS
// name (RFC 1123; nothing else may reach a hosts file) and the port is in
// 1–65535.
func validHostPort(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return err
	}
	if net.ParseIP(host) == nil && len(validation.IsDNS1123Subdomain(strings.ToLower(host))) > 0 {
		return fmt.Errorf("%q: host is neither an IP address nor a DNS name", s)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%q: bad port", s)
	}
	return nil
}

// WriteFrame writes one length-prefixed frame.
func WriteFrame(w io.Writer, frame []byte) error {
	if len(frame) > MaxFrameSize {
		return fmt.Errorf("writing frame of %d bytes: %w", len(frame), ErrTooLarge)
	}
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(frame)))
	// One write, so frames from concurrent writers can never interleave
	// when the caller serialises calls.
	_, err := w.Write(append(hdr[:], frame...))
	return err
}

// Shrinker is a reader that can give back the buffer it keeps between
// reads. A yamux stream keeps its receive buffer, as large as it grew for
// the most data ever waiting in it (up to the receive window), for the
// stream's whole life; the control stream lives as long as the session,
// and most of that life it is idle.
type Shrinker interface {
	Shrink()
}

// ReadFrame reads one length-prefixed frame, refusing, before allocating,
// any frame longer than limit. When r is a Shrinker, it is shrunk once the
// frame is read: a no-op if more data is waiting.
func ReadFrame(r io.Reader, limit int) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if uint64(n) > uint64(limit) {
		return nil, fmt.Errorf("frame announces %d bytes, limit %d: %w", n, limit, ErrTooLarge)
	}
	// What the header announces is allocated as the data arrives: a peer
	// that announces 1 MiB and sends nothing holds a small buffer.
	buf := make([]byte, 0, min(int(n), frameChunk))
	for len(buf) < int(n) {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, min(int(n)-len(buf), len(buf)))
		}
		m, err := io.ReadFull(r, buf[len(buf):min(int(n), cap(buf))])
		buf = buf[:len(buf)+m]
		if err != nil {
			return nil, fmt.Errorf("reading %d-byte frame: %w", n, err)
		}
	}
	if s, ok := r.(Shrinker); ok {
		s.Shrink()
	}
	return buf, nil
}
