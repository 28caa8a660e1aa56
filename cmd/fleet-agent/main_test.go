package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Bad settings are refused with words an operator can act on, and flags
// override the config file.
func TestRunValidatesConfig(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte("hub: http://plain.example\ncaCertHash: sha256:abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := run([]string{"--config", cfg})
	if err == nil || !strings.Contains(err.Error(), "must be an https:// URL") || !strings.Contains(err.Error(), "--ca-cert-hash is required") {
		t.Fatalf("config file errors: %v", err)
	}
	// Flags win over the file: with both fixed, only the enrollment (to a
	// hub that is not there) can fail.
	err = run([]string{"enroll", "--config", cfg, "--hub", "https://127.0.0.1:1", "--token", "abcdef.0123456789abcdef",
		"--ca-cert-hash", "sha256:" + strings.Repeat("0", 64), "--state-dir", dir})
	if err == nil || !strings.Contains(err.Error(), "fetching hub CA") {
		t.Fatalf("enroll against no hub: %v", err)
	}
	if err := os.WriteFile(cfg, []byte("hub: https://x\nbogus: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"--config", cfg}); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("unknown config key: %v", err)
	}
}
