// Package host is `kubectl fleet host approve|cordon|uncordon`.
package host
