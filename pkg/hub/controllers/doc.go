// Package controllers wires fleet's hub reconcilers into a controller-runtime
// manager: the scheme they need, the field indexes they share, and each
// reconciler with its event recorder. cmd/fleet-hub and the test harness use
// it, so both run exactly the same set.
package controllers
