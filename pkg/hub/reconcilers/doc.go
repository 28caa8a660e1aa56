// Package reconcilers groups fleet's controllers, one subpackage per kind,
// each written in Cluster API's reconcile skeleton: fetch, add the finalizer,
// build a patch helper, check pause, run small phase functions over a scope,
// and let a deferred patch own the conditions.
package reconcilers
