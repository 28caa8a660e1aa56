// Package delete is `kubectl fleet delete cluster`.
package delete
