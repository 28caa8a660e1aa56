package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"
)

// CA is a certificate authority in memory.
type CA struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte
	KeyPEM  []byte
}

// NewCA creates a self-signed ECDSA P-256 CA.
func NewCA(commonName string, validity time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"fleet"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("self-signing CA: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return ParseCA(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
}

// ParseCA loads a CA from PEM.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("parsing CA key pair: %w", err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("parsing CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, errors.New("certificate is not a CA")
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, errors.New("CA key cannot sign")
	}
	return &CA{Cert: cert, Key: signer, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// Pin returns the CA's pin, "sha256:<hex of the SPKI digest>".
func (ca *CA) Pin() string { return Pin(ca.Cert) }

// Pin returns "sha256:<hex>" of a certificate's SubjectPublicKeyInfo, the
// format kubeadm uses for --discovery-token-ca-cert-hash.
func Pin(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ServingCertificate issues a TLS server certificate for the hub.
func (ca *CA) ServingCertificate(dnsNames []string, ips []net.IP, validity time.Duration) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "fleet-hub"},
		NotBefore:    now.Add(-5 * time.Minute),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     dnsNames,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("signing serving certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der, ca.Cert.Raw}, PrivateKey: key}, nil
}

// Identity is who a host is: its EdgeHost's namespace and name. UID, when
// set, is the uid of the EdgeHost the certificate was issued for; the hub
// binds a certificate to its host by name and recorded key, not by uid,
// which a restore from backup changes (pkg/hub/identity).
type Identity struct {
	Namespace string
	Name      string
	UID       string
}

func (i Identity) String() string { return i.Namespace + "/" + i.Name }

const identityScheme = "fleet-host"

// URI encodes the identity as the certificate's URI SAN:
// fleet-host://edgehost/<namespace>/<name>[/<uid>].
func (i Identity) URI() *url.URL {
	path := "/" + i.Namespace + "/" + i.Name
	if i.UID != "" {
		path += "/" + i.UID
	}
	return &url.URL{Scheme: identityScheme, Host: "edgehost", Path: path}
}

// IdentityFromCert reads the host identity from a client certificate.
func IdentityFromCert(cert *x509.Certificate) (Identity, error) {
	for _, u := range cert.URIs {
		if u.Scheme != identityScheme || u.Host != "edgehost" {
			continue
		}
		parts := strings.Split(strings.TrimPrefix(u.Path, "/"), "/")
		if len(parts) < 2 || len(parts) > 3 || slices.Contains(parts, "") {
			return Identity{}, fmt.Errorf("malformed host identity %q", u)
		}
		id := Identity{Namespace: parts[0], Name: parts[1]}
		if len(parts) == 3 {
			id.UID = parts[2]
		}
		return id, nil
	}
	return Identity{}, errors.New("certificate carries no host identity")
}

// SignClient issues a client certificate for id from a CSR, after checking
// the CSR's own signature. Whatever names the CSR asks for are ignored: the
// identity is the hub's decision.
func (ca *CA) SignClient(csrPEM []byte, id Identity, validity time.Duration) ([]byte, error) {
	csr, err := ParseCSR(csrPEM)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: id.Name, Organization: []string{"fleet:hosts:" + id.Namespace}},
		// Backdated for clock skew on edge devices, by at most a tenth of
		// the lifetime so rotation at 70-90 % stays meaningful.
		NotBefore:   now.Add(-min(5*time.Minute, validity/10)),
		NotAfter:    now.Add(validity),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		URIs:        []*url.URL{id.URI()},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, csr.PublicKey, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("signing client certificate: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// ParseCSR parses a PEM CSR and checks its signature and key strength.
func ParseCSR(csrPEM []byte) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(csrPEM)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, errors.New("csr is not a PEM CERTIFICATE REQUEST")
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing csr: %w", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("csr signature: %w", err)
	}
	switch pub := csr.PublicKey.(type) {
	case *ecdsa.PublicKey:
		if pub.Curve.Params().BitSize < 256 {
			return nil, errors.New("csr key too weak: want ECDSA P-256 or better")
		}
	default:
		return nil, fmt.Errorf("csr key type %T not accepted: want ECDSA", pub)
	}
	return csr, nil
}

// NewKeyAndCSR makes a fresh ECDSA P-256 key and a CSR for it. The key
// stays with the caller (on the host); only the CSR travels.
func NewKeyAndCSR(commonName string) (keyPEM, csrPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: commonName},
	}, key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// CSRForKey makes a CSR for an existing key (PEM, as NewKeyAndCSR
// returns it): an agent retrying an enrollment asks again for the same key.
func CSRForKey(keyPEM []byte, commonName string) ([]byte, error) {
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, errors.New("no PEM key")
	}
	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing key: %w", err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: commonName},
	}, key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// KeyID names a CSR's public key: "sha256:" and the hex digest of its
// SubjectPublicKeyInfo.
func KeyID(csr *x509.CertificateRequest) string {
	return keyID(csr.PublicKey, csr.RawSubjectPublicKeyInfo)
}

// keyID digests the key's canonical encoding, so a CSR's key and the same
// key in the certificate issued for it get one id.
func keyID(pub any, raw []byte) string {
	if der, err := x509.MarshalPKIXPublicKey(pub); err == nil {
		raw = der
	}
	sum := sha256.Sum256(raw)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// CertKeyID names a certificate's public key as KeyID names a CSR's.
func CertKeyID(cert *x509.Certificate) string {
	return keyID(cert.PublicKey, cert.RawSubjectPublicKeyInfo)
}

// ParseCertPEM returns the first certificate in PEM data.
func ParseCertPEM(b []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM CERTIFICATE")
	}
	return x509.ParseCertificate(block.Bytes)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return n
}
