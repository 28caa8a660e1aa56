package unitd

import (
	"errors"
	"fmt"
	"sync/atomic"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/introspect"
)

const (
	busName      = "org.freedesktop.systemd1"
	objectPath   = dbus.ObjectPath("/org/freedesktop/systemd1")
	managerIface = "org.freedesktop.systemd1.Manager"
)

// unitStatus is systemd's ListUnitsByNames element, (ssssssouso).
type unitStatus struct {
	Name, Description, LoadState, ActiveState, SubState, Followed string
	Path                                                          dbus.ObjectPath
	JobID                                                         uint32
	JobType                                                       string
	JobPath                                                       dbus.ObjectPath
}

// busManager is the exported object: its exported methods are the D-Bus
// methods of org.freedesktop.systemd1.Manager, nothing else.
type busManager struct {
	m    *Manager
	conn *dbus.Conn
	jobs atomic.Uint32
	logf func(format string, args ...any)
}

// Serve answers org.freedesktop.systemd1.Manager for m on conn (methods
// Reload, ListUnitsByNames, GetUnit, StartUnit, StopUnit, RestartUnit,
// Subscribe, Unsubscribe; signal JobRemoved) and takes the name
// org.freedesktop.systemd1. Requests are served until conn closes.
func Serve(conn *dbus.Conn, m *Manager) error {
	b := &busManager{m: m, conn: conn, logf: m.logf}
	if err := conn.Export(b, objectPath, managerIface); err != nil {
		return fmt.Errorf("exporting %s: %w", managerIface, err)
	}
	node := &introspect.Node{Name: string(objectPath), Interfaces: []introspect.Interface{
		introspect.IntrospectData,
		{Name: managerIface, Methods: introspect.Methods(b), Signals: []introspect.Signal{{Name: "JobRemoved", Args: []introspect.Arg{
			{Name: "id", Type: "u"}, {Name: "job", Type: "o"}, {Name: "unit", Type: "s"}, {Name: "result", Type: "s"}}}}},
	}}
	if err := conn.Export(introspect.NewIntrospectable(node), objectPath, "org.freedesktop.DBus.Introspectable"); err != nil {
		return fmt.Errorf("exporting introspection: %w", err)
	}
	reply, err := conn.RequestName(busName, dbus.NameFlagDoNotQueue)
	if err != nil {
		return fmt.Errorf("requesting %s: %w", busName, err)
	}
	if reply != dbus.RequestNameReplyPrimaryOwner {
		return fmt.Errorf("requesting %s: another process owns it (reply %d)", busName, reply)
	}
	return nil
}

// Reload is `systemctl daemon-reload`.
func (b *busManager) Reload() *dbus.Error {
	b.m.Reload()
	return nil
}

// ListUnitsByNames reports the named units, loaded or not.
func (b *busManager) ListUnitsByNames(names []string) ([]unitStatus, *dbus.Error) {
	out := make([]unitStatus, 0, len(names))
	for _, n := range names {
		st := b.m.Status(n)
		out = append(out, unitStatus{
			Name: n, Description: st.Description, LoadState: st.LoadState, ActiveState: st.ActiveState, SubState: st.SubState,
			Path: unitPath(n), JobPath: "/",
		})
	}
	return out, nil
}

// GetUnit returns the object path of a loaded unit.
func (b *busManager) GetUnit(name string) (dbus.ObjectPath, *dbus.Error) {
	if err := b.loaded(name); err != nil {
		return "", err
	}
	return unitPath(name), nil
}

// StartUnit queues a start job.
func (b *busManager) StartUnit(name, mode string) (dbus.ObjectPath, *dbus.Error) {
	return b.enqueue("start", name, b.m.Start)
}

// StopUnit queues a stop job.
func (b *busManager) StopUnit(name, mode string) (dbus.ObjectPath, *dbus.Error) {
	return b.enqueue("stop", name, b.m.Stop)
}

// RestartUnit queues a restart job (a start if the unit is not running).
func (b *busManager) RestartUnit(name, mode string) (dbus.ObjectPath, *dbus.Error) {
	return b.enqueue("restart", name, b.m.Restart)
}

// Subscribe is accepted; JobRemoved is sent to every listener anyway.
func (b *busManager) Subscribe() *dbus.Error { return nil }

// Unsubscribe is accepted.
func (b *busManager) Unsubscribe() *dbus.Error { return nil }

func (b *busManager) loaded(name string) *dbus.Error {
	switch err := b.m.LoadError(name); {
	case err == nil:
		return nil
	case errors.Is(err, ErrNotFound):
		return dbus.NewError("org.freedesktop.systemd1.NoSuchUnit", []any{fmt.Sprintf("Unit %s not found.", name)})
	default:
		return dbus.NewError("org.freedesktop.systemd1.LoadFailed", []any{err.Error()})
	}
}

// enqueue runs a job in the background and, when it ends, emits
// JobRemoved with result "done" or "failed", as systemd does and
// go-systemd's job channels wait for.
func (b *busManager) enqueue(kind, name string, run func(string) error) (dbus.ObjectPath, *dbus.Error) {
	if err := b.loaded(name); err != nil {
		return "", err
	}
	id := b.jobs.Add(1)
	job := dbus.ObjectPath(fmt.Sprintf("%s/job/%d", objectPath, id))
	b.logf("job %d: %s %s", id, kind, name)
	go func() {
		result := "done"
		if err := run(name); err != nil {
			result = "failed"
			b.logf("job %d: %s %s failed: %v", id, kind, name, err)
		}
		if err := b.conn.Emit(objectPath, managerIface+".JobRemoved", id, job, name, result); err != nil {
			b.logf("job %d: emitting JobRemoved: %v", id, err)
		}
	}()
	return job, nil
}

func unitPath(name string) dbus.ObjectPath {
	return objectPath + "/unit/" + dbus.ObjectPath(sddbus.PathBusEscape(name))
}
