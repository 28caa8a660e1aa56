package state

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// selfSigned returns a key and a certificate for it, in PEM.
func selfSigned(t *testing.T) (keyPEM, certPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "h"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}, &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "h"}}, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// enrolled is a store holding an identity and an applied workload.
func enrolled(t *testing.T) Store {
	t.Helper()
	s := Store{Dir: t.TempDir()}
	key, cert := selfSigned(t)
	if err := s.SaveIdentity(Identity{Hub: "https://hub", Namespace: "ns", Host: "h1", UID: "u1"}, cert, key, cert); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveApplied(Applied{Generation: 7, Workload: &infrav1.HostProvisioningStatus{ClaimUID: "c1", State: infrav1.ProvisioningSucceeded}}); err != nil {
		t.Fatal(err)
	}
	return s
}

// loadAll reads everything a restarted agent reads.
func loadAll(s Store) (Credentials, Applied, error) {
	c, err := s.LoadIdentity()
	if err != nil {
		return c, Applied{}, err
	}
	if _, err := c.TLSCertificate(); err != nil {
		return c, Applied{}, err
	}
	a, err := s.LoadApplied()
	return c, a, err
}

// A state file truncated or overwritten between runs is read from its
// copy, and mended; the agent comes back as it was.
func TestACorruptStateFileIsReadFromItsCopy(t *testing.T) {
	damage := map[string]func([]byte) []byte{
		"emptied":   func([]byte) []byte { return nil },
		"truncated": func(b []byte) []byte { return b[:len(b)/2] },
		"garbage":   func(b []byte) []byte { return []byte(strings.Repeat("\x00\xff", len(b)/2)) },
	}
	for _, file := range []string{FileIdentity, FileCA, FileCredentials, FileApplied} {
		for how, f := range damage {
			t.Run(file+"/"+how, func(t *testing.T) {
				s := enrolled(t)
				p := filepath.Join(s.Dir, file)
				good, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, f(good), 0o600); err != nil {
					t.Fatal(err)
				}
				c, a, err := loadAll(s)
				if err != nil {
					t.Fatalf("loading after %s %s: %v", how, file, err)
				}
				if c.Identity.Host != "h1" || a.Generation != 7 || a.Workload == nil || a.Workload.ClaimUID != "c1" {
					t.Fatalf("loaded %+v, %+v", c.Identity, a)
				}
				if now, _ := os.ReadFile(p); string(now) != string(good) {
					t.Fatalf("%s was not mended from its copy", file)
				}
			})
		}
	}
}

// A file whose copy is corrupt too is an error that names it; nothing is
// guessed (an empty applied state would let a bootstrap run over a node).
func TestAFileAndItsCopyBothCorrupt(t *testing.T) {
	s := enrolled(t)
	for _, p := range []string{FileApplied, FileApplied + copySuffix} {
		if err := os.WriteFile(filepath.Join(s.Dir, p), []byte(`{"generation": 7, "workl`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.LoadApplied(); err == nil || !strings.Contains(err.Error(), "applied.json is corrupt") || !strings.Contains(err.Error(), "and so is its copy") {
		t.Fatalf("LoadApplied: %v", err)
	}
	if err := os.Remove(filepath.Join(s.Dir, FileApplied)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.LoadApplied(); err == nil || !strings.Contains(err.Error(), "applied.json is missing and its copy is corrupt") {
		t.Fatalf("LoadApplied: %v", err)
	}
}

// State written before copies were kept is read as it is, and gains its
// copies; forgetting the identity removes them with it.
func TestStateWithoutCopiesGainsThem(t *testing.T) {
	s := enrolled(t)
	names := []string{FileIdentity, FileCA, FileCredentials, FileApplied}
	for _, n := range names {
		if err := os.Remove(filepath.Join(s.Dir, n+copySuffix)); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := loadAll(s); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		a, _ := os.ReadFile(filepath.Join(s.Dir, n))
		b, err := os.ReadFile(filepath.Join(s.Dir, n+copySuffix))
		if err != nil || string(a) != string(b) {
			t.Fatalf("%s's copy: %v", n, err)
		}
	}
	if err := s.ForgetIdentity(); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{FileIdentity, FileCredentials} {
		for _, p := range []string{n, n + copySuffix} {
			if _, err := os.Stat(filepath.Join(s.Dir, p)); !os.IsNotExist(err) {
				t.Fatalf("%s after ForgetIdentity: %v", p, err)
			}
		}
	}
	if _, err := s.LoadIdentity(); err != ErrNotEnrolled {
		t.Fatalf("LoadIdentity after ForgetIdentity: %v", err)
	}
}
