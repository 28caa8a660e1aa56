package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgefleet/fleet/pkg/agent/state"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
)

// CertificatesRenewer renews a control plane's certificates in place
// (kubeupgrade.Upgrader); the agent's upgrader may be one.
type CertificatesRenewer interface {
	// RenewCertificates renews them; an error that is a RollbackReporter
	// says whether the previous ones were put back.
	RenewCertificates(ctx context.Context, nodeName string, progress func(step string)) error
	// InterruptedRenewal finishes a renewal a restart cut short; false
	// when there was none.
	InterruptedRenewal(ctx context.Context, progress func(step string)) (bool, error)
}

// keepRenewalOrder records the hub's standing order to renew the
// certificates, so that it holds across restarts and outages.
func (a *Agent) keepRenewalOrder(as *wire.Assignment) {
	if a.Applied().CertificatesRenewBeforeDays == as.CertificatesRenewBeforeDays {
		return
	}
	_ = a.update(func(ap *state.Applied) {
		ap.CertificatesRenewBeforeDays, ap.CertificatesRenewalHeld = as.CertificatesRenewBeforeDays, 0
	})
}

// renewIfDue renews the control plane's certificates when the hub's order
// says they are due: they expire, by the hub's clock, within its window.
// It tries at most once per certificate check interval, whatever the
// outcome, so a renewal that cannot help (certificates shorter-lived than
// the window) or that fails does not restart the control plane again and
// again.
func (a *Agent) renewIfDue(ctx context.Context) {
	cur := a.Applied()
	renewer, ok := a.upgrader.(CertificatesRenewer)
	days := cur.CertificatesRenewBeforeDays
	if !ok || days <= 0 || days == cur.CertificatesRenewalHeld || cur.Workload == nil || cur.Workload.State != infrav1.ProvisioningSucceeded ||
		cur.CertificatesExpiryDate == nil {
		return
	}
	now := a.session.HubNow()
	if cur.CertificatesExpiryDate.Sub(now) > time.Duration(days)*24*time.Hour {
		return
	}
	if last := cur.CertificatesRenewal; last != nil && now.Sub(last.StartTime.Time) < a.cfg.CertificatesCheckInterval {
		return
	}
	a.log.Info("Renewing the control plane's certificates in place", "expiry", cur.CertificatesExpiryDate.UTC().Format(time.RFC3339), "withinDays", days)
	start := time.Now()
	_ = a.update(func(ap *state.Applied) {
		ap.CertificatesRenewal = &infrav1.HostCertificatesRenewalStatus{State: infrav1.RenewalRunning, StartTime: metav1.NewTime(now.Truncate(time.Second))}
	})
	err := renewer.RenewCertificates(ctx, cur.NodeName, a.renewalProgress)
	a.recordRenewalEnd(err)
	if err != nil {
		a.log.Error(err, "Renewing the certificates failed")
		return
	}
	a.log.Info("Renewed the control plane's certificates", "took", time.Since(start).Round(time.Second).String())
	a.refreshCertificates()
	// Certificates that live shorter than the window are due again at
	// once: renewing them daily would restart the control plane daily.
	if e := a.Applied().CertificatesExpiryDate; e != nil && e.Sub(a.session.HubNow()) <= time.Duration(days)*24*time.Hour {
		msg := fmt.Sprintf("Renewed, but the certificates still expire within the %d-day window (on %s): they live shorter than it; "+
			"not renewed again until the window changes", days, e.UTC().Format(time.RFC3339))
		a.log.Info(msg)
		_ = a.update(func(ap *state.Applied) {
			ap.CertificatesRenewalHeld = days
			if ap.CertificatesRenewal != nil {
				ap.CertificatesRenewal.Message = msg
			}
		})
	}
}

// finishInterruptedRenewal puts back the certificates of a renewal a
// restart cut short.
func (a *Agent) finishInterruptedRenewal(ctx context.Context) {
	renewer, ok := a.upgrader.(CertificatesRenewer)
	if !ok {
		return
	}
	was, err := renewer.InterruptedRenewal(ctx, a.renewalProgress)
	if !was {
		if err != nil {
			a.log.Error(err, "Reading the record of an interrupted certificate renewal")
		}
		// Cut short before its journal was written, or after it was
		// cleared: the host kept whichever certificates it had.
		if r := a.Applied().CertificatesRenewal; r != nil && r.State == infrav1.RenewalRunning {
			a.recordRenewalEnd(errors.New("fleet-agent restarted during the certificates' renewal, before it changed the host or after it was done; the certificates' expiry is read again"))
			a.refreshCertificates()
		}
		return
	}
	a.log.Info("A certificate renewal was interrupted by a restart", "outcome", err)
	if err == nil {
		err = errors.New("fleet-agent restarted during the certificates' renewal")
	}
	a.recordRenewalEnd(err)
	a.refreshCertificates()
}

func (a *Agent) renewalProgress(step string) {
	a.reportStep("Certificate renewal step", "renewing the control plane's certificates", step, func(ap *state.Applied) *string {
		if ap.CertificatesRenewal == nil {
			return nil
		}
		return &ap.CertificatesRenewal.Step
	})
}

// recordRenewalEnd records how the renewal ended (err nil: done).
func (a *Agent) recordRenewalEnd(err error) {
	_ = a.update(func(ap *state.Applied) {
		r := ap.CertificatesRenewal
		if r == nil {
			r = &infrav1.HostCertificatesRenewalStatus{StartTime: metav1.NewTime(a.session.HubNow().Truncate(time.Second))}
			ap.CertificatesRenewal = r
		}
		switch {
		case err == nil:
			r.State, r.Step, r.Message = infrav1.RenewalSucceeded, "", ""
		case rolledBack(err):
			r.State, r.Message = infrav1.RenewalRolledBack, truncate(err.Error(), 4000)
		default:
			r.State, r.Message = infrav1.RenewalFailed, truncate(err.Error(), 4000)
		}
		var rr RollbackReporter
		if err != nil && errors.As(err, &rr) && rr.FailedStep() != "" {
			r.Step = truncate(rr.FailedStep(), maxStepLength)
		}
	})
}
