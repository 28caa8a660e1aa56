package state

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sync"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/edgefleet/fleet/pkg/agent/atomicfile"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/pki"
)

// Identity is who the hub says this host is.
type Identity struct {
	Hub       string    `json:"hub"`
	Namespace string    `json:"namespace"`
	Host      string    `json:"host"`
	UID       types.UID `json:"uid"`
}

// Applied is what the agent has done: the state that must survive restarts.
type Applied struct {
	// HostUID is the EdgeHost the generation below belongs to. A new
	// identity (re-enrollment, restore) starts its generations afresh.
	HostUID types.UID `json:"hostUID,omitempty"`
	// IdentityUID is the uid in the identity this state was last used
	// with: a new one (re-enrollment) starts the generations afresh, while
	// a new incarnation of the same identity's EdgeHost (a restored hub)
	// moves HostUID alone. "" in state written before it was recorded.
	IdentityUID types.UID `json:"identityUID,omitempty"`
	// Generation is the last desired-state generation acted on.
	Generation int64 `json:"generation"`
	// Workload is what runs on the host; nil when clean.
	Workload *infrav1.HostProvisioningStatus `json:"workload,omitempty"`
	// ProviderID and NodeName of the node on the host.
	ProviderID string `json:"providerID,omitempty"`
	NodeName   string `json:"nodeName,omitempty"`
	// CertificatesExpiryDate of the node's certificates.
	CertificatesExpiryDate *metav1.Time `json:"certificatesExpiryDate,omitempty"`
	// KubernetesVersion is the kubelet's version on a provisioned host.
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// Upgrade is the last in-place upgrade.
	Upgrade *infrav1.HostUpgradeStatus `json:"upgrade,omitempty"`
	// UpgradeGeneration is the desired-state generation that ordered it:
	// a failed order is carried out again only under a new generation.
	UpgradeGeneration int64 `json:"upgradeGeneration,omitempty"`
	// CertificatesRenewBeforeDays is the hub's standing order, kept so
	// that a host cut off from the hub still renews in time.
	CertificatesRenewBeforeDays int32 `json:"certificatesRenewBeforeDays,omitempty"`
	// CertificatesRenewal is the last in-place certificate renewal.
	CertificatesRenewal *infrav1.HostCertificatesRenewalStatus `json:"certificatesRenewal,omitempty"`
	// CertificatesRenewalHeld is a window renewing cannot satisfy (the
	// certificates live shorter): not renewed again until it changes.
	CertificatesRenewalHeld int32 `json:"certificatesRenewalHeld,omitempty"`
}

// DeepCopy returns a copy that shares nothing with a.
func (a Applied) DeepCopy() Applied {
	out := a
	if a.Workload != nil {
		w := *a.Workload
		out.Workload = &w
	}
	out.CertificatesExpiryDate = a.CertificatesExpiryDate.DeepCopy()
	out.Upgrade = a.Upgrade.DeepCopy()
	out.CertificatesRenewal = a.CertificatesRenewal.DeepCopy()
	return out
}

// Store keeps the agent's files. Every write is atomic (write to a
// temporary file, fsync, rename, fsync the directory), so a power cut leaves
// the old or the new file, never half of one; and every file is written
// twice, to its name and to a copy beside it, so a file that the disk
// corrupts later is read from its copy and mended.
type Store struct {
	Dir string
	// Log hears of a corrupt file read from its copy.
	Log logr.Logger
}

// File names in the state directory.
const (
	// FileIdentity is the EdgeHost this host is (namespace, name, UID).
	FileIdentity = "identity.json"
	// FileCA is the pinned hub CA.
	FileCA = "ca.crt"
	// FileCredentials holds the client key and certificate together, so a
	// rotation replaces both in one atomic rename.
	FileCredentials = "client.pem"
	// FileDesired is the last desired state received.
	FileDesired = "desired.json"
	// FileEnrollKey is the key of an enrollment not yet answered: a retry
	// asks for the same key, so the hub can hand back the host it already
	// made instead of making a second one.
	FileEnrollKey = "enroll-key.pem"
	// FileRotationKey is the key of a certificate rotation not yet
	// answered: a retry (after the answer was lost with the session)
	// asks for the same key, the only one the hub lets the replaced
	// certificate ask for.
	FileRotationKey = "rotation-key.pem"
	// FileApplied is what the agent has done (Applied).
	FileApplied = "applied.json"
)

func (s Store) path(name string) string { return filepath.Join(s.Dir, name) }

// copySuffix names the copy of each state file.
const copySuffix = ".copy"

// write replaces name and then its copy: a crash between the two leaves
// the newer in name, which read prefers.
func (s Store) write(name string, data []byte, mode os.FileMode) error {
	defer s.lock()()
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return fmt.Errorf("creating state dir: %w", err)
	}
	if err := atomicfile.Write(s.path(name), data, mode); err != nil {
		return err
	}
	return atomicfile.Write(s.path(name+copySuffix), data, mode)
}

// remove deletes name's copy, then name: a crash between the two leaves
// name, still whole, rather than a copy that read would bring back.
func (s Store) remove(name string) error {
	defer s.lock()()
	for _, p := range []string{s.path(name + copySuffix), s.path(name)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// read returns name's content, which valid must accept: from name, or
// from its copy when name is missing or corrupt. The one that is wrong
// (or missing, as in state written before copies were kept) is mended
// from the other where the disk allows; the read succeeds either way.
// Two valid files that differ (a crash between the two writes) are left
// to the next write.
func (s Store) read(name string, valid func([]byte) error) ([]byte, error) {
	defer s.lock()()
	main, twin := s.path(name), s.path(name+copySuffix)
	b, err := os.ReadFile(main)
	if err == nil {
		err = valid(b)
	}
	c, cerr := os.ReadFile(twin)
	if cerr == nil {
		cerr = valid(c)
	}
	switch {
	case err == nil:
		if cerr != nil {
			s.mend(twin, main, b)
		}
		return b, nil
	case cerr == nil:
		s.Log.Info("A state file is corrupt or missing: reading its copy, and mending it", "file", main, "error", err.Error())
		s.mend(main, twin, c)
		return c, nil
	case errors.Is(err, os.ErrNotExist) && errors.Is(cerr, os.ErrNotExist):
		return nil, err
	case errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("state file %s is missing and its copy is corrupt: %w", main, cerr)
	default:
		return nil, fmt.Errorf("state file %s is corrupt (%w), and so is its copy", main, err)
	}
}

// dirLocks holds a lock per state directory: a read that mends a file
// must not interleave with a write of it.
var dirLocks sync.Map

func (s Store) lock() (unlock func()) {
	mu, _ := dirLocks.LoadOrStore(filepath.Clean(s.Dir), &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	return mu.(*sync.Mutex).Unlock
}

// mend writes data, read from good, to path with good's mode.
func (s Store) mend(path, good string, data []byte) {
	mode := os.FileMode(0o600)
	if fi, err := os.Stat(good); err == nil {
		mode = fi.Mode().Perm()
	}
	if err := atomicfile.Write(path, data, mode); err != nil {
		s.Log.Info("Cannot mend a state file", "file", path, "error", err.Error())
	}
}

func (s Store) writeJSON(name string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return s.write(name, b, 0o600)
}

// validJSON accepts a file that decodes into a value of v's type.
func validJSON(v any) func([]byte) error {
	return func(b []byte) error { return json.Unmarshal(b, reflect.New(reflect.TypeOf(v).Elem()).Interface()) }
}

// validPEM accepts a file holding at least one PEM block and nothing a
// truncation leaves behind.
func validPEM(b []byte) error {
	rest, n := b, 0
	for {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		n++
	}
	if n == 0 || len(bytes.TrimSpace(rest)) > 0 {
		return errors.New("not whole PEM")
	}
	return nil
}

func (s Store) readJSON(name string, v any) (bool, error) {
	b, err := s.read(name, validJSON(v))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return false, fmt.Errorf("state file %s is corrupt: %w", s.path(name), err)
	}
	return true, nil
}

// SaveIdentity stores everything enrollment produced.
func (s Store) SaveIdentity(id Identity, caPEM, keyPEM, certPEM []byte) error {
	if err := s.write(FileCA, caPEM, 0o644); err != nil {
		return err
	}
	if err := s.SaveCredentials(keyPEM, certPEM); err != nil {
		return err
	}
	return s.writeJSON(FileIdentity, id)
}

// SaveCredentials replaces the key and certificate (after a rotation) in
// one atomic write: a crash leaves the old pair or the new, never a mix.
func (s Store) SaveCredentials(keyPEM, certPEM []byte) error {
	return s.write(FileCredentials, append(append([]byte{}, keyPEM...), certPEM...), 0o600)
}

// ErrNotEnrolled is what LoadIdentity returns before enrollment (or after
// the identity was forgotten).
var ErrNotEnrolled = errors.New("this host is not enrolled")

// Credentials is everything enrollment produced: who the host is, the hub
// CA it trusts, and its client key and certificate.
type Credentials struct {
	Identity Identity
	// CAPEM is the pinned hub CA.
	CAPEM []byte
	// ClientPEM holds the client key and certificate together, as stored.
	ClientPEM []byte
}

// TLSCertificate is the client key pair for the session's TLS handshake.
func (c Credentials) TLSCertificate() (tls.Certificate, error) {
	// The one PEM holds both; each parser picks its own blocks.
	pair, err := tls.X509KeyPair(c.ClientPEM, c.ClientPEM)
	if err != nil {
		return pair, fmt.Errorf("stored key and certificate do not match: %w", err)
	}
	return pair, nil
}

// LoadIdentity returns the stored credentials, or ErrNotEnrolled.
func (s Store) LoadIdentity() (Credentials, error) {
	var c Credentials
	found, err := s.readJSON(FileIdentity, &c.Identity)
	if err != nil {
		return c, err
	}
	if !found {
		return c, ErrNotEnrolled
	}
	if c.CAPEM, err = s.read(FileCA, validCA); err != nil {
		return c, fmt.Errorf("reading the hub CA: %w", err)
	}
	if c.ClientPEM, err = s.read(FileCredentials, validKeyPair); err != nil {
		return c, fmt.Errorf("reading the client credentials: %w", err)
	}
	return c, nil
}

// EnrollKey returns the key for enrolling, made and kept on first use
// until ForgetEnrollKey.
func (s Store) EnrollKey() ([]byte, error) {
	if b, err := s.read(FileEnrollKey, validPEM); err == nil {
		return b, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	keyPEM, _, err := pki.NewKeyAndCSR("enroll")
	if err != nil {
		return nil, err
	}
	if err := s.write(FileEnrollKey, keyPEM, 0o600); err != nil {
		return nil, err
	}
	return keyPEM, nil
}

// ForgetEnrollKey removes the enrollment key once it is part of an
// identity (or the identity is gone, and the next enrollment is a new one).
func (s Store) ForgetEnrollKey() error { return s.remove(FileEnrollKey) }

// RotationKey returns the key for the next certificate rotation, made and
// kept on first use until ForgetRotationKey.
func (s Store) RotationKey() ([]byte, error) {
	if b, err := s.read(FileRotationKey, validPEM); err == nil {
		return b, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	keyPEM, _, err := pki.NewKeyAndCSR("rotation")
	if err != nil {
		return nil, err
	}
	if err := s.write(FileRotationKey, keyPEM, 0o600); err != nil {
		return nil, err
	}
	return keyPEM, nil
}

// ForgetRotationKey removes the rotation key once it is the host's
// current key.
func (s Store) ForgetRotationKey() error { return s.remove(FileRotationKey) }

// ForgetIdentity removes the identity after the hub revoked it.
func (s Store) ForgetIdentity() error {
	for _, f := range []string{FileIdentity, FileCredentials, FileEnrollKey, FileRotationKey} {
		if err := s.remove(f); err != nil {
			return err
		}
	}
	return nil
}

// validCA accepts a file holding a certificate.
func validCA(b []byte) error {
	if err := validPEM(b); err != nil {
		return err
	}
	if !x509.NewCertPool().AppendCertsFromPEM(b) {
		return errors.New("no certificate")
	}
	return nil
}

// validKeyPair accepts a key and a certificate that belong together.
func validKeyPair(b []byte) error {
	if err := validPEM(b); err != nil {
		return err
	}
	_, err := tls.X509KeyPair(b, b)
	return err
}

// SaveDesired records the last desired state received.
func (s Store) SaveDesired(d *wire.DesiredState) error { return s.writeJSON(FileDesired, d) }

// LoadDesired returns the last desired state received before a restart
// (nil if none, or if the file cannot be read: it is a record, and only
// spares work when it matches what the hub sends).
func (s Store) LoadDesired() *wire.DesiredState {
	d := &wire.DesiredState{}
	if ok, err := s.readJSON(FileDesired, d); !ok || err != nil {
		return nil
	}
	return d
}

// SaveApplied records what the agent has done.
func (s Store) SaveApplied(a Applied) error { return s.writeJSON(FileApplied, a) }

// LoadApplied returns what the agent had done before a restart.
func (s Store) LoadApplied() (Applied, error) {
	var a Applied
	_, err := s.readJSON(FileApplied, &a)
	return a, err
}
