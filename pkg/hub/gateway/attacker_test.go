package gateway_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/fleet/pkg/enrolltoken"
	"github.com/edgefleet/fleet/pkg/hub/enrollment"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/internal/testkit"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/hub/gateway"
	"github.com/edgefleet/fleet/pkg/hub/inventory"
	"github.com/edgefleet/fleet/pkg/hub/reach"
	"github.com/edgefleet/fleet/pkg/pki"
)

// The tests here play an attacker who holds one edge box (its key and
// certificate, a token) or just a network path to the hub.

// A host cannot veto its own revocation: deleting its EdgeHost ends the
// identity at once, whatever the agent reports (here a made-up workload,
// which keeps the host dirty), and the host goes since no Machine holds it.
func TestDeletionRevokesWhateverTheAgentReports(t *testing.T) {
	ns := newNamespace(t)
	h := startHub(t, hubOptions{ns: ns})
	tok := newToken(t, ns, enrolltoken.Options{})
	mallory := newEdge(t, "vetoer", h.url, h.srv.CA().Pin(), tok)
	must(t, agentEnroll(mallory))
	pair, caPEM := credentials(t, mallory)
	// No pings: a client write that fails after the hub closed makes the
	// client's yamux drop what it has not read yet, the Error included.
	c, _, err := dialRawPinging(t, h.url, caPEM, &pair, 0)
	must(t, err)
	c.send(t, &wire.Hello{Host: "vetoer"})
	c.send(t, &wire.Status{Facts: infrav1.HostFacts{Hostname: "vetoer", MachineID: "x"},
		Provisioning: &infrav1.HostProvisioningStatus{ClaimUID: "made-up", State: infrav1.ProvisioningSucceeded}})
	eventually(t, "the made-up workload recorded", func() error {
		host, err := getHost(ns, "vetoer")
		if err != nil {
			return err
		}
		// A workload the hub never released is not deprovisioned on the
		// hub's own initiative: the host needs attention.
		if host.Status.Phase != infrav1.HostNeedsAttention {
			return fmt.Errorf("phase %q", host.Status.Phase)
		}
		return nil
	})
	// The agent keeps reporting as its host is deleted; the session still
	// ends with Revoked.
	c.send(t, &wire.Status{Facts: infrav1.HostFacts{Hostname: "vetoer", MachineID: "y"},
		Provisioning: &infrav1.HostProvisioningStatus{ClaimUID: "made-up", State: infrav1.ProvisioningSucceeded}})
	must(t, env.Client.Delete(context.Background(), &infrav1.EdgeHost{ObjectMeta: objMeta(ns, "vetoer")}))
	c.expectError(t, wire.ErrRevoked)
	// Refused: as revoked while the EdgeHost is still being deleted, as
	// unknown once it is gone (the hub cannot tell that from a restore
	// that has not brought it back).
	if _, resp, err := dialRaw(t, h.url, caPEM, &pair); err == nil || resp == nil ||
		resp.StatusCode != http.StatusForbidden && resp.StatusCode != http.StatusNotFound {
		t.Fatalf("a new session of the deleted host: err %v resp %v, want 403 or 404", err, resp)
	}
	eventually(t, "the dirty, unclaimed host gone", func() error {
		host, err := getHost(ns, "vetoer")
		if err == nil {
			return fmt.Errorf("still there: phase %s, finalizers %v, machineID %q", host.Status.Phase, host.Finalizers, host.Status.Facts.MachineID)
		}
		return client.IgnoreNotFound(err)
	})
}

// A claimed host that is being deleted is revoked at once too: its agent is
// cut off, nothing it reports is written, and the host stays (protected)
// until its Machine lets go of it, then goes without a reset.
func TestDeletingAClaimedHostRevokesItAtOnce(t *testing.T) {
	ns := newNamespace(t)
	h := startHub(t, hubOptions{ns: ns})
	tok := newToken(t, ns, enrolltoken.Options{})
	e := newEdge(t, "retiring", h.url, h.srv.CA().Pin(), tok).start()
	bootstrapSecret(t, ns, "boot", "#cloud-config\n")
	eventually(t, "enrolled", func() error { _, err := getHost(ns, "retiring"); return err })
	claim(t, ns, "retiring", "m", "boot")
	eventually(t, "provisioned", func() error {
		if len(e.rec.Provisions()) != 1 {
			return errors.New("not yet")
		}
		return nil
	})
	eventually(t, "the protection finalizer on the host", func() error {
		host, err := getHost(ns, "retiring")
		if err != nil || len(host.Finalizers) == 0 {
			return fmt.Errorf("finalizers %v, %v", host, err)
		}
		return nil
	})
	must(t, env.Client.Delete(context.Background(), &infrav1.EdgeHost{ObjectMeta: objMeta(ns, "retiring")}))
	eventually(t, "the agent cut off", func() error {
		if e.agent.Connected() {
			return errors.New("still connected")
		}
		return nil
	})
	eventually(t, "deletion blocked by the claim", func() error {
		host, err := getHost(ns, "retiring")
		if err != nil {
			return err
		}
		if c := conditionOf(host, infrav1.ReadyCondition); c == nil || c.Reason != "DeletionBlocked" {
			return fmt.Errorf("Ready %+v", c)
		}
		return nil
	})
	// The agent runs a workload: it keeps its identity instead of
	// enrolling afresh as an empty host (whose desired state would reset
	// the workload without anyone having ordered it).
	time.Sleep(2 * time.Second) // it retries every 500 ms at most
	hosts := &infrav1.EdgeHostList{}
	must(t, env.Client.List(context.Background(), hosts, client.InNamespace(ns)))
	if len(hosts.Items) != 1 {
		t.Fatalf("hosts after the revocation: %v, want only the deleted one", names(hosts.Items))
	}
	release(t, ns, "retiring")
	eventually(t, "deleted once released", func() error {
		if _, err := getHost(ns, "retiring"); err == nil {
			return errors.New("host still there")
		}
		return nil
	})
	if r := e.rec.Resets(); len(r) != 0 {
		t.Errorf("a revoked agent reset its host: %v", r)
	}
}

// trySend writes msg, ignoring a session the hub has already closed.
func (c *rawClient) trySend(msg any) {
	if b, err := wire.Encode(msg); err == nil {
		_ = wire.WriteFrame(c.ctrl, b)
	}
}

func conditionOf(h *infrav1.EdgeHost, t string) *metav1.Condition {
	for i := range h.Status.Conditions {
		if h.Status.Conditions[i].Type == t {
			return &h.Status.Conditions[i]
		}
	}
	return nil
}

// After a rotation the previous certificate opens no session once the
// overlap has passed, while the agent stays on its session; the new one
// does.
func TestRotationRetiresTheOldCertificate(t *testing.T) {
	ns := newNamespace(t)
	// The agent rotates at 70-90 % of the lifetime: 30 s leaves its
	// rotation three seconds or more before the certificate expires and
	// the hub ends the session, even on a busy machine.
	h := startHub(t, hubOptions{ns: ns, certValid: 30 * time.Second, rotationOverlap: 300 * time.Millisecond})
	tok := newToken(t, ns, enrolltoken.Options{})
	e := newEdge(t, "rotor", h.url, h.srv.CA().Pin(), tok)
	must(t, agentEnroll(e))
	old, caPEM := credentials(t, e)
	e.start()
	eventually(t, "a rotation", func() error {
		if e.agent.Rotations() < 1 {
			return errors.New("not yet")
		}
		return nil
	})
	time.Sleep(700 * time.Millisecond) // the overlap passes, well before the old certificate expires
	// The owner's session as it stands: a loaded machine may have made it
	// reconnect once already, which is not what this test is about.
	eventually(t, "the owner connected", func() error {
		if !e.agent.Connected() {
			return errors.New("not connected")
		}
		return nil
	})
	sessions := e.agent.Sessions()
	// Refused, but not as revoked: an owner whose answer was lost must not
	// throw its identity away.
	if _, resp, err := dialRaw(t, h.url, caPEM, &old); err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the rotated-out certificate: err %v resp %v, want 401", err, resp)
	}
	if !e.agent.Connected() || e.agent.Sessions() != sessions {
		t.Fatalf("the owner lost its session to the refused certificate: connected %v sessions %d (was %d)", e.agent.Connected(), e.agent.Sessions(), sessions)
	}
	current, _ := credentials(t, e)
	c, _, err := dialRaw(t, h.url, caPEM, &current)
	if err != nil {
		t.Fatalf("the current certificate: %v", err)
	}
	c.send(t, &wire.Hello{Host: "rotor"})
	c.expectDesiredState(t)
}

// A session whose client certificate expires is closed then; an agent
// that rotates keeps its session past its first certificate's expiry
// (TestRotationAndRevocation).
func TestSessionEndsWithItsCertificate(t *testing.T) {
	ns := newNamespace(t)
	h := startHub(t, hubOptions{ns: ns, certValid: 3 * time.Second})
	tok := newToken(t, ns, enrolltoken.Options{})
	e := newEdge(t, "lapsing", h.url, h.srv.CA().Pin(), tok)
	must(t, agentEnroll(e))
	pair, caPEM := credentials(t, e)
	c, _, err := dialRaw(t, h.url, caPEM, &pair)
	must(t, err)
	c.send(t, &wire.Hello{Host: "lapsing"})
	c.expectDesiredState(t)
	_ = c.ctrl.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		_, err := wire.ReadFrame(c.ctrl, wire.MaxFrameSize)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("the session was still open 30 s after its certificate expired")
		}
		if err != nil {
			break // closed
		}
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	must(t, err)
	if time.Now().Before(leaf.NotAfter) {
		t.Fatalf("session closed at %v, before its certificate expired at %v", time.Now(), leaf.NotAfter)
	}
}

// One identity sets up at most two sessions at a time, and a Hello is a
// few KiB at most.
func TestOneIdentityCannotHoldTheSetupPlaces(t *testing.T) {
	ns := newNamespace(t)
	h := startHub(t, hubOptions{ns: ns, handshakes: 4})
	tok := newToken(t, ns, enrolltoken.Options{})
	e := newEdge(t, "hoarder", h.url, h.srv.CA().Pin(), tok)
	must(t, agentEnroll(e))
	pair, caPEM := credentials(t, e)
	victim := newEdge(t, "victim", h.url, h.srv.CA().Pin(), tok)
	must(t, agentEnroll(victim))
	victimPair, _ := credentials(t, victim)
	admitted, refused := 0, 0
	for range 16 {
		_, resp, err := dialRaw(t, h.url, caPEM, &pair)
		switch {
		case err == nil:
			admitted++
		case resp != nil && resp.StatusCode == http.StatusServiceUnavailable:
			refused++
		default:
			t.Fatalf("upgrade: %v", err)
		}
	}
	if admitted != gateway.MaxSetupsPerHost || refused != 16-gateway.MaxSetupsPerHost {
		t.Fatalf("16 silent upgrades with one certificate: %d admitted, %d refused; want %d admitted", admitted, refused, gateway.MaxSetupsPerHost)
	}
	// Meanwhile another host, from another address, sets up its session
	// (4 session-setup places: the hoarder holds two).
	v, _, err := dialRawVia(t, h.url, caPEM, &victimPair, time.Second, &net.TCPAddr{IP: net.ParseIP("127.0.0.2")})
	if err != nil {
		t.Fatalf("another host's session while one identity flooded the setup places: %v", err)
	}
	v.send(t, &wire.Hello{Host: "victim"})
	v.expectDesiredState(t)
	// Once those time out (no Hello), the identity may set up again; a
	// 900 KiB Hello is refused without being read.
	var c *rawClient
	eventually(t, "a place again", func() error {
		var err error
		c, _, err = dialRaw(t, h.url, caPEM, &pair)
		return err
	})
	c.trySend(&wire.Hello{Host: "hoarder", AgentVersion: strings.Repeat("x", 900<<10)})
	c.expectError(t, wire.ErrFrameTooLarge)
}

// enrollRaw posts an enrollment request as an agent would, and returns the
// status and the error code of a refusal.
func enrollRaw(t *testing.T, hubURL string, caPEM []byte, token string, facts infrav1.HostFacts) (int, string, string) {
	t.Helper()
	_, csr, err := pki.NewKeyAndCSR(facts.Hostname)
	must(t, err)
	status, body := postEnroll(t, hubURL, caPEM, wire.EnrollRequest{Token: token, CSR: csr, Facts: facts})
	var e struct{ Code, Message string }
	_ = json.Unmarshal(body, &e)
	return status, e.Code, e.Message
}

func tokenUsages(t *testing.T, ns, token string) string {
	t.Helper()
	s := &corev1.Secret{}
	must(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: enrolltoken.SecretName(enrolltoken.PublicID(token))}, s))
	return string(s.Data[enrolltoken.KeyUsages])
}

// A refused enrollment never spends a use of its token: not facts an
// EdgeHost cannot hold (400 with the reason, not 500), not a machine that
// already has its EdgeHosts (409).
func TestRefusedEnrollmentsKeepTheirUses(t *testing.T) {
	ns := newNamespace(t)
	h := startHub(t, hubOptions{ns: ns})
	caPEM := h.srv.CA().CertPEM
	one := newToken(t, ns, enrolltoken.Options{UsageLimit: 1})
	status, code, msg := enrollRaw(t, h.url, caPEM, one, infrav1.HostFacts{Hostname: "till", MachineID: strings.Repeat("a", 66)})
	if status != http.StatusBadRequest || !strings.Contains(msg, "machineID") {
		t.Fatalf("a 66-character machine-id: %d %s %q, want 400 naming machineID", status, code, msg)
	}
	if u := tokenUsages(t, ns, one); u != "0" {
		t.Fatalf("refused facts spent a use: usages %s", u)
	}

	// A cloned image: the third machine with the same hostname and
	// machine-id has no name left (409), and spends nothing.
	three := newToken(t, ns, enrolltoken.Options{UsageLimit: 3})
	clone := infrav1.HostFacts{Hostname: "clone", MachineID: "0123456789abcdef0123456789abcdef"}
	for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusConflict, http.StatusConflict} {
		if status, code, msg := enrollRaw(t, h.url, caPEM, three, clone); status != want {
			t.Fatalf("clone %d: %d %s %q, want %d", i+1, status, code, msg, want)
		}
	}
	if u := tokenUsages(t, ns, three); u != "2" {
		t.Fatalf("after two enrollments and two refusals: usages %s, want 2", u)
	}
	if status, code, msg := enrollRaw(t, h.url, caPEM, three, infrav1.HostFacts{Hostname: "other", MachineID: "x"}); status != http.StatusOK {
		t.Fatalf("the token's last use: %d %s %q", status, code, msg)
	}
}

// syncBuffer is a log sink the test reads while the hub writes.
type syncBuffer = testkit.SyncBuffer

// No part of what a caller sent as a token secret reaches the hub's log:
// a secret pasted without its id is all secret.
func TestTokenSecretsStayOutOfTheLog(t *testing.T) {
	ns := newNamespace(t)
	logs := &syncBuffer{}
	log := funcr.New(func(prefix, args string) { _, _ = io.WriteString(logs, prefix+" "+args+"\n") }, funcr.Options{})
	h := startHub(t, hubOptions{ns: ns, log: log})
	tok := newToken(t, ns, enrolltoken.Options{})
	id, secret, _ := strings.Cut(tok, ".")
	for _, sent := range []string{secret, "abcdefgh" + secret, secret + "." + id} {
		status, _, _ := enrollRaw(t, h.url, h.srv.CA().CertPEM, sent, infrav1.HostFacts{Hostname: "paster", MachineID: "x"})
		if status != http.StatusUnauthorized {
			t.Fatalf("token %q: status %d, want 401", sent, status)
		}
	}
	eventually(t, "the refusals logged", func() error {
		if n := strings.Count(logs.String(), "Refused enrollment"); n < 3 {
			return fmt.Errorf("%d refusals logged", n)
		}
		return nil
	})
	out := logs.String()
	for i := 0; i+4 <= len(secret); i++ {
		if strings.Contains(out, secret[i:i+4]) {
			t.Fatalf("the log holds %q, a part of the secret:\n%s", secret[i:i+4], out)
		}
	}
}

// A tunnel for a cluster only goes through a host claimed by a machine of
// that cluster: labels alone (from a token, or an edit) make no carrier,
// and tokens refuse fleet's and Cluster API's labels.
func TestTunnelsNeedAClaimNotLabels(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	h := startHub(t, hubOptions{ns: ns})
	for _, k := range []string{infrav1.ClusterLabel, infrav1.ControlPlaneLabel, clusterv1.ClusterNameLabel, "controlplane.cluster.x-k8s.io/x"} {
		if _, _, err := enrollment.CreateToken(ctx, env.Client, ns, enrolltoken.Options{HostNamespace: ns, HostLabels: map[string]string{k: "store"}}, time.Now()); err == nil {
			t.Errorf("a token with label %s was made", k)
		}
	}
	// A token Secret made by hand with them: the labels are not stamped.
	tok := newToken(t, ns, enrolltoken.Options{})
	s := &corev1.Secret{}
	must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: enrolltoken.SecretName(enrolltoken.PublicID(tok))}, s))
	s.Data[enrolltoken.KeyHostLabels] = []byte(`{"fleet.edgefleet.io/cluster":"store","fleet.edgefleet.io/control-plane":"true","site":"s1"}`)
	must(t, env.Client.Update(ctx, s))
	sneaky := newEdge(t, "sneaky", h.url, h.srv.CA().Pin(), tok).start()
	eventually(t, "sneaky connected", func() error {
		if !sneaky.agent.Connected() {
			return errors.New("not yet")
		}
		return nil
	})
	host, err := getHost(ns, "sneaky")
	must(t, err)
	if host.Labels["site"] != "s1" || host.Labels[infrav1.ClusterLabel] != "" || host.Labels[infrav1.ControlPlaneLabel] != "" {
		t.Fatalf("labels from a hand-made token: %v", host.Labels)
	}
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "store", Namespace: ns},
		Spec: clusterv1.ClusterSpec{
			InfrastructureRef:    clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "EdgeCluster", Name: "store"},
			ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "store." + ns + ".fleet.internal", Port: 6443},
		}}
	must(t, env.Client.Create(ctx, cluster))
	// The labels set on the unclaimed host another way (an edit).
	eventually(t, "labelled", func() error {
		host, err := getHost(ns, "sneaky")
		if err != nil {
			return err
		}
		inventory.SetMembershipLabels(host, "m", "store", true)
		return env.Client.Update(ctx, host)
	})
	eventually(t, "the hub's cache sees the labels", func() error {
		_, _, err := h.srv.DialCluster(ctx, ns, "store", "store."+ns+".fleet.internal:6443")
		var none *reach.ErrNoAgent
		if errors.As(err, &none) {
			return nil
		}
		return fmt.Errorf("dialing the cluster: %v, want no agent", err)
	})
	time.Sleep(500 * time.Millisecond)
	_, _, err = h.srv.DialCluster(ctx, ns, "store", "store."+ns+".fleet.internal:6443")
	var none *reach.ErrNoAgent
	if !errors.As(err, &none) {
		t.Fatalf("an unclaimed, labelled host was asked for a tunnel: %v", err)
	}
}

// clientHello is the first TLS record a Go client sends.
func clientHello(t *testing.T) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go func() { _ = tls.Client(a, &tls.Config{ServerName: "127.0.0.1", InsecureSkipVerify: true}).Handshake() }() //nolint:gosec // only its ClientHello is used
	hdr := make([]byte, 5)
	_, err := io.ReadFull(b, hdr)
	must(t, err)
	rec := make([]byte, 5+int(hdr[3])<<8|int(hdr[4]))
	copy(rec, hdr)
	_, err = io.ReadFull(b, rec[5:])
	must(t, err)
	return rec
}

// victimHandshakes runs n TLS handshakes from 127.0.0.2, each given an
// agent's patience, and returns how many succeeded.
func victimHandshakes(t *testing.T, addr string, caPEM []byte, n int) int {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	ok := 0
	for range n {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: 5 * time.Second}
		c, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
		if err == nil {
			ok++
			_ = c.Close()
		}
	}
	return ok
}

// Connections that never send a ClientHello hold no TLS handshake place,
// and connections that send one and stall hold at most one source's share:
// an agent from another address still completes its handshakes.
func TestHandshakePlacesResistAFlood(t *testing.T) {
	ns := newNamespace(t)
	h := startHub(t, hubOptions{ns: ns, tlsHandshakes: 8})
	addr := strings.TrimPrefix(h.url, "https://")
	var flood []net.Conn
	t.Cleanup(func() {
		for _, c := range flood {
			_ = c.Close()
		}
	})
	open := func(n int, first []byte) {
		for range n {
			c, err := net.Dial("tcp", addr)
			must(t, err)
			if first != nil {
				_, err = c.Write(first)
				must(t, err)
			}
			flood = append(flood, c)
		}
	}
	// Idle TCP connections: on 127.0.0.1, forty times the places.
	open(320, nil)
	time.Sleep(200 * time.Millisecond)
	if got := victimHandshakes(t, addr, h.srv.CA().CertPEM, 5); got != 5 {
		t.Fatalf("with idle connections holding the line: %d of 5 handshakes from another address succeeded", got)
	}
	// ClientHellos that never go on.
	open(64, clientHello(t))
	time.Sleep(200 * time.Millisecond)
	if got := victimHandshakes(t, addr, h.srv.CA().CertPEM, 5); got != 5 {
		t.Fatalf("with stalled ClientHellos: %d of 5 handshakes from another address succeeded", got)
	}
}

// A certificate that a rotation replaced opens sessions during the
// overlap, but cannot rotate again: that would replace the owner's new
// certificate. It may only fetch the certificate of the key the rotation
// recorded, which is what an owner whose answer was lost asks for.
func TestThePreviousCertificateCannotRotateAgain(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	h := startHub(t, hubOptions{ns: ns, rotationOverlap: 10 * time.Minute})
	tok := newToken(t, ns, enrolltoken.Options{})
	e := newEdge(t, "rotated", h.url, h.srv.CA().Pin(), tok)
	must(t, agentEnroll(e))
	old, caPEM := credentials(t, e)
	rotate := func(cert *tls.Certificate, keyPEM []byte) any {
		t.Helper()
		c, _, err := dialRaw(t, h.url, caPEM, cert)
		must(t, err)
		defer c.ws.Close()
		c.send(t, &wire.Hello{Host: "rotated"})
		c.expectDesiredState(t)
		csr, err := pki.CSRForKey(keyPEM, "rotated")
		must(t, err)
		c.send(t, &wire.CertificateRequest{CSR: csr})
		for {
			_, msg := c.next(t)
			switch m := msg.(type) {
			case *wire.Certificate, *wire.Error:
				return m
			}
		}
	}
	// The owner rotates to key 1 with its certificate.
	key1, _, err := pki.NewKeyAndCSR("rotated")
	must(t, err)
	got, ok := rotate(&old, key1).(*wire.Certificate)
	if !ok {
		t.Fatalf("the owner's rotation: %+v", got)
	}
	owner, err := tls.X509KeyPair(append(key1, got.Certificate...), append(key1, got.Certificate...))
	must(t, err)
	// Whoever holds the replaced certificate tries to rotate to key 2.
	key2, _, err := pki.NewKeyAndCSR("rotated")
	must(t, err)
	if e, ok := rotate(&old, key2).(*wire.Error); !ok || e.Code != wire.ErrRejected || !strings.Contains(e.Message, "may only fetch the certificate of the key") {
		t.Fatalf("a rotation from the replaced certificate: %+v, want Rejected", e)
	}
	host := &infrav1.EdgeHost{}
	must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "rotated"}, host))
	if cur := host.Annotations[infrav1.ClientKeyAnnotation]; cur != pki.CertKeyID(mustLeaf(t, owner)) {
		t.Fatalf("the host's current key changed to %s", cur)
	}
	// An owner whose answer was lost asks again, from the replaced
	// certificate, for key 1: it gets it (until its new certificate is
	// first used, which retires the old one).
	if _, ok := rotate(&old, key1).(*wire.Certificate); !ok {
		t.Fatal("the owner could not fetch the certificate of its recorded key again")
	}
	// The owner's new certificate still opens sessions.
	c, _, err := dialRaw(t, h.url, caPEM, &owner)
	if err != nil {
		t.Fatalf("the owner's certificate after the attempt: %v", err)
	}
	c.send(t, &wire.Hello{Host: "rotated"})
	c.expectDesiredState(t)
	_ = c.ws.Close()
}

func mustLeaf(t *testing.T, pair tls.Certificate) *x509.Certificate {
	t.Helper()
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	must(t, err)
	return leaf
}
