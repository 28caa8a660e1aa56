package sdnotify

import (
	"context"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// Notifier sends sd_notify messages; without NOTIFY_SOCKET (not under
// systemd) every call is a no-op.
type Notifier struct{}

// Ready says local initialisation is done.
func (Notifier) Ready() { _, _ = daemon.SdNotify(false, daemon.SdNotifyReady) }

// Status sets the one-line status `systemctl status` shows.
func (Notifier) Status(text string) { _, _ = daemon.SdNotify(false, "STATUS="+text) }

// Stopping says the agent is shutting down.
func (Notifier) Stopping() { _, _ = daemon.SdNotify(false, daemon.SdNotifyStopping) }

// Watchdog pings systemd's watchdog at half its interval, but only while
// lastHealthy (when the sync loop last went round with its workers alive)
// is more recent than one interval: a stuck loop or worker stops the pings,
// and systemd restarts the agent. It returns at once when the unit has no
// WatchdogSec.
func (Notifier) Watchdog(ctx context.Context, lastHealthy func() time.Time) {
	interval, err := daemon.SdWatchdogEnabled(false)
	if err != nil || interval == 0 {
		return
	}
	t := time.NewTicker(interval / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if time.Since(lastHealthy()) < interval {
				_, _ = daemon.SdNotify(false, daemon.SdNotifyWatchdog)
			}
		}
	}
}
