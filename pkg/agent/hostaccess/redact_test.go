package hostaccess

import (
	"strings"
	"testing"
)

func TestRedactorRemovesSecrets(t *testing.T) {
	in := `kubeadm join edge.fleet.internal:6443 --token abcdef.0123456789abcdef \
	--discovery-token-ca-cert-hash sha256:0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9 \
	--control-plane --certificate-key 6d1c4c8f1b9a2e3d4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e
token: "qwerty.0123456789uiopas"
  password=hunter2
client-key-data: LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0tCk1JSUV2
Authorization: Bearer eyJhbGciOiJSUzI1NiJ9.payload.sig
echo joining; kubeadm join x:6443 --token zyxwvu.9876543210zyxwvu; exit 3
-----BEGIN RSA PRIVATE KEY-----
MIIEowIBAAKCAQEA1c2V0aGluZw
c2VjcmV0
-----END RSA PRIVATE KEY-----
after the key`
	var r Redactor
	var out []string
	for _, l := range strings.Split(in, "\n") {
		out = append(out, string(r.Line([]byte(l))))
	}
	got := strings.Join(out, "\n")
	for _, secret := range []string{"abcdef.0123456789abcdef", "6d1c4c8f1b9a", "qwerty.0123456789uiopas", "hunter2",
		"LS0tLS1CRUdJTiBQUklWQVRF", "eyJhbGciOiJSUzI1NiJ9", "zyxwvu.9876543210zyxwvu", "MIIEowIBAAKCAQEA1c2V0aGluZw", "c2VjcmV0"} {
		if strings.Contains(got, secret) {
			t.Errorf("secret %q left in:\n%s", secret, got)
		}
	}
	for _, kept := range []string{"kubeadm join edge.fleet.internal:6443 --token " + Redacted, "sha256:0a1b2c3d4e5f6071",
		"-----BEGIN RSA PRIVATE KEY-----", "-----END RSA PRIVATE KEY-----", "after the key", "--certificate-key " + Redacted,
		"echo joining; kubeadm join x:6443 --token " + Redacted + "; exit 3"} {
		if !strings.Contains(got, kept) {
			t.Errorf("%q missing from:\n%s", kept, got)
		}
	}
}
