// Package reconcilers holds fleet's hub reconcilers, one subpackage per kind,
// each written in Cluster API's reconcile skeleton: fetch, add the finalizer,
// build a patch helper, check pause, run small phase functions over a scope,
// and let a deferred patch own the conditions.
//
// This package wires them into a controller-runtime manager (Setup): the
// scheme they need, the field indexes they share, and each reconciler with
// its event recorder. cmd/fleet-hub and the test harness both call Setup, so
// both run exactly the same set. Its tests are the contract tests: fleet's
// reconcilers beside the real Cluster API ones on a real API server.
package reconcilers
