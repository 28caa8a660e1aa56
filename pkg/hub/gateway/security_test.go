package gateway_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/fleet/pkg/enrolltoken"

	"github.com/gorilla/websocket"
	"github.com/hashicorp/yamux"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/pki"
	"github.com/edgefleet/fleet/pkg/transport"
)

// metricValue sums a gateway metric over the series whose labels include
// the given ones.
func metricValue(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	must(t, err)
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if hasLabels(m, labels) {
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	got := map[string]string{}
	for _, l := range m.GetLabel() {
		got[l.GetName()] = l.GetValue()
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// rawClient speaks to the hub with a given certificate, frame by frame,
// as a hostile or buggy agent would.
type rawClient struct {
	ctrl net.Conn
	ws   *websocket.Conn
	mux  *yamux.Session
}

func dialRaw(t *testing.T, hubURL string, caPEM []byte, cert *tls.Certificate) (*rawClient, *http.Response, error) {
	t.Helper()
	return dialRawPinging(t, hubURL, caPEM, cert, time.Second)
}

// dialRawPinging is dialRaw with the client's ping interval (0: never).
func dialRawPinging(t *testing.T, hubURL string, caPEM []byte, cert *tls.Certificate, keepAlive time.Duration) (*rawClient, *http.Response, error) {
	t.Helper()
	return dialRawVia(t, hubURL, caPEM, cert, keepAlive, nil)
}

// dialRawVia is dialRawPinging from a given local address (nil: any).
func dialRawVia(t *testing.T, hubURL string, caPEM []byte, cert *tls.Certificate, keepAlive time.Duration, local net.Addr) (*rawClient, *http.Response, error) {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	cfg := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	d := websocket.Dialer{TLSClientConfig: cfg, HandshakeTimeout: 5 * time.Second,
		NetDial: (&net.Dialer{LocalAddr: local, Timeout: 5 * time.Second}).Dial}
	ws, resp, err := d.Dial("wss://"+strings.TrimPrefix(hubURL, "https://")+wire.PathConnect, nil)
	if err != nil {
		return nil, resp, err
	}
	mux, err := transport.Client(transport.NewConn(ws), keepAlive)
	must(t, err)
	ctrl, err := mux.OpenStream()
	must(t, err)
	t.Cleanup(func() { _ = mux.Close() })
	return &rawClient{ctrl: ctrl, ws: ws, mux: mux}, resp, nil
}

func (c *rawClient) send(t *testing.T, msg any) {
	t.Helper()
	b, err := wire.Encode(msg)
	must(t, err)
	must(t, wire.WriteFrame(c.ctrl, b))
}

// expectError reads until the hub's Error (skipping desired states) and
// then the end of the session.
func (c *rawClient) expectError(t *testing.T, code wire.ErrorCode) {
	t.Helper()
	_ = c.ctrl.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		frame, err := wire.ReadFrame(c.ctrl, wire.MaxFrameSize)
		if err != nil {
			t.Fatalf("waiting for %s error: %v", code, err)
		}
		msg, err := wire.Decode(frame)
		must(t, err)
		if e, ok := msg.(*wire.Error); ok {
			if e.Code != code {
				t.Fatalf("got error %s (%s), want %s", e.Code, e.Message, code)
			}
			break
		}
	}
	if _, err := wire.ReadFrame(c.ctrl, wire.MaxFrameSize); err == nil {
		t.Fatalf("session still open after %s", code)
	}
}

// credentials reads an enrolled edge's key pair and pinned CA.
func credentials(t *testing.T, e *edge) (tls.Certificate, []byte) {
	t.Helper()
	dir := e.cfg.StateDir
	pem := filepath.Join(dir, "client.pem")
	pair, err := tls.LoadX509KeyPair(pem, pem)
	must(t, err)
	ca, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	must(t, err)
	return pair, ca
}

// An agent cannot speak for another host: not with a forged Hello, not
// with a certificate from another CA, and it never receives another host's
// desired state.
func TestAgentsAreIsolated(t *testing.T) {
	ns := newNamespace(t)
	h := startHub(t, hubOptions{ns: ns})
	tok := newToken(t, ns, enrolltoken.Options{})
	a := newEdge(t, "alpha", h.url, h.srv.CA().Pin(), tok).start()
	b := newEdge(t, "bravo", h.url, h.srv.CA().Pin(), tok).start()
	eventually(t, "both connected", func() error {
		if !a.agent.Connected() || !b.agent.Connected() {
			return errors.New("not yet")
		}
		return nil
	})
	bootstrapSecret(t, ns, "bravo-secret", "#cloud-config\nbravo only\n")
	claim(t, ns, "bravo", "mb", "bravo-secret")
	eventually(t, "bravo provisioned", func() error {
		if len(b.rec.Provisions()) != 1 {
			return errors.New("not yet")
		}
		h, err := getHost(ns, "bravo")
		if err != nil || h.Status.Phase != infrav1.HostProvisioned {
			return fmt.Errorf("phase %v %v", h.Status.Phase, err)
		}
		return nil
	})
	if p := a.rec.Provisions(); len(p) != 0 {
		t.Fatalf("alpha received %v", p)
	}

	// Forged Hello: alpha's certificate, bravo's name.
	pair, caPEM := credentials(t, a)
	c, _, err := dialRaw(t, h.url, caPEM, &pair)
	must(t, err)
	c.send(t, &wire.Hello{Host: "bravo"})
	c.expectError(t, wire.ErrForbidden)

	// A certificate of another CA naming bravo, down to its uid.
	bravo, err := getHost(ns, "bravo")
	must(t, err)
	other, err := pki.NewCA("impostor", time.Hour)
	must(t, err)
	keyPEM, csrPEM, err := pki.NewKeyAndCSR("bravo")
	must(t, err)
	certPEM, err := other.SignClient(csrPEM, pki.Identity{Namespace: ns, Name: "bravo", UID: string(bravo.UID)}, time.Hour)
	must(t, err)
	forged, err := tls.X509KeyPair(certPEM, keyPEM)
	must(t, err)
	if _, _, err := dialRaw(t, h.url, caPEM, &forged); err == nil {
		t.Fatal("a certificate from another CA was accepted")
	}
	// No certificate at all.
	if _, resp, err := dialRaw(t, h.url, caPEM, nil); err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no certificate: err %v resp %v", err, resp)
	}
	// Bravo's status was never touched by alpha.
	bravo, err = getHost(ns, "bravo")
	must(t, err)
	if bravo.Status.Phase != infrav1.HostProvisioned || bravo.Status.Facts.Hostname != "bravo" {
		t.Errorf("bravo status disturbed: %s %+v", bravo.Status.Phase, bravo.Status.Facts)
	}
}

// Malformed, oversized and unknown frames and a flood of handshakes are
// each refused and counted; the hub stays up and other agents carry on.
func TestHostileInput(t *testing.T) {
	ns := newNamespace(t)
	h := startHub(t, hubOptions{ns: ns, handshakes: 2})
	tok := newToken(t, ns, enrolltoken.Options{})
	good := newEdge(t, "steady", h.url, h.srv.CA().Pin(), tok).start()
	bad := newEdge(t, "mallory", h.url, h.srv.CA().Pin(), tok)
	must(t, agentEnroll(bad))
	eventually(t, "steady connected", func() error {
		if !good.agent.Connected() {
			return errors.New("not yet")
		}
		return nil
	})
	pair, caPEM := credentials(t, bad)

	cases := []struct {
		name  string
		frame func(c *rawClient)
		code  wire.ErrorCode
	}{
		{"malformed", func(c *rawClient) { _ = wire.WriteFrame(c.ctrl, []byte(`{"protocol":`)) }, wire.ErrBadFrame},
		{"unknown type", func(c *rawClient) {
			_ = wire.WriteFrame(c.ctrl, []byte(`{"protocol":"fleet.edgefleet.io/v1","type":"Exec","payload":{}}`))
		}, wire.ErrUnknownType},
		{"oversized", func(c *rawClient) {
			var hdr [4]byte
			binary.BigEndian.PutUint32(hdr[:], 64<<20)
			_, _ = c.ctrl.Write(hdr[:])
		}, wire.ErrFrameTooLarge},
		{"desired state from an agent", func(c *rawClient) {
			b, _ := wire.Encode(&wire.DesiredState{Generation: 1})
			_ = wire.WriteFrame(c.ctrl, b)
		}, wire.ErrUnexpected},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := metricValue(t, "fleet_gateway_rejected_frames_total", map[string]string{"reason": string(tc.code)})
			c, _, err := dialRaw(t, h.url, caPEM, &pair)
			must(t, err)
			c.send(t, &wire.Hello{Host: "mallory"})
			tc.frame(c)
			c.expectError(t, tc.code)
			if after := metricValue(t, "fleet_gateway_rejected_frames_total", map[string]string{"reason": string(tc.code)}); after <= before {
				t.Errorf("rejected_frames{reason=%s} did not grow (%v → %v)", tc.code, before, after)
			}
		})
	}

	// A flood: connections that upgrade and then say nothing hold the two
	// handshake slots; the next ones, of another identity (one identity
	// sets up two at most, TestOneIdentityCannotHoldTheSetupPlaces), are
	// turned away with 503 until the silent ones time out.
	other := newEdge(t, "trudy", h.url, h.srv.CA().Pin(), tok)
	must(t, agentEnroll(other))
	otherPair, _ := credentials(t, other)
	busyBefore := metricValue(t, "fleet_gateway_handshakes_total", map[string]string{"result": "busy"})
	hostBusyBefore := metricValue(t, "fleet_gateway_handshakes_total", map[string]string{"result": "host_busy"})
	var silent []*rawClient
	for range 2 {
		c, _, err := dialRaw(t, h.url, caPEM, &pair)
		must(t, err)
		silent = append(silent, c)
	}
	refused := 0
	for range 5 {
		if _, resp, err := dialRaw(t, h.url, caPEM, &otherPair); err != nil && resp != nil && resp.StatusCode == http.StatusServiceUnavailable {
			refused++
		}
	}
	if refused == 0 {
		t.Error("no handshake was refused while the admission limit was full")
	}
	// Once the silent ones time out, trudy's own silent upgrades may hold
	// its two setups: those refusals are host_busy.
	busy := metricValue(t, "fleet_gateway_handshakes_total", map[string]string{"result": "busy"}) - busyBefore
	hostBusy := metricValue(t, "fleet_gateway_handshakes_total", map[string]string{"result": "host_busy"}) - hostBusyBefore
	if busy < 1 || busy+hostBusy < float64(refused) {
		t.Errorf("busy handshakes counted %v (and host_busy %v), refused %d", busy, hostBusy, refused)
	}
	for _, c := range silent {
		_ = c.ws.Close()
	}

	// Through all of it the steady agent kept its one session.
	if !good.agent.Connected() || good.agent.Sessions() != 1 {
		t.Errorf("steady agent: connected %v sessions %d", good.agent.Connected(), good.agent.Sessions())
	}
	if s, err := connectedStatus(ns, "steady"); err != nil || s != "True" {
		t.Errorf("steady AgentConnected %s %v", s, err)
	}
}

// The hub holds one goroutine per idle session, and still: a stream the
// agent opens (only the hub opens tunnels) is reset at once, and an agent
// that goes silent — not even a ping — is cut off.
func TestSessionHousekeeping(t *testing.T) {
	ns := newNamespace(t)
	h := startHub(t, hubOptions{ns: ns})
	tok := newToken(t, ns, enrolltoken.Options{})
	mallory := newEdge(t, "mallory", h.url, h.srv.CA().Pin(), tok)
	must(t, agentEnroll(mallory))
	pair, caPEM := credentials(t, mallory)

	before := metricValue(t, "fleet_gateway_rejected_frames_total", map[string]string{"reason": "UnexpectedStream"})
	c, _, err := dialRaw(t, h.url, caPEM, &pair)
	must(t, err)
	c.send(t, &wire.Hello{Host: "mallory"})
	c.expectDesiredState(t)
	for i := range 3 {
		st, err := c.mux.OpenStream()
		must(t, err)
		_, _ = st.Write([]byte("hello hub"))
		_ = st.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := st.Read(make([]byte, 16)); !errors.Is(err, yamux.ErrConnectionReset) {
			t.Fatalf("stream %d opened by the agent: read %v, want a reset (refused by the hub)", i, err)
		}
	}
	if after := metricValue(t, "fleet_gateway_rejected_frames_total", map[string]string{"reason": "UnexpectedStream"}); after-before != 3 {
		t.Errorf("rejected_frames{reason=UnexpectedStream} grew by %v, want 3", after-before)
	}
	// The control stream is untouched.
	c.send(t, &wire.Status{Facts: infrav1.HostFacts{Hostname: "still-heard"}})
	eventually(t, "status through the control stream", func() error {
		host, err := getHost(ns, "mallory")
		if err != nil || host.Status.Facts.Hostname != "still-heard" {
			return fmt.Errorf("hostname %q %v", host.Status.Facts.Hostname, err)
		}
		return nil
	})
	_ = c.mux.Close()

	// Silent: the client never pings. The hub (keepalive 2 s in these
	// tests, so idle timeout 8 s) closes the session.
	silent, _, err := dialRawPinging(t, h.url, caPEM, &pair, 0)
	must(t, err)
	silent.send(t, &wire.Hello{Host: "mallory"})
	silent.expectDesiredState(t)
	start := time.Now()
	_ = silent.ctrl.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := wire.ReadFrame(silent.ctrl, wire.MaxFrameSize); err == nil || errors.Is(err, yamux.ErrTimeout) || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("silent agent's session: read %v after %s, want the hub to close it", err, time.Since(start))
	}
	eventually(t, "mallory disconnected", func() error {
		if s, err := connectedStatus(ns, "mallory"); err != nil || s != "False" {
			return fmt.Errorf("AgentConnected %s %v", s, err)
		}
		return nil
	})
}

// expectDesiredState reads the hub's first frame, a DesiredState.
func (c *rawClient) expectDesiredState(t *testing.T) {
	t.Helper()
	_ = c.ctrl.SetReadDeadline(time.Now().Add(10 * time.Second))
	frame, err := wire.ReadFrame(c.ctrl, wire.MaxFrameSize)
	must(t, err)
	msg, err := wire.Decode(frame)
	must(t, err)
	if _, ok := msg.(*wire.DesiredState); !ok {
		t.Fatalf("first frame from the hub is %T, want DesiredState", msg)
	}
	_ = c.ctrl.SetReadDeadline(time.Time{})
}

// Certificates rotate before expiry without dropping the session; deleting
// the EdgeHost cuts the agent off for good (its one-time token is spent).
func TestRotationAndRevocation(t *testing.T) {
	ns := newNamespace(t)
	h := startHub(t, hubOptions{ns: ns, certValid: 6 * time.Second})
	tok := newToken(t, ns, enrolltoken.Options{UsageLimit: 1})
	e := newEdge(t, "rotor", h.url, h.srv.CA().Pin(), tok).start()
	eventually(t, "two rotations on one session", func() error {
		if e.agent.Rotations() < 2 {
			return fmt.Errorf("%d rotations", e.agent.Rotations())
		}
		return nil
	})
	if e.agent.Sessions() != 1 || !e.agent.Connected() {
		t.Fatalf("rotation dropped the session: sessions %d connected %v", e.agent.Sessions(), e.agent.Connected())
	}
	pair, _ := credentials(t, e)
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	must(t, err)
	if time.Until(leaf.NotAfter) <= 0 {
		t.Errorf("stored certificate expired at %v", leaf.NotAfter)
	}

	rotor, err := getHost(ns, "rotor")
	must(t, err)
	rotorUID := rotor.UID
	usedUpBefore := metricValue(t, "fleet_gateway_enrollments_total", map[string]string{"result": "used_up"})
	must(t, env.Client.Delete(context.Background(), &infrav1.EdgeHost{ObjectMeta: objMeta(ns, "rotor")}))
	eventually(t, "agent cut off", func() error {
		if e.agent.Connected() {
			return errors.New("still connected")
		}
		return nil
	})
	time.Sleep(2 * time.Second) // it keeps trying; none may succeed
	if e.agent.Connected() {
		t.Error("a revoked agent got back in")
	}
	hosts := &infrav1.EdgeHostList{}
	must(t, env.Client.List(context.Background(), hosts, client.InNamespace(ns)))
	for _, h := range hosts.Items {
		t.Errorf("host %s after revocation: uid %s (was %s) deleting %v phase %s finalizers %v", h.Name, h.UID, rotorUID,
			h.DeletionTimestamp, h.Status.Phase, h.Finalizers)
	}
	// The agent, told it was revoked, tried to enroll again with its
	// one-time token and was refused.
	if after := metricValue(t, "fleet_gateway_enrollments_total", map[string]string{"result": "used_up"}); after <= usedUpBefore {
		t.Errorf("no refused re-enrollment was counted (%v → %v)", usedUpBefore, after)
	}
}

// A host that already reads as connected to this replica is not written
// again when its agent comes back (after a hub restart thousands do at
// once); one this hub recorded as disconnected is.
func TestReconnectWritesOnlyWhatChanged(t *testing.T) {
	ns := newNamespace(t)
	h := startHub(t, hubOptions{ns: ns})
	tok := newToken(t, ns, enrolltoken.Options{})
	e := newEdge(t, "kiosk", h.url, h.srv.CA().Pin(), tok)
	must(t, agentEnroll(e))
	pair, caPEM := credentials(t, e)
	connected := func(want metav1.ConditionStatus) {
		t.Helper()
		eventually(t, "AgentConnected "+string(want), func() error {
			if s, err := connectedStatus(ns, "kiosk"); err != nil || s != want {
				return fmt.Errorf("AgentConnected %s %v", s, err)
			}
			return nil
		})
	}
	skipped := func() float64 {
		return metricValue(t, "fleet_gateway_status_writes_skipped_total", map[string]string{"cause": "connected"})
	}

	first, _, err := dialRaw(t, h.url, caPEM, &pair)
	must(t, err)
	first.send(t, &wire.Hello{Host: "kiosk"})
	first.expectDesiredState(t)
	connected("True")
	time.Sleep(500 * time.Millisecond) // the cache sees the write

	// The same agent again, its old session not yet gone: nothing to write.
	before, skippedBefore := h.writes.to("/edgehosts/kiosk/status"), skipped()
	second, _, err := dialRaw(t, h.url, caPEM, &pair)
	must(t, err)
	second.send(t, &wire.Hello{Host: "kiosk"})
	second.expectDesiredState(t)
	time.Sleep(500 * time.Millisecond)
	if d := h.writes.to("/edgehosts/kiosk/status") - before; d != 0 {
		t.Errorf("%d status writes for a reconnect to a host already shown connected, want 0", d)
	}
	if skipped()-skippedBefore != 1 {
		t.Errorf("skipped connected writes grew by %v, want 1", skipped()-skippedBefore)
	}

	// Gone, recorded as disconnected; back: written again at once, even
	// if the hub's cache still showed the old "connected".
	_ = first.mux.Close()
	_ = second.mux.Close()
	connected("False")
	third, _, err := dialRaw(t, h.url, caPEM, &pair)
	must(t, err)
	third.send(t, &wire.Hello{Host: "kiosk"})
	third.expectDesiredState(t)
	connected("True")
}

// An agent whose session drops and comes back within the disconnect grace
// (an agent restart, a network blip) costs no status write: its host never
// reads as disconnected. One that stays away is recorded once the grace
// has passed.
func TestDisconnectGraceAbsorbsAQuickReturn(t *testing.T) {
	const grace = 3 * time.Second
	ns := newNamespace(t)
	h := startHub(t, hubOptions{ns: ns, disconnectGrace: grace})
	tok := newToken(t, ns, enrolltoken.Options{})
	e := newEdge(t, "till", h.url, h.srv.CA().Pin(), tok)
	must(t, agentEnroll(e))
	pair, caPEM := credentials(t, e)
	connected := func(want metav1.ConditionStatus) {
		t.Helper()
		eventually(t, "AgentConnected "+string(want), func() error {
			if s, err := connectedStatus(ns, "till"); err != nil || s != want {
				return fmt.Errorf("AgentConnected %s %v", s, err)
			}
			return nil
		})
	}
	absorbed := func() float64 {
		return metricValue(t, "fleet_gateway_status_writes_skipped_total", map[string]string{"cause": "disconnected"})
	}

	first, _, err := dialRaw(t, h.url, caPEM, &pair)
	must(t, err)
	first.send(t, &wire.Hello{Host: "till"})
	first.expectDesiredState(t)
	connected("True")
	time.Sleep(500 * time.Millisecond) // the cache sees the write

	// The gateway's own connectivity writes (the reconcilers may still be
	// settling the new host's other conditions).
	connectivityWrites := func() float64 {
		return metricValue(t, "fleet_gateway_status_writes_total", map[string]string{"cause": "connected"}) +
			metricValue(t, "fleet_gateway_status_writes_total", map[string]string{"cause": "disconnected"})
	}
	before, absorbedBefore := connectivityWrites(), absorbed()
	_ = first.mux.Close()
	eventually(t, "the first session ends", func() error {
		if h.srv.HasSession(ns, "till") {
			return errors.New("the hub still holds it")
		}
		return nil
	})
	second, _, err := dialRaw(t, h.url, caPEM, &pair)
	must(t, err)
	second.send(t, &wire.Hello{Host: "till"})
	second.expectDesiredState(t)
	time.Sleep(grace + time.Second) // past the grace the first session's end began
	if d := connectivityWrites() - before; d != 0 {
		t.Errorf("%v connectivity writes for an agent back within the grace, want 0", d)
	}
	if s, err := connectedStatus(ns, "till"); err != nil || s != metav1.ConditionTrue {
		t.Errorf("AgentConnected %s %v after a return within the grace, want True", s, err)
	}
	if d := absorbed() - absorbedBefore; d != 1 {
		t.Errorf("disconnect writes absorbed grew by %v, want 1", d)
	}

	// Gone for good: recorded once the grace has passed.
	_ = second.mux.Close()
	connected("False")
}

// A session's end that the API server fails to record (a timeout while
// thousands of sessions end together) is written again, or the host would
// read connected for ever.
func TestDisconnectSurvivesAnOverloadedAPIServer(t *testing.T) {
	ns := newNamespace(t)
	h := startHub(t, hubOptions{ns: ns})
	tok := newToken(t, ns, enrolltoken.Options{})
	e := newEdge(t, "till", h.url, h.srv.CA().Pin(), tok)
	must(t, agentEnroll(e))
	pair, caPEM := credentials(t, e)
	c, _, err := dialRaw(t, h.url, caPEM, &pair)
	must(t, err)
	c.send(t, &wire.Hello{Host: "till"})
	c.expectDesiredState(t)
	eventually(t, "AgentConnected True", func() error {
		if s, err := connectedStatus(ns, "till"); err != nil || s != metav1.ConditionTrue {
			return fmt.Errorf("AgentConnected %s %v", s, err)
		}
		return nil
	})

	h.writes.failDisconnects.Store(2)
	_ = c.mux.Close()
	eventually(t, "AgentConnected False despite two timeouts", func() error {
		if s, err := connectedStatus(ns, "till"); err != nil || s != metav1.ConditionFalse {
			return fmt.Errorf("AgentConnected %s %v", s, err)
		}
		return nil
	})
	if n := h.writes.failDisconnects.Load(); n > 0 {
		t.Errorf("%d injected timeouts left unused: the disconnect did not go through them", n)
	}
}
