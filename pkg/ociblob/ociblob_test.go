package ociblob_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/fleet/pkg/contract/ociref"
	"github.com/edgefleet/fleet/pkg/ociblob"
)

// registry serves one blob at /v2/edge/k8s/blobs/sha256:…, to a bearer
// token its realm gives anonymously when token is set.
func registry(t *testing.T, blob []byte, token string, realmStatus int) (*httptest.Server, string) {
	sum := sha256.Sum256(blob)
	digest := hex.EncodeToString(sum[:])
	var srv *httptest.Server
	srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/token":
			if r.URL.Query().Get("scope") != "repository:edge/k8s:pull" || r.URL.Query().Get("service") != "reg" {
				http.Error(w, "bad scope", http.StatusBadRequest)
				return
			}
			w.WriteHeader(realmStatus)
			fmt.Fprintf(w, `{"token":%q}`, token)
		case "/v2/edge/k8s/blobs/sha256:" + digest:
			if token != "" && r.Header.Get("Authorization") != "Bearer "+token {
				w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="%s/token",service="reg",scope="repository:edge/k8s:pull"`, srv.URL))
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			http.ServeContent(w, r, "blob", time.Time{}, bytes.NewReader(blob))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, digest
}

func TestGet(t *testing.T) {
	ctx := context.Background()
	blob := []byte("a Kubernetes archive, pushed as an OCI artifact")
	for _, tc := range []struct {
		name, token string
	}{{"anonymous", ""}, {"bearer challenge", "t0k3n"}} {
		srv, digest := registry(t, blob, tc.token, http.StatusOK)
		ref, err := ociref.Parse("oci://" + strings.TrimPrefix(srv.URL, "https://") + "/edge/k8s:v1.36.3")
		if err != nil {
			t.Fatal(err)
		}
		resp, err := ociblob.Get(ctx, srv.Client(), ref, digest, http.Header{"Range": {"bytes=2-"}})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusPartialContent || string(body) != string(blob[2:]) {
			t.Errorf("%s: %s %q", tc.name, resp.Status, body)
		}
	}

	srv, digest := registry(t, blob, "t0k3n", http.StatusUnauthorized)
	ref, _ := ociref.Parse("oci://" + strings.TrimPrefix(srv.URL, "https://") + "/edge/k8s")
	if _, err := ociblob.Get(ctx, srv.Client(), ref, digest, nil); err == nil || !strings.Contains(err.Error(), "fleet pulls anonymously") {
		t.Errorf("a private repository: %v", err)
	}
	basic := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", `Basic realm="registry"`)
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer basic.Close()
	ref, _ = ociref.Parse("oci://" + strings.TrimPrefix(basic.URL, "https://") + "/edge/k8s")
	if _, err := ociblob.Get(ctx, basic.Client(), ref, digest, nil); err == nil || !strings.Contains(err.Error(), "asks for credentials") {
		t.Errorf("a registry asking for a password: %v", err)
	}
}

// A registry that sends its blobs from another host (a CDN) gets the pull
// token; the other host does not.
func TestGetKeepsTheTokenFromAnotherHost(t *testing.T) {
	blob := []byte("a blob served by a CDN")
	var cdnSawToken bool
	cdn := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cdnSawToken = r.Header.Get("Authorization") != ""
		_, _ = w.Write(blob)
	}))
	defer cdn.Close()
	srv, digest := registry(t, blob, "t0k3n", http.StatusOK)
	// The registry's blob answer becomes a redirect to the CDN, named
	// example.com (which the test certificate covers) and dialled at
	// the CDN's address.
	redirecting := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v2/") && r.Header.Get("Authorization") == "Bearer t0k3n" {
			http.Redirect(w, r, fmt.Sprintf("https://example.com:%d/blob", cdn.Listener.Addr().(*net.TCPAddr).Port), http.StatusTemporaryRedirect)
			return
		}
		srv.Config.Handler.ServeHTTP(w, r)
	}))
	defer redirecting.Close()
	client := redirecting.Client()
	tr := client.Transport.(*http.Transport)
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if host, port, _ := net.SplitHostPort(addr); host == "example.com" {
			addr = net.JoinHostPort("127.0.0.1", port)
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	ref, _ := ociref.Parse("oci://" + strings.TrimPrefix(redirecting.URL, "https://") + "/edge/k8s")
	resp, err := ociblob.Get(context.Background(), client, ref, digest, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != string(blob) {
		t.Fatalf("got %s %q", resp.Status, body)
	}
	if cdnSawToken {
		t.Error("the registry's pull token was sent to another host")
	}
}
