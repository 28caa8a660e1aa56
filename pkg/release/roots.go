package release

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"os"
	"strings"
)

// RootsFile is where the edge image and the packages put the root keys.
const RootsFile = "/usr/share/fleet-agent/release-roots"

// rootPrefix starts each line of a roots file:
//
//	fleet-release-root <key ID> <base64 public key> [comment]
const rootPrefix = "fleet-release-root"

// Roots are the root keys an agent trusts.
type Roots []ed25519.PublicKey

func (r Roots) find(id string) (ed25519.PublicKey, bool) {
	for _, k := range r {
		if KeyID(k) == id {
			return k, true
		}
	}
	return nil, false
}

func (r Roots) String() string {
	if len(r) == 0 {
		return "none"
	}
	ids := make([]string, len(r))
	for i, k := range r {
		ids[i] = KeyID(k)
	}
	return strings.Join(ids, ", ")
}

// RootLine is the roots-file line of pub.
func RootLine(pub ed25519.PublicKey, comment string) string {
	line := fmt.Sprintf("%s %s %s", rootPrefix, KeyID(pub), base64.StdEncoding.EncodeToString(pub))
	if comment != "" {
		line += " " + comment
	}
	return line
}

// ParseRoots reads a roots file: one key per line, # comments and blank
// lines ignored. A line whose key ID does not match its key is refused.
func ParseRoots(b []byte) (Roots, error) {
	var out Roots
	s := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; s.Scan(); n++ {
		line := strings.TrimSpace(s.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != rootPrefix {
			return nil, fmt.Errorf("line %d: want %q <key ID> <base64 public key> [comment]", n, rootPrefix)
		}
		pub, err := base64.StdEncoding.DecodeString(f[2])
		if err != nil || len(pub) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("line %d: not an Ed25519 public key", n)
		}
		if KeyID(pub) != f[1] {
			return nil, fmt.Errorf("line %d: key ID %s does not match its key (%s)", n, f[1], KeyID(pub))
		}
		out = append(out, pub)
	}
	if len(out) == 0 {
		return nil, errNoRoots
	}
	return out, s.Err()
}

// LoadRoots reads the roots file at path.
func LoadRoots(path string) (Roots, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the release root keys: %w", err)
	}
	r, err := ParseRoots(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}
