package localkube

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func binDir(t *testing.T) string {
	t.Helper()
	d := os.Getenv("KUBEBUILDER_ASSETS")
	if d == "" {
		d = filepath.Join("..", "..", "..", "..", "bin", "k8s")
	}
	if _, err := os.Stat(filepath.Join(d, "kube-apiserver")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no kube-apiserver in %s", d)
		}
		t.Skipf("no kube-apiserver in %s: run make k8s", d)
	}
	return d
}

func TestNames(t *testing.T) {
	cl := []byte("etcd\x00--data-dir=/x/etcd\x00--other=/x/etcd2/y")
	for path, want := range map[string]bool{"/x/etcd": true, "/x/etcd2": true, "/x/et": false, "/x/etcd2/y": true, "/y": false} {
		if got := names(cl, []byte(path)); got != want {
			t.Errorf("names(%q) = %v, want %v", path, got, want)
		}
	}
}

// Data written before a stop is there after the next start; the
// kubeconfig works each time; a second Start on the same directory is
// refused while the first runs; no process is left after Stop; and a
// run killed outright has its etcd and API server stopped by the next.
func TestRestartKeepsDataAndLeavesNothing(t *testing.T) {
	bins := binDir(t)
	dir := t.TempDir()
	ctx := context.Background()

	s, err := Start(Options{Dir: dir, BinDir: bins})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Start(Options{Dir: dir, BinDir: bins}); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("second Start on the same directory: %v, want an 'in use' error", err)
	}
	c := clientFor(t, s.Kubeconfig)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kept", Namespace: "default"}, Data: map[string]string{"k": "v"}}
	if err := c.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if pids, _ := Processes(dir); len(pids) != 0 {
		t.Fatalf("processes left after Stop: %v", pids)
	}

	s, err = Start(Options{Dir: dir, BinDir: bins})
	if err != nil {
		t.Fatal(err)
	}
	c = clientFor(t, s.Kubeconfig)
	got := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(cm), got); err != nil || got.Data["k"] != "v" {
		t.Fatalf("after restart: %v %v", err, got.Data)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}

	// A run killed with SIGKILL leaves etcd and the API server (they run in
	// their own process groups); the next Start stops them.
	helper := exec.Command(os.Args[0], "-test.run=^TestHelperStartAndHang$")
	helper.Env = append(os.Environ(), "LOCALKUBE_HELPER_DIR="+dir, "LOCALKUBE_HELPER_BINS="+bins)
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, _ := out.Read(buf) // "started\n" once the server is up
	if !strings.Contains(string(buf[:n]), "started") {
		_ = helper.Process.Kill()
		t.Fatalf("helper did not start a server: %q", buf[:n])
	}
	_ = helper.Process.Kill()
	_ = helper.Wait()
	if pids, _ := Processes(dir); len(pids) == 0 {
		t.Fatal("expected etcd and kube-apiserver to outlive a killed parent (the case this guards against)")
	}
	s, err = Start(Options{Dir: dir, BinDir: bins})
	if err != nil {
		t.Fatalf("start after a killed run: %v", err)
	}
	if err := clientFor(t, s.Kubeconfig).Get(ctx, client.ObjectKeyFromObject(cm), got); err != nil {
		t.Errorf("data after a killed run: %v", err)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids, _ := Processes(dir)
		if len(pids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes left: %v", pids)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestHelperStartAndHang is run as a child process by the test above.
func TestHelperStartAndHang(t *testing.T) {
	dir := os.Getenv("LOCALKUBE_HELPER_DIR")
	if dir == "" {
		t.Skip("helper process only")
	}
	if _, err := Start(Options{Dir: dir, BinDir: os.Getenv("LOCALKUBE_HELPER_BINS")}); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("started\n")
	select {}
}

func clientFor(t *testing.T, kubeconfig string) client.Client {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
