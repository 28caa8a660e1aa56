// Package selfupdate lets fleet-agent replace itself safely, as A/B
// systems do: a verified new binary is staged beside the running one, the
// next start runs it on trial, and only the new binary itself commits it,
// once it has reached the hub again through the site's network and
// passed its own checks before a deadline. A trial that crashes, hangs
// or never reaches the hub is rolled back by the next start — under
// systemd by its restart, elsewhere by the launcher that supervises the
// agent — never by an order from the hub, which a broken agent may never
// hear.
package selfupdate
