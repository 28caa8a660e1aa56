package kubeupgrade

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/edgefleet/fleet/pkg/agent/atomicfile"
)

// What a certificate renewal changes and a rollback restores.
const (
	pkiDir = "/etc/kubernetes/pki"
	// servingCert is the API server's certificate: the one the renewal
	// waits to see served.
	servingCert    = "/etc/kubernetes/pki/apiserver.crt"
	renewalJournal = "certificates-renewal.json"
	renewalBackup  = "certificates-backup"
	// RenewedAnnotation marks each static pod's manifest with the time of
	// the renewal, so the kubelet replaces the pod and it reads the new
	// certificates.
	RenewedAnnotation = "fleet.edgefleet.io/certificates-renewed"
)

// controlPlaneKubeconfigs are the kubeconfigs `kubeadm certs renew all`
// renews (the kubelet rotates its own).
var controlPlaneKubeconfigs = []string{"admin.conf", "super-admin.conf", "controller-manager.conf", "scheduler.conf"}

// renewal is a certificate renewal in progress, on disk before every
// step.
type renewal struct {
	Step     string `json:"step"`
	NodeName string `json:"nodeName"`
	Version  string `json:"version"`
	// Changed: kubeadm has started changing the certificates.
	Changed bool `json:"changed"`
}

// RenewCertificates renews a control plane's certificates in place: it
// backs up the PKI, the control plane's kubeconfigs and the static-pod
// manifests, runs `kubeadm certs renew all`, restarts the static pods, and
// waits until the API server serves its renewed certificate and the
// kubelet, the API server and the Node are healthy. A failure after the
// host was changed puts the backup back. A returned *Error says whether
// it was.
func (u *Upgrader) RenewCertificates(ctx context.Context, nodeName string, progress func(step string)) error {
	if !u.exists(path.Join(manifestsDir, "kube-apiserver.yaml")) {
		return &Error{Step: "checking", Err: errors.New("this host runs no control plane: its certificates are the kubelet's, which rotate on their own")}
	}
	version, err := u.Running(ctx)
	if err != nil {
		return &Error{Step: "checking", Err: err}
	}
	r := &renewal{NodeName: nodeName, Version: version}
	step := func(name string) error {
		r.Step = name
		progress(name)
		return u.saveRenewal(r)
	}
	fail := func(err error) error {
		if !r.Changed {
			_ = u.clearRenewal()
			return &Error{Step: r.Step, Err: err}
		}
		return u.restoreCertificates(ctx, r, err, progress)
	}
	if err := step("backing up the certificates"); err != nil {
		return &Error{Step: r.Step, Err: fmt.Errorf("recording the renewal's start: %w", err)}
	}
	if err := u.backUpCertificates(); err != nil {
		return fail(err)
	}
	r.Changed = true
	if err := step("kubeadm certs renew all"); err != nil {
		return fail(err)
	}
	if err := u.run(ctx, []string{path.Join(u.opts.BinDir, "kubeadm"), "certs", "renew", "all"}); err != nil {
		return fail(err)
	}
	want, err := u.readCertificate(servingCert)
	if err != nil {
		return fail(err)
	}
	if err := step("restarting the control plane"); err != nil {
		return fail(err)
	}
	if err := u.markManifests(time.Now()); err != nil {
		return fail(err)
	}
	if err := step("waiting for the API server to serve its renewed certificate"); err != nil {
		return fail(err)
	}
	if err := u.waitRenewed(ctx, r, want); err != nil {
		return fail(err)
	}
	u.log(fmt.Sprintf("Renewed the control plane's certificates; the API server's now expires %s", want.NotAfter.UTC().Format(time.RFC3339)))
	return u.clearRenewal()
}

// InterruptedRenewal rolls back a renewal a restart cut short (one that had
// not changed the host is dropped); false when there was none.
func (u *Upgrader) InterruptedRenewal(ctx context.Context, progress func(step string)) (bool, error) {
	r, err := u.loadRenewal()
	if err != nil || r == nil {
		return false, err
	}
	cause := fmt.Errorf("fleet-agent restarted during the certificates' renewal, at step %q", r.Step)
	if !r.Changed {
		return true, &Error{Step: r.Step, Err: cause, Rollback: u.clearRenewal()}
	}
	return true, u.restoreCertificates(ctx, r, cause, progress)
}

// restoreCertificates puts the backup back and restarts the static pods
// on it; the journal goes only once the host serves again.
func (u *Upgrader) restoreCertificates(ctx context.Context, r *renewal, cause error, progress func(string)) error {
	failed := &Error{Step: r.Step, Err: cause, RolledBack: true}
	progress("restoring the previous certificates")
	u.log(fmt.Sprintf("Certificate renewal failed at %q; restoring the previous certificates: %v", r.Step, cause))
	dir := filepath.Join(u.opts.StateDir, renewalBackup)
	err := copyTree(filepath.Join(dir, "pki"), u.host(pkiDir))
	for _, name := range controlPlaneKubeconfigs {
		if err == nil {
			err = copyIfExists(filepath.Join(dir, "kubeconfigs", name), u.host(path.Join("/etc/kubernetes", name)))
		}
	}
	if err == nil {
		err = copyTree(filepath.Join(dir, "manifests"), u.host(manifestsDir))
	}
	if err == nil {
		// Marked afresh: the restored manifests may equal what the
		// kubelet runs, which would then keep the renewed certificates.
		err = u.markManifests(time.Now())
	}
	if err != nil {
		failed.RolledBack, failed.Rollback = false, err
		return failed
	}
	want, err := u.readCertificate(servingCert)
	if err == nil {
		err = u.waitRenewed(ctx, r, want)
	}
	if err != nil {
		failed.RolledBack, failed.Rollback = false, fmt.Errorf("the control plane does not serve on the previous certificates: %w", err)
		return failed
	}
	if err := u.clearRenewal(); err != nil {
		failed.Rollback = err
	}
	return failed
}

// backUpCertificates copies the PKI, the kubeconfigs and the manifests,
// fresh each time.
func (u *Upgrader) backUpCertificates() error {
	dir := filepath.Join(u.opts.StateDir, renewalBackup)
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := copyTree(u.host(pkiDir), filepath.Join(dir, "pki")); err != nil {
		return fmt.Errorf("backing up %s: %w", pkiDir, err)
	}
	for _, name := range controlPlaneKubeconfigs {
		if err := copyIfExists(u.host(path.Join("/etc/kubernetes", name)), filepath.Join(dir, "kubeconfigs", name)); err != nil {
			return fmt.Errorf("backing up %s: %w", name, err)
		}
	}
	if err := copyTree(u.host(manifestsDir), filepath.Join(dir, "manifests")); err != nil {
		return fmt.Errorf("backing up %s: %w", manifestsDir, err)
	}
	return nil
}

// markManifests sets RenewedAnnotation on every static pod's manifest:
// the kubelet replaces each pod whose manifest changed.
func (u *Upgrader) markManifests(at time.Time) error {
	entries, err := os.ReadDir(u.host(manifestsDir))
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || filepath.Ext(e.Name()) != ".yaml" {
			continue
		}
		p := u.host(path.Join(manifestsDir, e.Name()))
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var pod map[string]any
		if err := yaml.Unmarshal(b, &pod); err != nil {
			return fmt.Errorf("reading %s: %w", e.Name(), err)
		}
		meta, _ := pod["metadata"].(map[string]any)
		if meta == nil {
			meta = map[string]any{}
			pod["metadata"] = meta
		}
		annotations, _ := meta["annotations"].(map[string]any)
		if annotations == nil {
			annotations = map[string]any{}
			meta["annotations"] = annotations
		}
		annotations[RenewedAnnotation] = at.UTC().Format(time.RFC3339Nano)
		out, err := yaml.Marshal(pod)
		if err != nil {
			return err
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		if err := atomicfile.Write(p, out, info.Mode().Perm()); err != nil {
			return fmt.Errorf("writing %s: %w", e.Name(), err)
		}
	}
	return nil
}

// waitRenewed polls until the API server serves want and the host is
// healthy on its version, or ReadyTimeout.
func (u *Upgrader) waitRenewed(ctx context.Context, r *renewal, want *x509.Certificate) error {
	ctx, cancel := context.WithTimeout(ctx, u.opts.ReadyTimeout)
	defer cancel()
	var last error
	for {
		served, err := u.opts.Serving(ctx)
		switch {
		case err != nil:
			last = fmt.Errorf("the API server: %w", err)
		case !bytes.Equal(served.Raw, want.Raw):
			last = fmt.Errorf("the API server still serves its certificate of serial %s, not the renewed one (%s)", served.SerialNumber, want.SerialNumber)
		default:
			last = u.opts.Probe(ctx, r.Version, r.NodeName, true)
		}
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not serving after %s: %w", u.opts.ReadyTimeout, last)
		case <-time.After(2 * time.Second):
		}
	}
}

func (u *Upgrader) readCertificate(p string) (*x509.Certificate, error) {
	b, err := os.ReadFile(u.host(p))
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, fmt.Errorf("%s holds no PEM certificate", p)
	}
	return x509.ParseCertificate(block.Bytes)
}

func (u *Upgrader) saveRenewal(r *renewal) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(u.opts.StateDir, 0o700); err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(u.opts.StateDir, renewalJournal), b, 0o600)
}

func (u *Upgrader) loadRenewal() (*renewal, error) {
	b, err := os.ReadFile(filepath.Join(u.opts.StateDir, renewalJournal))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	r := &renewal{}
	if err := json.Unmarshal(b, r); err != nil {
		return nil, fmt.Errorf("reading the renewal journal: %w", err)
	}
	return r, nil
}

// clearRenewal ends a renewal: the journal and the backup go.
func (u *Upgrader) clearRenewal() error {
	err := os.RemoveAll(filepath.Join(u.opts.StateDir, renewalBackup))
	if rerr := os.Remove(filepath.Join(u.opts.StateDir, renewalJournal)); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
		err = errors.Join(err, rerr)
	}
	return err
}

// copyTree copies the regular files under src to dst, keeping their
// relative paths and permissions.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		return copyFile(p, filepath.Join(dst, rel))
	})
}

func copyIfExists(src, dst string) error {
	if err := copyFile(src, dst); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
