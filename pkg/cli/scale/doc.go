// Package scale is `kubectl fleet scale cluster`.
package scale
