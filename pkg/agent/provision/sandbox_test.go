package provision

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgefleet/fleet/pkg/agent/cloudconfig"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI runs as root; the sandbox tests must run there")
		}
		t.Skip("the sandbox runner needs root")
	}
}

// Absolute paths in a sandboxed command land in the sandbox, and the
// machine's own files are neither changed nor writable.
func TestChrootRunnerConfinesCommands(t *testing.T) {
	requireRoot(t)
	root := t.TempDir()
	r := ChrootRunner{Root: root}
	out, err := r.Run(context.Background(), cloudconfig.Command{Shell: "mkdir -p /run/cluster-api && echo success > /run/cluster-api/probe && cat /run/cluster-api/probe"})
	if err != nil || strings.TrimSpace(string(out)) != "success" {
		t.Fatalf("%q %v", out, err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "run/cluster-api/probe")); err != nil || string(b) != "success\n" {
		t.Fatalf("file not in the sandbox: %q %v", b, err)
	}
	if _, err := os.Stat("/run/cluster-api/probe"); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the command wrote to the machine's /run")
	}
	if _, err := r.Run(context.Background(), cloudconfig.Command{Argv: []string{"touch", "/usr/fleet-sandbox-escape"}}); err == nil {
		t.Fatal("the machine's /usr was writable from the sandbox")
	}
	if _, err := os.Stat("/usr/fleet-sandbox-escape"); err == nil {
		_ = os.Remove("/usr/fleet-sandbox-escape")
		t.Fatal("wrote into the machine's /usr")
	}
	out, err = r.Run(context.Background(), cloudconfig.Command{Argv: []string{"sh", "-c", "echo \"$1\"", "_", "it's quoted"}})
	if err != nil || strings.TrimSpace(string(out)) != "it's quoted" {
		t.Fatalf("argv quoting: %q %v", out, err)
	}
	if out, err := r.Run(context.Background(), cloudconfig.Command{Shell: "echo failing; exit 7"}); err == nil || !strings.Contains(string(out), "failing") {
		t.Fatalf("failure: %q %v", out, err)
	}
}
