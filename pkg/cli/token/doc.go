// Package token is `kubectl fleet token create|list|revoke`: enrollment
// tokens for edge machines.
package token
