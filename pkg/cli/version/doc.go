// Package version is `kubectl fleet version`.
package version
