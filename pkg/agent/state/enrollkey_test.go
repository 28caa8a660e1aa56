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
