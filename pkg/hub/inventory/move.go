package inventory

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
)

// MovingAway reports whether o is being deleted by `clusterctl move`,
// which marks what it deletes from the source hub cluster once it has
// created the copy on the target. Such a deletion is no order: the host,
// its claim and its identity live on, on the other hub.
func MovingAway(o metav1.Object) bool {
	_, moving := o.GetAnnotations()[clusterctlv1.DeleteForMoveAnnotation]
	return moving && !o.GetDeletionTimestamp().IsZero()
}
