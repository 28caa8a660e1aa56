// Package release signs and verifies fleet-agent releases, so that an
// agent runs a new binary only when a chain of signatures ends in a root
// key it has held since install time — never on the hub's word alone.
//
// Three kinds of key, all Ed25519:
//
//   - Root keys, kept offline; their public halves are baked into the
//     edge image or the package (/usr/share/fleet-agent/release-roots).
//     A root key signs signing keys, rarely.
//   - Signing keys, used by the release pipeline; each comes with a
//     SignedKey: the key, its validity window, and a root's signature.
//   - Nothing else: the hub only carries bundles, it holds no key.
//
// A release is a binary and a Bundle: the Artifact (name, version, OS,
// architecture, SHA-256 and size of the binary, and the lowest version
// agents may still run, the floor), the signing key's signature over it,
// and the SignedKey. Verify checks the chain, the binary against the
// Artifact, and the version against the floor the agent recorded.
package release
