//go:build tools

// Package tools pins golangci-lint's command for `go build` in this module.
package tools

import _ "github.com/golangci/golangci-lint/v2/cmd/golangci-lint"
