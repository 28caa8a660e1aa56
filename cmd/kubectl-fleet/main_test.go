package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// deadKubeconfig points at an API server that refuses connections.
const deadKubeconfig = `apiVersion: v1
kind: Config
clusters:
- {name: dead, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}
users:
- {name: u, user: {token: x}}
contexts:
- {name: dead, context: {cluster: dead, user: u}}
current-context: dead
`

// The built binary refuses bad input and an unreachable API server with
// exit status 1 and one line on stderr: client-go's klog lines do not
// surround it.
func TestRefusalsExitOneLine(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "kubectl-fleet")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte(deadKubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"get", "hosts"}, `error: Get "https://127.0.0.1:1/apis/infrastructure.cluster.x-k8s.io/v1alpha1/namespaces/default/edgehosts?limit=500": dial tcp 127.0.0.1:1: connect: connection refused`},
		{[]string{"get", "hosts", "-w"}, `error: Get "https://127.0.0.1:1/apis/`},
		{[]string{"create", "clusters"}, `error: unknown command "clusters" for "kubectl fleet create"`},
		{[]string{"scale", "cluster"}, "error: kubectl fleet scale cluster takes NAME"},
	} {
		cmd := exec.Command(bin, append([]string{"--kubeconfig", kc}, tc.args...)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 || stdout.Len() != 0 ||
			strings.Count(stderr.String(), "\n") != 1 || !strings.HasPrefix(stderr.String(), tc.want) {
			t.Errorf("kubectl fleet %s: %v\nstdout %q\nstderr %q\nwant one line starting %q", strings.Join(tc.args, " "), err, stdout.String(), stderr.String(), tc.want)
		}
	}
}
