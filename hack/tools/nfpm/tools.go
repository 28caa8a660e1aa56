//go:build tools

// Package tools pins nfpm's command for `go build` in this module.
package tools

import _ "github.com/goreleaser/nfpm/v2/cmd/nfpm"
