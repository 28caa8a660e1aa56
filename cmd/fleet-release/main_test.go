package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func run(t *testing.T, args ...string) error {
	t.Helper()
	cmd := newRootCommand()
	cmd.SetArgs(args)
	return cmd.Execute()
}

// The release pipeline as docs/AGENT-RELEASES.md runs it: a root, a
// signing key it certifies, a signed binary that verifies against the
// root's line and not against another root's.
func TestKeygenCertifySignVerify(t *testing.T) {
	d := t.TempDir()
	p := func(name string) string { return filepath.Join(d, name) }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(run(t, "keygen", "--out", p("root"), "--comment", "test root"))
	must(run(t, "keygen", "--out", p("signing")))
	must(run(t, "keygen", "--out", p("other-root")))
	if err := run(t, "keygen", "--out", p("root")); err == nil {
		t.Error("keygen overwrote a key")
	}
	if fi, err := os.Stat(p("root.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("root.key: %v %v", fi, err)
	}
	must(run(t, "certify", "--root-key", p("root.key"), "--public-key", p("signing.pub"), "--out", p("signing.cert")))
	must(os.WriteFile(p("fleet-agent"), []byte("a fleet-agent binary"), 0o755))
	must(run(t, "sign", "--key", p("signing.key"), "--cert", p("signing.cert"), "--binary", p("fleet-agent"),
		"--version", "v0.5.0", "--os", "linux", "--arch", "amd64", "--out", p("fleet-agent.bundle")))
	verify := func(roots string, extra ...string) error {
		return run(t, append([]string{"verify", "--roots", roots, "--bundle", p("fleet-agent.bundle"), "--binary", p("fleet-agent"),
			"--os", "linux", "--arch", "amd64"}, extra...)...)
	}
	must(verify(p("root.pub")))
	if err := verify(p("other-root.pub")); err == nil || !strings.Contains(err.Error(), "which this host does not hold") {
		t.Errorf("verified against another root: %v", err)
	}
	if err := verify(p("root.pub"), "--floor", "v0.6.0"); err == nil || !strings.Contains(err.Error(), "below v0.6.0") {
		t.Errorf("verified below the floor: %v", err)
	}
	if err := run(t, "sign", "--key", p("root.key"), "--cert", p("signing.cert"), "--binary", p("fleet-agent"),
		"--version", "v0.5.0", "--out", p("x.bundle")); err == nil || !strings.Contains(err.Error(), "not for this key") {
		t.Errorf("signed with the root key and the signing key's certificate: %v", err)
	}
}

// manifest turns bundles into the EdgeAgentRelease a hub serves.
func TestManifest(t *testing.T) {
	d := t.TempDir()
	p := func(name string) string { return filepath.Join(d, name) }
	for _, args := range [][]string{{"keygen", "--out", p("root")}, {"keygen", "--out", p("signing")},
		{"certify", "--root-key", p("root.key"), "--public-key", p("signing.pub"), "--out", p("signing.cert")}} {
		if err := run(t, args...); err != nil {
			t.Fatal(err)
		}
	}
	for _, arch := range []string{"amd64", "arm64"} {
		if err := os.WriteFile(p("fleet-agent-"+arch), []byte("binary for "+arch), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := run(t, "sign", "--key", p("signing.key"), "--cert", p("signing.cert"), "--binary", p("fleet-agent-"+arch),
			"--version", "v0.9.2", "--os", "linux", "--arch", arch, "--out", p(arch+".bundle")); err != nil {
			t.Fatal(err)
		}
	}
	var out strings.Builder
	cmd := newRootCommand()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"manifest", "-n", "stores", "--bundle", p("amd64.bundle"), "--url", "https://r.example/amd64",
		"--bundle", p("arm64.bundle"), "--url", "https://r.example/arm64"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kind: EdgeAgentRelease", "name: fleet-agent-v0-9-2", "namespace: stores", "version: v0.9.2",
		"arch: amd64", "arch: arm64", "url: https://r.example/arm64"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("manifest lacks %q:\n%s", want, out.String())
		}
	}
	if err := run(t, "manifest", "--bundle", p("amd64.bundle")); err == nil || !strings.Contains(err.Error(), "one --url per --bundle") {
		t.Errorf("a bundle without its url: %v", err)
	}
}
