// Package v1alpha1 holds fleet's Cluster API infrastructure types: EdgeCluster
// (the InfraCluster), EdgeMachine and EdgeMachineTemplate (the InfraMachine),
// and EdgeHost, the inventory of enrolled edge machines.
//
// The package imports only the standard library and k8s.io/apimachinery so
// that the agent, which also speaks these types, never links Cluster API or
// controller-runtime. Shapes shared with Cluster API (endpoints, addresses,
// failure domains) are mirrored here field for field in their v1beta2 form.
//
// +kubebuilder:object:generate=true
// +groupName=infrastructure.cluster.x-k8s.io
package v1alpha1
