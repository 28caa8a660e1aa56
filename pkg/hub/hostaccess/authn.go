package hostaccess

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The ConfigMap where the API server publishes how to trust its
// aggregation layer's requests.
const (
	authNamespace = "kube-system"
	authConfigMap = "extension-apiserver-authentication"
)

// refreshAfter is how long a read of the ConfigMap is trusted: the API
// server rewrites it when its front-proxy CA changes.
const refreshAfter = time.Minute

// retryAfter is how long a failed read stands before the next.
const retryAfter = 10 * time.Second

// user is who the aggregation layer says made a request.
type user struct {
	Name   string
	UID    string
	Groups []string
	Extra  map[string][]string
}

// frontProxy authenticates the aggregation layer's requests.
type frontProxy struct {
	reader client.Reader

	mu      sync.Mutex
	cfg     *proxyConfig
	fetched time.Time
	// failed and failure keep a failed read for a while, so requests
	// that carry any certificate cannot make the hub read per request.
	failed  time.Time
	failure error
}

type proxyConfig struct {
	roots                                 *x509.CertPool
	allowed                               []string
	userHeaders, uidHeaders, groupHeaders []string
	extraPrefixes                         []string
}

var errUnauthenticated = errors.New("the request does not come from the Kubernetes API server's aggregation layer")

func (f *frontProxy) config(ctx context.Context) (*proxyConfig, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cfg != nil && time.Since(f.fetched) < refreshAfter {
		return f.cfg, nil
	}
	if f.failure != nil && time.Since(f.failed) < retryAfter {
		if f.cfg != nil {
			return f.cfg, nil
		}
		return nil, f.failure
	}
	c, err := f.read(ctx)
	if err != nil {
		f.failed, f.failure = time.Now(), err
		if f.cfg != nil {
			return f.cfg, nil
		}
		return nil, err
	}
	f.cfg, f.fetched, f.failure = c, time.Now(), nil
	return c, nil
}

func (f *frontProxy) read(ctx context.Context) (*proxyConfig, error) {
	cm := &corev1.ConfigMap{}
	if err := f.reader.Get(ctx, client.ObjectKey{Namespace: authNamespace, Name: authConfigMap}, cm); err != nil {
		return nil, fmt.Errorf("reading %s/%s: %w", authNamespace, authConfigMap, err)
	}
	c := &proxyConfig{roots: x509.NewCertPool()}
	if !c.roots.AppendCertsFromPEM([]byte(cm.Data["requestheader-client-ca-file"])) {
		return nil, fmt.Errorf("%s/%s has no requestheader-client-ca-file: the API server runs without an aggregation layer "+
			"(--requestheader-client-ca-file, --proxy-client-cert-file)", authNamespace, authConfigMap)
	}
	for key, into := range map[string]*[]string{
		"requestheader-allowed-names":        &c.allowed,
		"requestheader-username-headers":     &c.userHeaders,
		"requestheader-uid-headers":          &c.uidHeaders,
		"requestheader-group-headers":        &c.groupHeaders,
		"requestheader-extra-headers-prefix": &c.extraPrefixes,
	} {
		if v := cm.Data[key]; v != "" {
			if err := json.Unmarshal([]byte(v), into); err != nil {
				return nil, fmt.Errorf("%s/%s: %s: %w", authNamespace, authConfigMap, key, err)
			}
		}
	}
	return c, nil
}

// authenticate checks the client certificate is the aggregation layer's
// and returns the user its headers name.
func (f *frontProxy) authenticate(r *http.Request) (*user, error) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return nil, errUnauthenticated
	}
	cfg, err := f.config(r.Context())
	if err != nil {
		return nil, err
	}
	leaf := r.TLS.PeerCertificates[0]
	inter := x509.NewCertPool()
	for _, c := range r.TLS.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: cfg.roots, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return nil, fmt.Errorf("%w: %v", errUnauthenticated, err)
	}
	if len(cfg.allowed) > 0 && !slices.Contains(cfg.allowed, leaf.Subject.CommonName) {
		return nil, fmt.Errorf("%w: client certificate %q is not an allowed front proxy", errUnauthenticated, leaf.Subject.CommonName)
	}
	u := &user{Name: first(r.Header, cfg.userHeaders), UID: first(r.Header, cfg.uidHeaders)}
	if u.Name == "" {
		return nil, fmt.Errorf("%w: no user name in the request", errUnauthenticated)
	}
	for _, h := range cfg.groupHeaders {
		u.Groups = append(u.Groups, r.Header.Values(h)...)
	}
	for name, values := range r.Header {
		for _, p := range cfg.extraPrefixes {
			if len(name) > len(p) && strings.EqualFold(name[:len(p)], p) {
				key, err := url.PathUnescape(name[len(p):])
				if err != nil {
					continue
				}
				if u.Extra == nil {
					u.Extra = map[string][]string{}
				}
				u.Extra[strings.ToLower(key)] = append(u.Extra[strings.ToLower(key)], values...)
			}
		}
	}
	return u, nil
}

func first(h http.Header, names []string) string {
	for _, n := range names {
		if v := h.Get(n); v != "" {
			return v
		}
	}
	return ""
}
