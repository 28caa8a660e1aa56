// Package lazylog wraps a logr sink so that the key/value pairs given to
// WithValues reach it only when a line is written.
//
// controller-runtime gives every reconcile a logger of its own with four
// pairs (controller, kind, namespace, name, reconcile ID), and zap encodes
// pairs as soon as they are added, cloning its encoder each time. At the
// default level nearly none of those loggers writes a line, yet at a
// fleet's cold start building them was a noticeable share of the hub's CPU
// (docs/PERFORMANCE.md).
package lazylog
