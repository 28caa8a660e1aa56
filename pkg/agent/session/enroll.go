package session

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/edgefleet/fleet/pkg/agent/facts"
	"github.com/edgefleet/fleet/pkg/agent/hostclock"
	"github.com/edgefleet/fleet/pkg/agent/state"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/pki"
)

// ErrPinMismatch means the hub's CA is not the pinned one: the agent talks
// to an impostor (or was given the wrong pin) and sends it nothing.
var ErrPinMismatch = errors.New("hub CA does not match --ca-cert-hash; refusing to send the token")

// EnrollError is the hub's refusal.
type EnrollError struct {
	Status  int
	Code    string
	Message string
	// RetryAfter is the hub's Retry-After on a 503 or 429, else 0.
	RetryAfter time.Duration
}

// Error says who refused what, and why.
func (e *EnrollError) Error() string {
	return fmt.Sprintf("hub refused enrollment (%d %s): %s", e.Status, e.Code, e.Message)
}

// fetchCA gets the hub's CA and checks it against the pin. The first
// connection cannot verify the hub (it has no CA yet); it verifies instead
// that the served certificate chains to the CA it returned, and that CA's
// key hash against the pin, as kubeadm discovery does.
func fetchCA(ctx context.Context, dial func(ctx context.Context, network, addr string) (net.Conn, error), hub, pin string) ([]byte, *x509.CertPool, error) {
	var served []*x509.Certificate
	tr := &http.Transport{DialContext: dial, TLSClientConfig: &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true, //nolint:gosec // verified below against the pinned CA
		VerifyConnection: func(cs tls.ConnectionState) error {
			served = cs.PeerCertificates
			return nil
		},
	}}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(hub, "/")+wire.PathCA, nil)
	if err != nil {
		return nil, nil, err
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("fetching hub CA: %w", err)
	}
	defer resp.Body.Close()
	caPEM, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return nil, nil, fmt.Errorf("fetching hub CA: %s: %w", resp.Status, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("fetching hub CA: %s", resp.Status)
	}
	ca, err := pki.ParseCertPEM(caPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("hub CA: %w", err)
	}
	if pki.Pin(ca) != pin {
		return nil, nil, fmt.Errorf("%w (hub CA is %s)", ErrPinMismatch, pki.Pin(ca))
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	if err := verifyHub(served, pool, "", hostclock.Now()); err != nil {
		return nil, nil, fmt.Errorf("%w: the hub's serving certificate is not from the pinned CA: %w", ErrPinMismatch, err)
	}
	return caPEM, pool, nil
}

// Enroll trades the token and a fresh CSR for an identity, and stores it.
func (s *Source) Enroll(ctx context.Context) error {
	token := s.token()
	if token == "" {
		if s.opts.TokenFile != "" {
			return fmt.Errorf("not enrolled and no enrollment token yet: waiting for %s", s.opts.TokenFile)
		}
		return errors.New("not enrolled and no enrollment token configured (--token or tokenFile)")
	}
	caPEM, pool, err := fetchCA(ctx, s.opts.Dial, s.opts.Hub, s.opts.CACertHash)
	if err != nil {
		return err
	}
	hostFacts := facts.Read(s.opts.RootDir)
	hostFacts.AgentVersion = s.opts.Version
	keyPEM, err := s.store.EnrollKey()
	if err != nil {
		return fmt.Errorf("host key for enrolling: %w", err)
	}
	csrPEM, err := pki.CSRForKey(keyPEM, hostFacts.Hostname)
	if err != nil {
		// A damaged key file must not keep the host out for ever: the
		// next attempt starts a new enrollment.
		_ = s.store.ForgetEnrollKey()
		return fmt.Errorf("host key for enrolling (made anew for the next attempt): %w", err)
	}
	er, err := s.postEnrollment(ctx, pool, wire.EnrollRequest{Token: token, CSR: csrPEM, Facts: hostFacts,
		Addresses: facts.Addresses(hostFacts.Hostname)})
	if err != nil {
		return err
	}
	id := state.Identity{Hub: s.opts.Hub, Namespace: er.Namespace, Host: er.Host, UID: er.UID}
	if err := s.store.SaveIdentity(id, caPEM, keyPEM, er.Certificate); err != nil {
		return fmt.Errorf("saving identity: %w", err)
	}
	_ = s.store.ForgetEnrollKey() // part of the identity now
	s.log.Info("Enrolled", "EdgeHost", er.Namespace+"/"+er.Host)
	s.enrollments.Add(1)
	return nil
}

// postEnrollment sends the enrollment request to the hub, whose CA is
// pool, and returns its answer or its refusal (an *EnrollError).
func (s *Source) postEnrollment(ctx context.Context, pool *x509.CertPool, er wire.EnrollRequest) (*wire.EnrollResponse, error) {
	body, err := json.Marshal(er)
	if err != nil {
		return nil, fmt.Errorf("encoding the enrollment request: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(s.opts.Hub, "/")+wire.PathEnroll, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("enrollment request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	tr := &http.Transport{DialContext: s.opts.Dial, TLSClientConfig: hubTLS(pool, s.opts.Hub)}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("enrolling: %w", err)
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return nil, enrollRefusal(resp, rb)
	}
	var out wire.EnrollResponse
	if err := json.Unmarshal(rb, &out); err != nil {
		return nil, fmt.Errorf("enrollment response: %w", err)
	}
	return &out, nil
}

// enrollRefusal reads the hub's refusal of an enrollment.
func enrollRefusal(resp *http.Response, body []byte) *EnrollError {
	e := &EnrollError{Status: resp.StatusCode}
	if resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusTooManyRequests {
		e.RetryAfter = retryAfter(resp.Header)
	}
	var he struct{ Code, Message string }
	if json.Unmarshal(body, &he) == nil {
		e.Code, e.Message = he.Code, he.Message
	} else {
		e.Message = strings.TrimSpace(string(body))
	}
	return e
}

func serverName(hub string) string {
	h := strings.TrimPrefix(strings.TrimPrefix(hub, "https://"), "wss://")
	h, _, _ = strings.Cut(h, "/")
	if i := strings.LastIndex(h, ":"); i > 0 && !strings.HasSuffix(h, "]") {
		h = h[:i]
	}
	return strings.Trim(h, "[]")
}

// maxTokenFile bounds what is read of the token file: a token is
// "<id>.<secret>", well under a line.
const maxTokenFile = 1 << 10

// token is the enrollment token: Token, else the token file's first line
// as it is now.
func (s *Source) token() string {
	if s.opts.Token != "" || s.opts.TokenFile == "" {
		return s.opts.Token
	}
	f, err := os.Open(s.opts.TokenFile)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, maxTokenFile))
	line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return strings.TrimSpace(line)
}
