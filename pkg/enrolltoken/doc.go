// Package enrolltoken is the enrollment token's format and its Secret: how
// `kubectl fleet token create` makes one (the secret half stored only as a
// hash), how the hub authenticates one and counts its uses, and which host
// labels a token may not stamp. The hub and the CLI share it.
package enrolltoken
