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
//
// The Enroller serves the enrollment itself (POST /v1/enroll): everything
// that can be checked without the token first, so a bad request never spends
// a use; the token's use counted under a per-token lock; an EdgeHost created
// under the machine's hostname (never an existing one handed out on a
// machine's word); a certificate signed for the key of its CSR. Enrollments
// are rate-limited and hold one of a bounded number of places.
package enrollment
