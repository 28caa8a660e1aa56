// Package host is `kubectl fleet host approve|cordon|uncordon|remove|retry`.
package host
