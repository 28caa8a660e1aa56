// Package identity is who an edge host is to the hub: the hub CA (kept in
// a Secret, so it survives restarts and restores), the client certificate
// a session presents and the live EdgeHost it must speak for, and the
// rotation of that certificate. An identity names its EdgeHost down to its
// uid; deleting the EdgeHost revokes it, and a rotation retires the key
// before it once the new one is used (or its overlap has passed).
package identity

// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create;update
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=edgehosts,verbs=get;list;watch;patch
