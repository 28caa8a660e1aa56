// Package completion completes resource names for `kubectl fleet`, for
// cobra's shell completion and kubectl's plugin completion
// (kubectl_complete-fleet).
package completion
