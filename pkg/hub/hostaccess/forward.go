package hostaccess

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/edgefleet/fleet/pkg/pki"
)

// Forwarding: the aggregation layer may land a request on any replica,
// and only the one holding the host's session can ask its agent. The
// replica that authorized the request forwards it to that one (whose
// address its hosts' status records) with the user's name, signed under a
// key both derive from the host-access CA they share; the peer checks the
// signature and serves it without asking again or forwarding further.
const (
	forwardedUserHeader = "Fleet-Host-Access-User"
	forwardedSigHeader  = "Fleet-Host-Access-Signature"
	// forwardValidity bounds how long a signature is good for.
	forwardValidity = 30 * time.Second
)

type forwarder struct {
	key        []byte
	serverName string
	port       string
	client     *http.Client
}

func newForwarder(ca *pki.CA, serverName, port string) *forwarder {
	h := sha256.New()
	h.Write([]byte("fleet host-access forwarding v1\x00"))
	h.Write(ca.KeyPEM)
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	return &forwarder{key: h.Sum(nil), serverName: serverName, port: port, client: &http.Client{
		Transport: &http.Transport{
			TLSClientConfig:     &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12},
			TLSHandshakeTimeout: 10 * time.Second, ResponseHeaderTimeout: 30 * time.Second,
		},
	}}
}

func (f *forwarder) mac(path, query, user string, expiry int64) string {
	m := hmac.New(sha256.New, f.key)
	fmt.Fprintf(m, "%s\x00%s\x00%s\x00%d", path, query, user, expiry)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// verify returns the user a forwarded request speaks for, or false.
func (f *forwarder) verify(r *http.Request) (string, bool) {
	user, sig := r.Header.Get(forwardedUserHeader), r.Header.Get(forwardedSigHeader)
	exp, mac, ok := strings.Cut(sig, ".")
	if f == nil || user == "" || !ok {
		return "", false
	}
	expiry, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || time.Until(time.Unix(expiry, 0)) < 0 || time.Until(time.Unix(expiry, 0)) > forwardValidity {
		return "", false
	}
	return user, hmac.Equal([]byte(mac), []byte(f.mac(r.URL.Path, r.URL.RawQuery, user, expiry)))
}

// forward carries r to the replica at peer (its edge-reach peer address;
// the host-access port is the same on every replica) and copies the
// answer back. It returns the status code.
func (f *forwarder) forward(ctx context.Context, w http.ResponseWriter, r *http.Request, peer, user string) (int, error) {
	host, _, err := net.SplitHostPort(peer)
	if err != nil {
		return 0, fmt.Errorf("peer address %q: %w", peer, err)
	}
	u := "https://" + net.JoinHostPort(host, f.port) + r.URL.Path
	if r.URL.RawQuery != "" {
		u += "?" + r.URL.RawQuery
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	expiry := time.Now().Add(forwardValidity).Unix()
	req.Header.Set(forwardedUserHeader, user)
	req.Header.Set(forwardedSigHeader, strconv.FormatInt(expiry, 10)+"."+f.mac(r.URL.Path, r.URL.RawQuery, user, expiry))
	resp, err := f.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	for _, h := range []string{"Content-Type", "X-Content-Type-Options"} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	flusher, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				break
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if err != nil {
			if err != io.EOF {
				return resp.StatusCode, nil
			}
			break
		}
	}
	return resp.StatusCode, nil
}
