package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/edgefleet/fleet/pkg/pki"
)

// site is an edge site behind NAT: a network namespace of its own, with a
// LAN address (siteAddr on a bridge) and no route out. The only way out is
// an outbound-only forwarder to the hub's gateway, like a NAT router that
// lets agents dial home and nothing dial in.
type site struct {
	name string
	path string // /run/netns/<name>
}

const siteAddr = "10.99.0.1"

func newSite(t *testing.T) *site {
	t.Helper()
	s := &site{name: fmt.Sprintf("fleet-e2e-%d", os.Getpid()%100000)}
	s.path = "/run/netns/" + s.name
	_ = exec.Command("ip", "netns", "del", s.name).Run()
	for _, args := range [][]string{
		{"netns", "add", s.name},
		{"-n", s.name, "link", "set", "lo", "up"},
		{"-n", s.name, "link", "add", "site0", "type", "bridge"},
		{"-n", s.name, "addr", "add", siteAddr + "/24", "dev", "site0"},
		{"-n", s.name, "link", "set", "site0", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", s.name).Run() })
	return s
}

// command runs name inside the site.
func (s *site) command(name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--net=" + s.path, "--", name}, args...)...)
}

// inside runs fn on a thread that has entered the site's namespace;
// sockets fn makes stay there.
func (s *site) inside(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// The thread is not unlocked if it could not be put back: it then
		// dies with this goroutine instead of serving others in the site.
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		target, err := os.Open(s.path)
		if err != nil {
			errc <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), syscall.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("entering %s: %w", s.path, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(int(orig.Fd()), syscall.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("leaving %s: %w", s.path, err)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// forward listens on addr inside the site and carries each connection to
// target outside: the site's NAT router, outbound only.
func (s *site) forward(t *testing.T, addr, target string) {
	t.Helper()
	var ln net.Listener
	must(t, s.inside(func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	}))
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, c); _ = up.(*net.TCPConn).CloseWrite() }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
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
