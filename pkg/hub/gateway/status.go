package gateway

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
)

// Reasons of the AgentConnected condition.
const (
	ConnectedReason    = "Connected"
	DisconnectedReason = "Disconnected"
)

// recordStatus writes the agent's report into EdgeHost status, and only
// when it differs from the last one: an agent re-sending the same status
// (after every reconnect, on its resync timer) costs no API write.
func (s *Server) recordStatus(ctx context.Context, ss *session, st *wire.Status) error {
	if ss.lastStatus != nil && equality.Semantic.DeepEqual(ss.lastStatus, st) {
		return nil
	}
	host := &infrav1.EdgeHost{}
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: ss.id.Namespace, Name: ss.id.Name}, host); err != nil {
		return err
	}
	want := host.DeepCopy()
	want.Status.Facts = st.Facts
	want.Status.Addresses = st.Addresses
	want.Status.AgentObservedGeneration = st.ObservedGeneration
	want.Status.Provisioning = st.Provisioning
	want.Status.ProviderID = st.ProviderID
	want.Status.NodeName = st.NodeName
	want.Status.CertificatesExpiryDate = st.CertificatesExpiryDate
	if !equality.Semantic.DeepEqual(host.Status, want.Status) {
		if err := s.client.Status().Patch(ctx, want, client.MergeFrom(host)); err != nil {
			return fmt.Errorf("patching status of EdgeHost %s: %w", ss.id, err)
		}
		statusWrites.WithLabelValues("report").Inc()
	}
	ss.lastStatus = st
	return nil
}

// setConnectivity records AgentConnected and lastSeenTime. Conditions are a
// list, so the patch carries the resourceVersion it was computed from and
// is retried on conflict rather than overwrite a concurrent change.
func (s *Server) setConnectivity(ctx context.Context, ss *session, connected bool, cause string) {
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		host := &infrav1.EdgeHost{}
		if err := s.apiReader.Get(ctx, client.ObjectKey{Namespace: ss.id.Namespace, Name: ss.id.Name}, host); err != nil {
			return client.IgnoreNotFound(err)
		}
		if string(host.UID) != ss.id.UID {
			return nil
		}
		want := host.DeepCopy()
		cond := metav1.Condition{Type: infrav1.AgentConnectedCondition, Status: metav1.ConditionTrue,
			Reason: ConnectedReason, Message: "Connected to hub replica " + s.opts.ReplicaName,
			ObservedGeneration: host.Generation}
		if !connected {
			cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, DisconnectedReason, "Session ended"
		}
		meta.SetStatusCondition(&want.Status.Conditions, cond)
		now := metav1.NewTime(time.Now().Truncate(time.Second))
		want.Status.LastSeenTime = &now
		if err := s.client.Status().Patch(ctx, want, client.MergeFromWithOptions(host, client.MergeFromWithOptimisticLock{})); err != nil {
			return err
		}
		statusWrites.WithLabelValues(cause).Inc()
		return nil
	})
	if err != nil {
		s.log.Error(err, "Recording agent connectivity", "EdgeHost", ss.id.String(), "connected", connected)
	}
}

func (s *Server) markConnected(ctx context.Context, ss *session) {
	s.setConnectivity(ctx, ss, true, "connected")
}

func (s *Server) markDisconnected(ctx context.Context, ss *session) {
	if ss.replaced.Load() {
		return // the agent is already back on a newer session
	}
	s.setConnectivity(ctx, ss, false, "disconnected")
}

// touchLastSeen refreshes lastSeenTime, coarsely: once per
// LastSeenInterval per connected agent, never per heartbeat.
func (s *Server) touchLastSeen(ctx context.Context, ss *session) {
	s.setConnectivity(ctx, ss, true, "last_seen")
}
