package reach

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/url"
	"strings"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/pki"
)

// Credentials makes and checks the per-cluster proxy credentials. A
// credential is an HMAC of the cluster's identity (namespace, name, uid)
// and its credential epoch under a key derived from the hub CA key:
// nothing is stored, a deleted and re-created cluster gets a new one,
// bumping the epoch (infrav1.ReachCredentialEpochAnnotation) retires one
// cluster's, and rotating the CA revokes all.
type Credentials struct {
	key []byte
}

// NewCredentials derives the key from the hub CA's private key.
func NewCredentials(ca *pki.CA) *Credentials {
	h := sha256.New()
	h.Write([]byte("fleet edge-reach proxy credentials v1\x00"))
	h.Write(ca.KeyPEM)
	return &Credentials{key: h.Sum(nil)}
}

// For returns the user name and password that open cluster's endpoint.
func (c *Credentials) For(cluster *clusterv1.Cluster) (user, password string) {
	m := hmac.New(sha256.New, c.key)
	m.Write([]byte(cluster.Namespace + "\x00" + cluster.Name + "\x00" + string(cluster.UID)))
	if epoch := cluster.Annotations[infrav1.ReachCredentialEpochAnnotation]; epoch != "" && epoch != "0" {
		// Epoch 0 is the credential clusters had before epochs existed.
		m.Write([]byte("\x00epoch " + epoch))
	}
	return cluster.Namespace + "/" + cluster.Name, base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// Valid reports whether password is the credential of cluster.
func (c *Credentials) Valid(cluster *clusterv1.Cluster, password string) bool {
	_, want := c.For(cluster)
	return hmac.Equal([]byte(want), []byte(password))
}

// ProxyURL is base (the proxy's address as clients see it) with cluster's
// credential in it, for a kubeconfig's proxy-url or HTTPS_PROXY.
func (c *Credentials) ProxyURL(base *url.URL, cluster *clusterv1.Cluster) string {
	u := *base
	user, password := c.For(cluster)
	u.User = url.UserPassword(user, password)
	return u.String()
}

// splitUser parses "namespace/name".
func splitUser(user string) (namespace, name string, ok bool) {
	namespace, name, ok = strings.Cut(user, "/")
	return namespace, name, ok && namespace != "" && name != "" && !strings.Contains(name, "/")
}
