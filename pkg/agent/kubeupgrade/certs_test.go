package kubeupgrade_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/fleet/pkg/agent/cloudconfig"
	"github.com/edgefleet/fleet/pkg/agent/kubeupgrade"
)

// pkiHost is a fake control plane whose `kubeadm certs renew all` writes
// new certificates, and whose API server serves the certificate that was
// on disk when the kubelet last (re)started its pod: when its manifest
// changed.
type pkiHost struct {
	*fakeHost
	serial   int64
	manifest string
	loaded   *x509.Certificate
	// stuck: the API server never comes back after a restart.
	stuck bool
	// renewFails makes `kubeadm certs renew` fail half-way.
	renewFails bool
}

func newPKIHost(t *testing.T) *pkiHost {
	h := &pkiHost{fakeHost: newFakeHost(t, "v1.36.3")}
	h.write("etc/kubernetes/manifests/kube-apiserver.yaml", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: kube-apiserver\n", 0o600)
	h.write("etc/kubernetes/manifests/etcd.yaml", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: etcd\n  annotations:\n    kubeadm.kubernetes.io/etcd.advertise-client-urls: https://10.0.0.1:2379\n", 0o600)
	h.write("etc/kubernetes/admin.conf", "admin 0", 0o600)
	h.write("etc/kubernetes/pki/ca.crt", "ca", 0o644)
	h.writeCert()
	h.serve()
	return h
}

// writeCert puts a new API server certificate on disk, as kubeadm does.
func (h *pkiHost) writeCert() {
	h.serial++
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		h.t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(h.serial), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		h.t.Fatal(err)
	}
	h.write("etc/kubernetes/pki/apiserver.crt", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), 0o644)
}

func (h *pkiHost) cert() *x509.Certificate {
	block, _ := pem.Decode([]byte(h.read("etc/kubernetes/pki/apiserver.crt")))
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		h.t.Fatal(err)
	}
	return c
}

// serve is the kubelet noticing the manifest and the API server loading
// the certificate on disk.
func (h *pkiHost) serve() {
	h.manifest, h.loaded = h.read("etc/kubernetes/manifests/kube-apiserver.yaml"), h.cert()
}

func (h *pkiHost) Run(ctx context.Context, c cloudconfig.Command) ([]byte, error) {
	if strings.Join(c.Argv, " ") == "/usr/local/bin/kubeadm certs renew all" {
		h.ran = append(h.ran, strings.Join(c.Argv, " "))
		h.writeCert()
		h.write("etc/kubernetes/admin.conf", fmt.Sprintf("admin %d", h.serial), 0o600)
		if h.renewFails {
			return []byte("error renewing the certificate for etcd-server"), errors.New("exit status 1")
		}
		return nil, nil
	}
	return h.fakeHost.Run(ctx, c)
}

func (h *pkiHost) serving(context.Context) (*x509.Certificate, error) {
	if m := h.read("etc/kubernetes/manifests/kube-apiserver.yaml"); m != h.manifest {
		if h.stuck {
			return nil, errors.New("connection refused")
		}
		h.serve()
	}
	return h.loaded, nil
}

func (h *pkiHost) renewer() *kubeupgrade.Upgrader {
	return kubeupgrade.New(kubeupgrade.Options{Root: h.root, StateDir: filepath.Join(h.root, "var/lib/fleet-agent"),
		Runner: h, Units: h, Probe: h.fakeHost.serving(""), Serving: h.serving, ReadyTimeout: 3 * time.Second, SettleTime: -1})
}

// A renewal runs kubeadm, restarts every static pod (its manifest marked)
// and ends once the API server serves the renewed certificate; the
// backup and the journal go, and the kubelet is not restarted.
func TestRenewCertificates(t *testing.T) {
	h := newPKIHost(t)
	old := h.loaded
	var steps []string
	if err := h.renewer().RenewCertificates(context.Background(), "n1", func(s string) { steps = append(steps, s) }); err != nil {
		t.Fatal(err)
	}
	if h.loaded.SerialNumber.Cmp(old.SerialNumber) == 0 || h.loaded.SerialNumber.Int64() != h.serial {
		t.Errorf("the API server serves serial %s, want the renewed %d", h.loaded.SerialNumber, h.serial)
	}
	for _, m := range []string{"kube-apiserver.yaml", "etcd.yaml"} {
		got := h.read("etc/kubernetes/manifests/" + m)
		if !strings.Contains(got, kubeupgrade.RenewedAnnotation) {
			t.Errorf("%s not marked for a restart:\n%s", m, got)
		}
	}
	if got := h.read("etc/kubernetes/manifests/etcd.yaml"); !strings.Contains(got, "advertise-client-urls: https://10.0.0.1:2379") {
		t.Errorf("etcd's manifest lost its annotations:\n%s", got)
	}
	want := []string{"backing up the certificates", "kubeadm certs renew all", "restarting the control plane", "waiting for the API server to serve its renewed certificate"}
	if !slices.Equal(steps, want) {
		t.Errorf("steps %q, want %q", steps, want)
	}
	for _, left := range []string{"var/lib/fleet-agent/certificates-renewal.json", "var/lib/fleet-agent/certificates-backup"} {
		if _, err := os.Stat(filepath.Join(h.root, left)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left (%v)", left, err)
		}
	}
	if h.restarts != 0 {
		t.Errorf("the kubelet was restarted %d times", h.restarts)
	}
}

// A renewal that fails after kubeadm changed the certificates puts the
// previous ones back, and waits for the API server to serve them again.
func TestRenewCertificatesRestoredOnFailure(t *testing.T) {
	for _, tc := range []struct {
		name    string
		breakIt func(h *pkiHost)
		step    string
		output  string
	}{
		{"kubeadm fails", func(h *pkiHost) { h.renewFails = true }, "kubeadm certs renew all", "error renewing the certificate for etcd-server"},
		{"the API server does not come back", func(h *pkiHost) { h.stuck = true }, "waiting for the API server to serve its renewed certificate", "connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newPKIHost(t)
			old, oldAdmin := h.read("etc/kubernetes/pki/apiserver.crt"), h.read("etc/kubernetes/admin.conf")
			tc.breakIt(h)
			u := h.renewer()
			var steps []string
			progress := func(s string) {
				steps = append(steps, s)
				if s == "restoring the previous certificates" {
					h.stuck = false
				}
			}
			err := u.RenewCertificates(context.Background(), "n1", progress)
			var uerr *kubeupgrade.Error
			if !errors.As(err, &uerr) || !uerr.RolledBack || uerr.Step != tc.step || !strings.Contains(err.Error(), tc.output) {
				t.Fatalf("RenewCertificates() = %v, want a restored failure at %q", err, tc.step)
			}
			if h.read("etc/kubernetes/pki/apiserver.crt") != old || h.read("etc/kubernetes/admin.conf") != oldAdmin {
				t.Error("the previous certificates are not back")
			}
			if h.loaded.SerialNumber.Int64() != 1 {
				t.Errorf("the API server serves serial %s, want the previous 1", h.loaded.SerialNumber)
			}
			if _, err := os.Stat(filepath.Join(h.root, "var/lib/fleet-agent/certificates-renewal.json")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("journal left: %v", err)
			}
		})
	}
}

// A worker has no control-plane certificates: nothing is touched.
func TestRenewCertificatesOnAWorkerChangesNothing(t *testing.T) {
	h := newPKIHost(t)
	_ = os.Remove(filepath.Join(h.root, "etc/kubernetes/manifests/kube-apiserver.yaml"))
	err := h.renewer().RenewCertificates(context.Background(), "n1", func(string) {})
	if err == nil || !strings.Contains(err.Error(), "runs no control plane") || len(h.ran) != 0 {
		t.Fatalf("RenewCertificates() on a worker = %v, ran %q", err, h.ran)
	}
}

// An agent restarted mid-renewal puts the previous certificates back at
// start, and says so.
func TestInterruptedRenewalRestored(t *testing.T) {
	h := newPKIHost(t)
	old := h.read("etc/kubernetes/pki/apiserver.crt")
	h.stuck = true
	u := kubeupgrade.New(kubeupgrade.Options{Root: h.root, StateDir: filepath.Join(h.root, "var/lib/fleet-agent"),
		Runner: h, Units: h, Probe: h.fakeHost.serving(""), Serving: h.serving, ReadyTimeout: time.Millisecond, SettleTime: -1})
	_ = u.RenewCertificates(context.Background(), "n1", func(string) {})
	if _, err := os.Stat(filepath.Join(h.root, "var/lib/fleet-agent/certificates-renewal.json")); err != nil {
		t.Fatalf("no journal after an unfinished restore: %v", err)
	}
	h.stuck = false
	was, err := h.renewer().InterruptedRenewal(context.Background(), func(string) {})
	var uerr *kubeupgrade.Error
	if !was || !errors.As(err, &uerr) || !uerr.RolledBack || !strings.Contains(err.Error(), "fleet-agent restarted during the certificates' renewal") {
		t.Fatalf("InterruptedRenewal() = %v, %v", was, err)
	}
	if h.read("etc/kubernetes/pki/apiserver.crt") != old {
		t.Error("the previous certificates are not back")
	}
	if was, err := h.renewer().InterruptedRenewal(context.Background(), func(string) {}); was || err != nil {
		t.Errorf("a second InterruptedRenewal() = %v, %v; want nothing left", was, err)
	}
}
