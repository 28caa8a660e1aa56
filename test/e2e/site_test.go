package e2e

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/edgefleet/fleet/internal/testkit/testhost"
	"github.com/edgefleet/fleet/pkg/pki"
)

// site is an edge site behind NAT (testhost.Site): a network namespace
// with a LAN address (siteAddr on a bridge) and no route out; the only way
// out is an outbound-only forwarder to the hub's gateway.
type site struct{ *testhost.Site }

const siteAddr = "10.99.0.1"

func newSite(t *testing.T) *site {
	t.Helper()
	s, err := testhost.NewSite(fmt.Sprintf("fleet-e2e-%d", os.Getpid()%100000), "10.99.0")
	must(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return &site{s}
}

// command runs name inside the site.
func (s *site) command(name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--net=" + s.Path(), "--", name}, args...)...)
}

// forward carries connections to addr inside the site to target outside.
func (s *site) forward(t *testing.T, addr, target string) {
	t.Helper()
	_, err := s.Forward(addr, target)
	must(t, err)
}

// siteAPIServer is the edge cluster's API server, running in the site.
type siteAPIServer struct {
	cmd        *exec.Cmd
	kubeconfig []byte
	log        *syncBuffer
}

// startSiteAPIServer starts etcd and kube-apiserver inside the site on
// port, serving a certificate for name, and returns its kubeconfig (server
// https://name:port).
// With ca (nil: its own), the server uses that CA for its serving
// certificate and for client certificates, as a kubeadm cluster does.
func startSiteAPIServer(t *testing.T, s *site, name string, port int, ca *pki.CA) *siteAPIServer {
	t.Helper()
	dir := t.TempDir()
	bin := build(t, dir, "./test/siteapiserver", "siteapiserver")
	root, err := filepath.Abs(filepath.Join("..", ".."))
	must(t, err)
	kcPath := filepath.Join(dir, "kubeconfig")
	a := &siteAPIServer{log: &syncBuffer{}}
	args := []string{"--dir", filepath.Join(dir, "data"), "--bin-dir", filepath.Join(root, "bin", "k8s"),
		"--port", fmt.Sprint(port), "--name", name, "--advertise-address", siteAddr, "--kubeconfig-out", kcPath}
	if ca != nil {
		certPath, keyPath := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
		must(t, os.WriteFile(certPath, ca.CertPEM, 0o600))
		must(t, os.WriteFile(keyPath, ca.KeyPEM, 0o600))
		args = append(args, "--ca-cert", certPath, "--ca-key", keyPath)
	}
	a.cmd = s.command(bin, args...)
	stdout, err := a.cmd.StdoutPipe()
	must(t, err)
	a.cmd.Stderr = a.log
	must(t, a.cmd.Start())
	t.Cleanup(func() {
		_ = a.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = a.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = a.cmd.Process.Kill()
		}
		if t.Failed() {
			t.Logf("--- site API server log ---\n%s", tail(a.log.String(), 3000))
		}
	})
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "ready" {
				ready <- nil
				_, _ = io.Copy(io.Discard, stdout)
				return
			}
		}
		ready <- fmt.Errorf("site API server exited before it was ready")
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatalf("%v\n%s", err, tail(a.log.String(), 3000))
		}
	case <-time.After(3 * time.Minute):
		t.Fatalf("site API server not ready after 3m\n%s", tail(a.log.String(), 3000))
	}
	a.kubeconfig, err = os.ReadFile(kcPath)
	must(t, err)
	return a
}

// unreachable checks that nothing outside the site can talk to the API
// server: not at the site's LAN address, not on this namespace's loopback
// at its port, not by its endpoint name. Each try is a real request with
// the cluster's credentials and TLS verification against the endpoint
// name, so it would succeed against the real server; a bare TCP answer
// proves nothing (some sandboxes answer any outbound connection).
func unreachable(kubeconfig []byte, serverName string, addrs ...string) error {
	for _, a := range addrs {
		cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
		if err != nil {
			return err
		}
		cfg.Host = "https://" + a
		cfg.TLSClientConfig.ServerName = serverName
		cfg.Timeout = 5 * time.Second
		dc, err := discovery.NewDiscoveryClientForConfig(cfg)
		if err != nil {
			return err
		}
		if v, err := dc.ServerVersion(); err == nil {
			return fmt.Errorf("the workload API server (%s) answers at %s from outside the site", v.GitVersion, a)
		}
	}
	return nil
}
