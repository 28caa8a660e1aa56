// Package inplace serves Cluster API's in-place update hooks
// (CanUpdateMachine, CanUpdateMachineSet, UpdateMachine) as a Runtime SDK
// extension of the hub, on its own TLS listener with a CA the hub keeps in
// a Secret for Cluster API to inject into the ExtensionConfig.
//
// The hooks claim a Machine's Kubernetes version, and only for hosts whose
// agent can take it (pkg/contract/hostupgrade); everything else is answered
// "not in place", so Cluster API replaces the Machine. They write nothing:
// the Machine's spec.version is the desired state, which the EdgeMachine
// reconciler turns into the host's order, and UpdateMachine reports the
// host's progress from its EdgeHost. A hub restart, a fail-over, a restore
// or a move therefore resumes an update from the objects, never twice.
//
// +kubebuilder:rbac:groups=runtime.cluster.x-k8s.io,resources=extensionconfigs,verbs=get;create;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machines,verbs=get;list;watch
package inplace
