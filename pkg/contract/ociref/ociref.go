package ociref

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// Scheme starts a reference: oci://REGISTRY[:PORT]/REPOSITORY[:TAG].
const Scheme = "oci://"

// Ref is a repository in a registry.
type Ref struct {
	// Registry is host[:port], reached over https.
	Registry string
	// Repository is the path of the repository in it.
	Repository string
}

// repository is the distribution spec's repository name grammar.
var repository = regexp.MustCompile(`^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*$`)

// IsRef tells whether s is an oci:// reference (Parse says if it is a
// good one).
func IsRef(s string) bool { return strings.HasPrefix(s, Scheme) }

// Parse reads oci://REGISTRY/REPOSITORY, with an optional :TAG or @DIGEST
// after it, which only names the artifact for people: the blob is fetched
// by the archive's sha256.
func Parse(s string) (Ref, error) {
	rest, ok := strings.CutPrefix(s, Scheme)
	if !ok {
		return Ref{}, fmt.Errorf("%q is not an %sREGISTRY/REPOSITORY reference", s, Scheme)
	}
	registry, repo, ok := strings.Cut(rest, "/")
	if !ok || registry == "" {
		return Ref{}, fmt.Errorf("%q names no repository: want %sREGISTRY/REPOSITORY[:TAG]", s, Scheme)
	}
	if u, err := url.Parse("https://" + registry); err != nil || u.Host != registry || u.User != nil {
		return Ref{}, fmt.Errorf("%q: %q is not a registry host[:port]", s, registry)
	}
	repo, _, _ = strings.Cut(repo, "@")
	if i := strings.LastIndexByte(repo, ':'); i > strings.LastIndexByte(repo, '/') {
		repo = repo[:i]
	}
	if !repository.MatchString(repo) {
		return Ref{}, fmt.Errorf("%q: %q is not a repository name (lower-case letters, digits, separators)", s, repo)
	}
	return Ref{Registry: registry, Repository: repo}, nil
}

// BlobURL is where the blob of digest sha256:hex is.
func (r Ref) BlobURL(sha256Hex string) string {
	return "https://" + r.Registry + "/v2/" + r.Repository + "/blobs/sha256:" + sha256Hex
}
