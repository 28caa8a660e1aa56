package kubernetesrelease

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/patch"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/hub/staging"
)

// Condition and reasons on an EdgeKubernetesRelease.
const (
	// StagedCondition is True once every selected host has the version.
	StagedCondition = "Staged"
	// AllStagedReason: every selected host has staged or runs the version.
	AllStagedReason = "AllStaged"
	// StagingReason: some hosts are still fetching it.
	StagingReason = "Staging"
	// StagingFailedReason: some hosts could not stage it.
	StagingFailedReason = "StagingFailed"
	// NoHostsReason: the release selects no host of its architectures.
	NoHostsReason = "NoHosts"
	// InvalidSelectorReason: spec.hostSelector does not parse.
	InvalidSelectorReason = "InvalidSelector"
	// InvalidArtifactReason: an artifact is not one an agent can fetch (a
	// malformed url or version); no host is ordered it.
	InvalidArtifactReason = "InvalidArtifact"
)

// maxNamed bounds the hosts a condition message names.
const maxNamed = 3

// Reconciler keeps EdgeKubernetesReleases' status.
type Reconciler struct {
	Client client.Client
}

// SetupWithManager registers the reconciler and its watches.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, options controller.Options) error {
	if r.Client == nil {
		return fmt.Errorf("kubernetesrelease reconciler: Client must be set")
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&infrav1.EdgeKubernetesRelease{}).
		Named("edgekubernetesrelease").
		WithOptions(options).
		Watches(&infrav1.EdgeHost{}, handler.EnqueueRequestsFromMapFunc(r.hostToReleases),
			builder.WithPredicates(predicate.Funcs{UpdateFunc: stagingChanged})).
		Complete(r)
}

// stagingChanged passes host updates that can move a release's counts, not
// the connectivity and link writes that make most of them.
func stagingChanged(e event.UpdateEvent) bool {
	o, ok1 := e.ObjectOld.(*infrav1.EdgeHost)
	n, ok2 := e.ObjectNew.(*infrav1.EdgeHost)
	if !ok1 || !ok2 {
		return true
	}
	return o.Status.KubernetesVersion != n.Status.KubernetesVersion || o.Status.Facts.Arch != n.Status.Facts.Arch ||
		!slices.Equal(o.Status.Facts.KubernetesVersions, n.Status.Facts.KubernetesVersions) ||
		!equality.Semantic.DeepEqual(o.Status.Staging, n.Status.Staging) || !equality.Semantic.DeepEqual(o.Labels, n.Labels)
}

func (r *Reconciler) hostToReleases(ctx context.Context, obj client.Object) []reconcile.Request {
	list := &infrav1.EdgeKubernetesReleaseList{}
	if err := r.Client.List(ctx, list, client.InNamespace(obj.GetNamespace())); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return out
}

// Reconcile counts one release's hosts.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, reterr error) {
	rel := &infrav1.EdgeKubernetesRelease{}
	if err := r.Client.Get(ctx, req.NamespacedName, rel); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("getting EdgeKubernetesRelease: %w", err)
	}
	if !rel.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	helper, err := patch.NewHelper(rel, r.Client)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("creating patch helper: %w", err)
	}
	defer func() {
		if err := helper.Patch(ctx, rel, patch.WithOwnedConditions{Conditions: []string{StagedCondition}}); err != nil {
			reterr = kerrors.NewAggregate([]error{reterr, fmt.Errorf("patching EdgeKubernetesRelease %s: %w", rel.Name, err)})
		}
	}()
	hosts := &infrav1.EdgeHostList{}
	if err := r.Client.List(ctx, hosts, client.InNamespace(rel.Namespace)); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing EdgeHosts: %w", err)
	}
	count(rel, hosts.Items)
	return ctrl.Result{}, nil
}

// count sets rel's status from its hosts.
func count(rel *infrav1.EdgeKubernetesRelease, hosts []infrav1.EdgeHost) {
	version := rel.Spec.Version
	rel.Status.ObservedGeneration = rel.Generation
	rel.Status.Hosts, rel.Status.Staged, rel.Status.Failed = 0, 0, 0
	for _, a := range rel.Spec.Artifacts {
		if err := (wire.StageOrder{Version: version, URL: a.URL, SHA256: a.SHA256}).Validate(); err != nil {
			conditions.Set(rel, metav1.Condition{Type: StagedCondition, Status: metav1.ConditionFalse,
				Reason: InvalidArtifactReason, Message: fmt.Sprintf("artifact %s: %v", a.Arch, err)})
			return
		}
	}
	var waiting, failed []string
	for i := range hosts {
		h := &hosts[i]
		ok, err := staging.Selects(rel, h)
		if err != nil {
			conditions.Set(rel, metav1.Condition{Type: StagedCondition, Status: metav1.ConditionFalse,
				Reason: InvalidSelectorReason, Message: err.Error()})
			return
		}
		if !ok {
			continue
		}
		rel.Status.Hosts++
		switch {
		case !staging.Wanted(h, version) || slices.Contains(h.Status.Facts.KubernetesVersions, version):
			rel.Status.Staged++
		case failedOn(h, version) != "":
			rel.Status.Failed++
			failed = append(failed, fmt.Sprintf("%s: %s", h.Name, failedOn(h, version)))
		default:
			waiting = append(waiting, h.Name+progressOn(h, version))
		}
	}
	cond := metav1.Condition{Type: StagedCondition}
	switch {
	case rel.Status.Hosts == 0:
		cond.Status, cond.Reason = metav1.ConditionFalse, NoHostsReason
		cond.Message = fmt.Sprintf("No EdgeHost in namespace %s is selected and of an architecture the release has (%s)", rel.Namespace, arches(rel))
	case rel.Status.Failed > 0:
		cond.Status, cond.Reason = metav1.ConditionFalse, StagingFailedReason
		cond.Message = fmt.Sprintf("%d of %d hosts could not stage %s: %s", rel.Status.Failed, rel.Status.Hosts, version, named(failed))
	case len(waiting) > 0:
		cond.Status, cond.Reason = metav1.ConditionFalse, StagingReason
		cond.Message = fmt.Sprintf("%d of %d hosts have %s; fetching: %s", rel.Status.Staged, rel.Status.Hosts, version, named(waiting))
	default:
		cond.Status, cond.Reason = metav1.ConditionTrue, AllStagedReason
	}
	conditions.Set(rel, cond)
}

func failedOn(h *infrav1.EdgeHost, version string) string {
	for _, s := range h.Status.Staging {
		if s.Version == version && s.State == infrav1.StagingFailed {
			return s.Message
		}
	}
	return ""
}

// progressOn is " (40%)" for a host fetching version, "" otherwise.
func progressOn(h *infrav1.EdgeHost, version string) string {
	for _, s := range h.Status.Staging {
		if s.Version == version && s.TotalBytes > 0 {
			return fmt.Sprintf(" (%d%%)", s.Bytes*100/s.TotalBytes)
		}
	}
	return ""
}

func named(items []string) string {
	sort.Strings(items)
	if len(items) > maxNamed {
		return strings.Join(items[:maxNamed], "; ") + fmt.Sprintf("; and %d more", len(items)-maxNamed)
	}
	return strings.Join(items, "; ")
}

func arches(rel *infrav1.EdgeKubernetesRelease) string {
	var out []string
	for _, a := range rel.Spec.Artifacts {
		out = append(out, a.Arch)
	}
	return strings.Join(out, ", ")
}
