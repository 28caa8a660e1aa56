package gateway_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/pkg/agent"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/enrolltoken"
	"github.com/edgefleet/fleet/pkg/hub/enrollment"
	"github.com/edgefleet/fleet/pkg/pki"
)

// A new agent with a valid token and pin gets an EdgeHost with its facts
// and the token's labels, and a certificate; a restart resumes without a
// new enrollment.
func TestEnrollAndResume(t *testing.T) {
	ns := newNamespace(t)
	h := startHub(t, hubOptions{ns: ns})
	tok := newToken(t, ns, enrolltoken.Options{HostLabels: map[string]string{"site": "store-17", infrav1.ZoneLabel: "eu-1"}})
	e := newEdge(t, "store-17-pos", h.url, h.srv.CA().Pin(), tok).start()

	eventually(t, "EdgeHost enrolled and connected", func() error {
		host, err := getHost(ns, "store-17-pos")
		if err != nil {
			return err
		}
		if host.Labels["site"] != "store-17" || host.Labels[infrav1.ZoneLabel] != "eu-1" {
			return fmt.Errorf("labels %v", host.Labels)
		}
		if host.Status.Facts.OS != "Test Linux 1" || host.Status.Facts.MachineID == "" || host.Status.Facts.AgentVersion == "" {
			return fmt.Errorf("facts %+v", host.Status.Facts)
		}
		if s, err := connectedStatus(ns, "store-17-pos"); err != nil || s != "True" {
			return fmt.Errorf("AgentConnected %s %v", s, err)
		}
		return nil
	})
	if e.agent.Enrollments() != 1 {
		t.Fatalf("enrollments %d", e.agent.Enrollments())
	}

	// Restart: the same state directory, a new process.
	e.stop()
	e.start()
	eventually(t, "restarted agent connected", func() error {
		if !e.agent.Connected() {
			return errors.New("not connected")
		}
		return nil
	})
	if n := e.agent.Enrollments(); n != 0 {
		t.Errorf("restarted agent enrolled %d times, want 0 (resume with stored identity)", n)
	}
	hosts := &infrav1.EdgeHostList{}
	must(t, env.Client.List(context.Background(), hosts, client.InNamespace(ns)))
	if len(hosts.Items) != 1 {
		t.Errorf("%d EdgeHosts after restart, want 1", len(hosts.Items))
	}
}

// A wrong pin means the token is never sent; every bad token is refused
// with a clear reason and creates nothing.
func TestEnrollmentRefusals(t *testing.T) {
	ns := newNamespace(t)
	h := startHub(t, hubOptions{ns: ns})
	pin := h.srv.CA().Pin()
	ctx := context.Background()

	good := newToken(t, ns, enrolltoken.Options{})
	wrongPin := "sha256:" + fmt.Sprintf("%064x", 42)
	e := newEdge(t, "pinned", h.url, wrongPin, good)
	err := agent.EnrollOnce(ctx, e.cfg)
	if !errors.Is(err, agent.ErrPinMismatch) {
		t.Fatalf("wrong pin: %v, want ErrPinMismatch", err)
	}
	if tk, err := enrollment.Authenticate(ctx, env.Client, ns, good, time.Now()); err != nil || tk.Usages != 0 {
		t.Fatalf("the token reached the hub despite the wrong pin: usages %v err %v", tk, err)
	}

	expired := newToken(t, ns, enrolltoken.Options{TTL: time.Nanosecond})
	usedUp := newToken(t, ns, enrolltoken.Options{UsageLimit: 1})
	must(t, agent.EnrollOnce(ctx, newEdge(t, "first", h.url, pin, usedUp).cfg))
	revoked := newToken(t, ns, enrolltoken.Options{})
	sec := &corev1.Secret{}
	must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: enrolltoken.SecretName(revoked[:6])}, sec))
	sec.Data[enrolltoken.KeyRevoked] = []byte("true")
	must(t, env.Client.Update(ctx, sec))
	unknown := "abcdef.0123456789abcdef"
	wrongSecret := good[:7] + "0000000000000000"

	for _, tc := range []struct {
		name, token, want string
	}{
		{"expired", expired, "token has expired"},
		{"used up", usedUp, "token has reached its usage limit"},
		{"revoked", revoked, "token was revoked"},
		{"unknown", unknown, "token is unknown"},
		{"wrong secret", wrongSecret, "token is unknown"},
		{"malformed", "not-a-token", "token is malformed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := agent.EnrollOnce(ctx, newEdge(t, "h-"+tc.name[:3], h.url, pin, tc.token).cfg)
			var ee *agent.EnrollError
			if !errors.As(err, &ee) || ee.Code != "TokenRefused" || !strings.HasPrefix(ee.Message, tc.want) {
				t.Fatalf("enroll with %s token: %v, want TokenRefused %q", tc.name, err, tc.want)
			}
		})
	}
	hosts := &infrav1.EdgeHostList{}
	must(t, env.Client.List(ctx, hosts, client.InNamespace(ns)))
	if len(hosts.Items) != 1 || hosts.Items[0].Name != "first" {
		t.Errorf("EdgeHosts %v, want only the one valid enrollment", names(hosts.Items))
	}
}

func names(hs []infrav1.EdgeHost) []string {
	var out []string
	for _, h := range hs {
		out = append(out, h.Name)
	}
	return out
}

// An enrollment whose answer is lost (the agent gave up waiting) is
// retried with the same key and gets the same host, even on a one-time
// token; it makes no second host that no agent would ever hold. Once an
// agent has connected as the host, the same request gets nothing.
func TestEnrollmentRetryGetsTheSameHost(t *testing.T) {
	ns := newNamespace(t)
	h := startHub(t, hubOptions{ns: ns})
	ctx := context.Background()
	tok := newToken(t, ns, enrolltoken.Options{UsageLimit: 1})
	keyPEM, _, err := pki.NewKeyAndCSR("x")
	must(t, err)
	csr, err := pki.CSRForKey(keyPEM, "kiosk")
	must(t, err)
	req := wire.EnrollRequest{Token: tok, CSR: csr, Facts: infrav1.HostFacts{Hostname: "kiosk", MachineID: "0123456789abcdef0123456789abcdef"}}
	post := func(r wire.EnrollRequest) (int, wire.EnrollResponse) {
		t.Helper()
		code, body := postEnroll(t, h.url, h.srv.CA().CertPEM, r)
		var er wire.EnrollResponse
		_ = json.Unmarshal(body, &er)
		return code, er
	}
	code, first := post(req)
	if code != http.StatusOK {
		t.Fatalf("first enrollment: %d", code)
	}
	// The answer was lost: the agent asks again with the same key (a real
	// agent after its 30-s timeout; the hub's cache may need a moment).
	eventually(t, "retried enrollment resumed", func() error {
		code, again := post(req)
		if code != http.StatusOK || again.Host != first.Host || again.UID != first.UID {
			return fmt.Errorf("retried enrollment: %d %s/%s, want 200 and the same host %s/%s", code, again.Host, again.UID, first.Host, first.UID)
		}
		return nil
	})
	// Another key with the spent token: refused.
	otherKey, _, err := pki.NewKeyAndCSR("y")
	must(t, err)
	other := req
	other.CSR, err = pki.CSRForKey(otherKey, "kiosk")
	must(t, err)
	if code, _ := post(other); code != http.StatusUnauthorized {
		t.Errorf("another key on the spent token: %d, want 401", code)
	}
	// An agent connected as the host: the same request no longer resumes.
	host, err := getHost(ns, first.Host)
	must(t, err)
	patch := client.MergeFrom(host.DeepCopy())
	meta.SetStatusCondition(&host.Status.Conditions, metav1.Condition{Type: infrav1.AgentConnectedCondition, Status: metav1.ConditionTrue, Reason: "Connected"})
	must(t, env.Client.Status().Patch(ctx, host, patch))
	eventually(t, "no resume once connected", func() error {
		if code, _ := post(req); code != http.StatusUnauthorized {
			return fmt.Errorf("same key after the host connected: %d, want 401 (token spent, no resume)", code)
		}
		return nil
	})
	hosts := &infrav1.EdgeHostList{}
	must(t, env.Client.List(ctx, hosts, client.InNamespace(ns)))
	if len(hosts.Items) != 1 {
		t.Errorf("EdgeHosts %v, want one", names(hosts.Items))
	}
	if tk, err := enrollment.Verify(ctx, env.Client, ns, tok, time.Now()); err != nil || tk.Usages != 1 {
		t.Errorf("token usages %v %v, want 1", tk, err)
	}
}

// postEnroll sends an enrollment request as an agent would, over TLS to
// the pinned hub CA, and returns the status and the body.
func postEnroll(t *testing.T, hubURL string, caPEM []byte, r wire.EnrollRequest) (int, []byte) {
	t.Helper()
	body, err := json.Marshal(r)
	must(t, err)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	hc := &http.Client{Timeout: 30 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}}}
	resp, err := hc.Post(hubURL+wire.PathEnroll, "application/json", bytes.NewReader(body))
	must(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	must(t, err)
	return resp.StatusCode, out
}

// An image baked with the hub and pin but no token (fleet-agent install
// without --token-file) runs an agent that waits for the token file; a
// token dropped in after it started enrolls the host without a restart.
func TestTokenFileDroppedInAfterStartEnrolls(t *testing.T) {
	ns := newNamespace(t)
	h := startHub(t, hubOptions{ns: ns})
	tok := newToken(t, ns, enrolltoken.Options{})
	e := newEdge(t, "store-18-pos", h.url, h.srv.CA().Pin(), "")
	e.cfg.TokenFile = filepath.Join(e.cfg.RootDir, "etc", "fleet-agent", "token")
	must(t, e.cfg.Complete())
	e.start()

	time.Sleep(time.Second) // a few enrollment attempts without a token
	if _, err := getHost(ns, "store-18-pos"); err == nil {
		t.Fatal("an EdgeHost exists before any token was given")
	}
	must(t, os.MkdirAll(filepath.Dir(e.cfg.TokenFile), 0o700))
	must(t, os.WriteFile(e.cfg.TokenFile, []byte(tok+"\n"), 0o600))
	eventually(t, "host enrolled with the dropped-in token", func() error {
		if _, err := getHost(ns, "store-18-pos"); err != nil {
			return err
		}
		if e.agent.Enrollments() != 1 {
			return fmt.Errorf("enrollments %d", e.agent.Enrollments())
		}
		return nil
	})
}
