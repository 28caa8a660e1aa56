// Package enrollment keeps enrollment tokens and decides whether one may
// enroll a host.
//
// A token reads "<id>.<secret>" ([a-z0-9]{6}.[a-z0-9]{16}, kubeadm's bootstrap
// token shape). It lives in a Secret of type fleet.edgefleet.io/enrollment-token
// named fleet-token-<id> in the hub's namespace. The Secret holds only the
// SHA-256 of the secret half, so reading Secrets never yields a usable token;
// the secret half is shown once, when the token is made. A token has an
// expiry, a usage limit, labels stamped on every host it enrolls, the
// namespace the hosts go to, an optional manual-approval flag, and can be
// revoked.
package enrollment
