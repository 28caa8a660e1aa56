package state

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// The enrollment key survives failed attempts (a retry asks the hub for the
// same key, so a lost answer does not make a second EdgeHost) and is gone
// once it is part of an identity.
func TestEnrollKeyIsKeptUntilEnrolled(t *testing.T) {
	s := Store{Dir: t.TempDir()}
	k1, err := s.EnrollKey()
	if err != nil {
		t.Fatal(err)
	}
	k2, err := s.EnrollKey()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(k1, k2) {
		t.Fatal("a second attempt got another key")
	}
	fi, err := os.Stat(filepath.Join(s.Dir, FileEnrollKey))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("enrollment key file mode %v, want 0600", fi.Mode())
	}
	if err := s.ForgetEnrollKey(); err != nil {
		t.Fatal(err)
	}
	k3, err := s.EnrollKey()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(k1, k3) {
		t.Fatal("a new enrollment reused the old key")
	}
}

// The rotation key survives a lost answer and a restart (a retry asks for
// the same key, the only one the replaced certificate may still ask for)
// and is gone once it is the current key, or the identity is.
func TestRotationKeyIsKeptUntilAnswered(t *testing.T) {
	s := Store{Dir: t.TempDir()}
	k1, err := s.RotationKey()
	if err != nil {
		t.Fatal(err)
	}
	if k2, err := (Store{Dir: s.Dir}).RotationKey(); err != nil || !bytes.Equal(k1, k2) {
		t.Fatalf("a retry got another key (%v)", err)
	}
	if fi, err := os.Stat(filepath.Join(s.Dir, FileRotationKey)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("rotation key file: %v %v", fi, err)
	}
	if err := s.ForgetRotationKey(); err != nil {
		t.Fatal(err)
	}
	if k3, err := s.RotationKey(); err != nil || bytes.Equal(k1, k3) {
		t.Fatalf("the next rotation reused the answered key (%v)", err)
	}
	if err := s.ForgetIdentity(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(s.Dir, FileRotationKey)); !os.IsNotExist(err) {
		t.Fatalf("the rotation key outlived the identity: %v", err)
	}
}
