package units

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

func TestPlanFor(t *testing.T) {
	for _, tc := range []struct {
		written []string
		want    Plan
	}{
		{nil, Plan{}},
		{[]string{"/etc/kubernetes/pki/ca.crt", "/run/kubeadm/kubeadm.yaml"}, Plan{}},
		{[]string{"/etc/containerd/config.toml"}, Plan{Units: []string{"containerd.service"}}},
		{[]string{"/etc/systemd/system/kubelet.service.d/10-fleet.conf", "/etc/containerd/certs.d/x/hosts.toml"},
			Plan{Reload: true, Units: []string{"containerd.service", "kubelet.service"}}},
		{[]string{"/etc/default/kubelet"}, Plan{Units: []string{"kubelet.service"}}},
		{[]string{"/etc/default/kubelet-extra", "/etc/containerd/../hosts"}, Plan{}},
		{[]string{"/etc/systemd/timesyncd.conf.d/fleet-ntp.conf"}, Plan{Reload: true}},
	} {
		if got := PlanFor(tc.written); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("PlanFor(%v) = %+v, want %+v", tc.written, got, tc.want)
		}
	}
}

// fakeSystemd answers the part of org.freedesktop.systemd1.Manager that
// Apply uses, on a private bus, and emits JobRemoved like systemd.
type fakeSystemd struct {
	conn   *dbus.Conn
	loaded map[string]string // unit -> job result
	mu     sync.Mutex
	calls  []string
	jobs   uint32
}

type unitStatus struct {
	Name, Description, LoadState, ActiveState, SubState, Followed string
	Path                                                          dbus.ObjectPath
	JobID                                                         uint32
	JobType                                                       string
	JobPath                                                       dbus.ObjectPath
}

func (f *fakeSystemd) record(c string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, c)
}

func (f *fakeSystemd) Reload() *dbus.Error {
	f.record("Reload")
	return nil
}

func (f *fakeSystemd) ListUnitsByNames(names []string) ([]unitStatus, *dbus.Error) {
	var out []unitStatus
	for _, n := range names {
		s := unitStatus{Name: n, LoadState: "not-found", ActiveState: "inactive", SubState: "dead", Path: "/org/freedesktop/systemd1/unit/x", JobPath: "/"}
		if _, ok := f.loaded[n]; ok {
			s.LoadState, s.ActiveState, s.SubState = "loaded", "active", "running"
		}
		out = append(out, s)
	}
	return out, nil
}

func (f *fakeSystemd) RestartUnit(name, mode string) (dbus.ObjectPath, *dbus.Error) {
	f.record("RestartUnit " + name + " " + mode)
	f.mu.Lock()
	f.jobs++
	id := f.jobs
	f.mu.Unlock()
	job := dbus.ObjectPath(fmt.Sprintf("/org/freedesktop/systemd1/job/%d", id))
	result := f.loaded[name]
	go func() {
		time.Sleep(20 * time.Millisecond)
		_ = f.conn.Emit("/org/freedesktop/systemd1", "org.freedesktop.systemd1.Manager.JobRemoved", id, job, name, result)
	}()
	return job, nil
}

// privateBus starts dbus-daemon (Debian package dbus) on a socket of the
// test's and a fake systemd on it; it returns a dialer for Restarter.
func privateBus(t *testing.T, loaded map[string]string) (*fakeSystemd, func(context.Context) (*sddbus.Conn, error)) {
	t.Helper()
	daemon, err := exec.LookPath("dbus-daemon")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("dbus-daemon not found (Debian package dbus; .ci/run installs it)")
		}
		t.Skip("dbus-daemon not found (apt-get install dbus)")
	}
	dir := t.TempDir()
	sock := filepath.Join(dir, "bus")
	conf := filepath.Join(dir, "bus.conf")
	if err := os.WriteFile(conf, []byte(`<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path=`+sock+`</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(daemon, "--config-file="+conf, "--nofork", "--print-address")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("dbus-daemon printed no address: %v", err)
	}
	addr = strings.TrimSpace(addr)
	dial := func() (*dbus.Conn, error) {
		c, err := dbus.Dial(addr)
		if err != nil {
			return nil, err
		}
		if err := c.Auth(nil); err != nil {
			c.Close()
			return nil, err
		}
		if err := c.Hello(); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}
	sc, err := dial()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.Close() })
	f := &fakeSystemd{conn: sc, loaded: loaded}
	if err := sc.Export(f, "/org/freedesktop/systemd1", "org.freedesktop.systemd1.Manager"); err != nil {
		t.Fatal(err)
	}
	if reply, err := sc.RequestName("org.freedesktop.systemd1", dbus.NameFlagDoNotQueue); err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("owning org.freedesktop.systemd1: %v %v", reply, err)
	}
	return f, func(context.Context) (*sddbus.Conn, error) { return sddbus.NewConnection(dial) }
}

func TestApplyRestartsThroughDBus(t *testing.T) {
	f, dial := privateBus(t, map[string]string{"containerd.service": "done", "kubelet.service": "done"})
	r := Restarter{Dial: dial, Timeout: 10 * time.Second}
	report, err := r.Apply(context.Background(), PlanFor([]string{"/etc/containerd/config.toml", "/etc/systemd/system/kubelet.service.d/10-x.conf"}))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"systemd unit files reloaded", "containerd.service restarted", "kubelet.service restarted"}
	if !reflect.DeepEqual(report, want) {
		t.Errorf("report %q, want %q", report, want)
	}
	if want := []string{"Reload", "RestartUnit containerd.service replace", "RestartUnit kubelet.service replace"}; !reflect.DeepEqual(f.calls, want) {
		t.Errorf("systemd saw %q, want %q", f.calls, want)
	}
}

func TestApplyReportsMissingAndFailedUnits(t *testing.T) {
	_, dial := privateBus(t, map[string]string{"containerd.service": "failed"})
	report, err := Restarter{Dial: dial, Timeout: 10 * time.Second}.Apply(context.Background(),
		Plan{Units: []string{"containerd.service", "kubelet.service"}})
	if err == nil || !strings.Contains(err.Error(), "restarting containerd.service: job failed") {
		t.Errorf("error %v, want the failed containerd job", err)
	}
	if !reflect.DeepEqual(report, []string{"kubelet.service not installed"}) {
		t.Errorf("report %q", report)
	}
}

func TestApplyWithoutDBus(t *testing.T) {
	noBus := func(context.Context) (*sddbus.Conn, error) {
		return sddbus.NewConnection(func() (*dbus.Conn, error) { return dbus.Dial("unix:path=" + filepath.Join(t.TempDir(), "none")) })
	}
	_, err := Restarter{Dial: noBus}.Apply(context.Background(), Plan{Units: []string{"containerd.service"}})
	if !errors.Is(err, ErrNoDBus) || !strings.Contains(err.Error(), "not restarting containerd.service") {
		t.Errorf("error %v, want ErrNoDBus naming the unit", err)
	}
	// Nothing to do needs no bus at all.
	if report, err := (Restarter{Dial: noBus}).Apply(context.Background(), Plan{}); err != nil || report != nil {
		t.Errorf("empty plan: %q %v", report, err)
	}
}
