package unitd

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"

	"github.com/edgefleet/fleet/pkg/agent/units"
)

// privateBus starts dbus-daemon (Debian package dbus) on a socket of the
// test's, as pkg/agent/units' tests do, and returns its address.
func privateBus(t *testing.T) string {
	t.Helper()
	daemon, err := exec.LookPath("dbus-daemon")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("dbus-daemon not found (Debian package dbus; .ci/run installs it)")
		}
		t.Skip("dbus-daemon not found (apt-get install dbus)")
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "bus.conf")
	write(t, conf, `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path=`+filepath.Join(dir, "bus")+`</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
`)
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
	return strings.TrimSpace(addr)
}

// TestRestarterDrivesUnitd runs the agent's production restart code
// against unitd on a private bus: the unit really restarts and its new
// process sees the EnvironmentFile as it is now.
func TestRestarterDrivesUnitd(t *testing.T) {
	addr := privateBus(t)
	dir := t.TempDir()
	envFile, out := filepath.Join(dir, "flags.env"), filepath.Join(dir, "seen")
	write(t, envFile, "GREETING=first\n")
	write(t, filepath.Join(dir, "demo.service"), `[Unit]
Description=Demo
[Service]
EnvironmentFile=`+envFile+`
ExecStart=/bin/sh -c 'echo "$GREETING" >> $0; exec sleep 1000' ${OUT}
Restart=always
`)
	// The unit's OUT comes from a drop-in written later: only a reload makes it count.
	write(t, filepath.Join(dir, "failing.service"), "[Service]\nExecStart=/nonexistent/binary\n")

	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	m := newManager(t, dir)
	if err := Serve(conn, m); err != nil {
		t.Fatal(err)
	}
	r := units.Restarter{
		Dial: func(context.Context) (*sddbus.Conn, error) {
			return sddbus.NewConnection(func() (*dbus.Conn, error) { return dbus.Connect(addr) })
		},
		Timeout: 20 * time.Second,
	}
	ctx := context.Background()

	if st := m.Status("demo.service"); st.LoadState != "loaded" { // loaded now, before the drop-in exists
		t.Fatalf("status %+v", st)
	}
	write(t, filepath.Join(dir, "demo.service.d", "out.conf"), "[Service]\nEnvironment=OUT="+out+"\n")
	report, err := r.Apply(ctx, units.Plan{Reload: true, Units: []string{"demo.service", "missing.service"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"systemd unit files reloaded", "demo.service restarted", "missing.service not installed"}; !reflect.DeepEqual(report, want) {
		t.Errorf("first apply: %q, want %q", report, want)
	}
	eventually(t, "the first run", func() bool { return reflect.DeepEqual(lines(out), []string{"first"}) })

	write(t, envFile, "GREETING=second\n")
	if report, err := r.Apply(ctx, units.Plan{Units: []string{"demo.service"}}); err != nil || !reflect.DeepEqual(report, []string{"demo.service restarted"}) {
		t.Fatalf("second apply: %q %v", report, err)
	}
	eventually(t, "the restarted run", func() bool { return reflect.DeepEqual(lines(out), []string{"first", "second"}) })
	if st := m.Status("demo.service"); st.ActiveState != "active" || st.Description != "Demo" {
		t.Errorf("status %+v", st)
	}

	if _, err := r.Apply(ctx, units.Plan{Units: []string{"failing.service"}}); err == nil || !strings.Contains(err.Error(), "restarting failing.service: job failed") {
		t.Errorf("failing unit: %v", err)
	}

	// What systemctl-like callers also use: ListUnitsByNames's fields, GetUnit, StopUnit.
	sc, err := r.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	st, err := sc.ListUnitsByNamesContext(ctx, []string{"demo.service"})
	if err != nil || len(st) != 1 || st[0].LoadState != "loaded" || st[0].ActiveState != "active" || st[0].SubState != "running" || st[0].Path != "/org/freedesktop/systemd1/unit/demo_2eservice" {
		t.Errorf("ListUnitsByNames: %+v %v", st, err)
	}
	done := make(chan string, 1)
	if _, err := sc.StopUnitContext(ctx, "demo.service", "replace", done); err != nil {
		t.Fatal(err)
	}
	if res := <-done; res != "done" || m.Status("demo.service").ActiveState != "inactive" {
		t.Errorf("stop: %s, %+v", res, m.Status("demo.service"))
	}
	if _, err := sc.StartUnitContext(ctx, "missing.service", "replace", nil); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("starting a missing unit: %v", err)
	}
}
