package hostaccess

import (
	"bytes"
	"regexp"
)

// Redacted replaces a secret in what leaves the host.
const Redacted = "[REDACTED]"

var (
	// A kubeadm bootstrap token, wherever it stands (kubeadm prints join
	// commands with it).
	bootstrapToken = regexp.MustCompile(`\b[a-z0-9]{6}\.[a-z0-9]{16}\b`)
	// A value after a name that says it is secret: "--token X",
	// "token: X", "password=X", "--certificate-key X", kubeconfig's
	// "client-key-data: X", "Authorization: Bearer X".
	namedSecret = regexp.MustCompile(`(?i)((?:--|\b)(?:[a-z0-9_-]*(?:token|password|passwd|secret|certificate-?key|private-?key|key-data|cert(?:ificate)?-data|api-?key)|bearer)["']?(?:\s*[:=]\s*|\s+)["']?)([^\s"',;&|)}]+)`)
	pemBegin    = []byte("-----BEGIN ")
	pemEnd      = []byte("-----END ")
)

// Redactor removes secrets from a log, line by line. It keeps state
// across lines (a PEM block spans several), so use one per log.
type Redactor struct {
	inPEM bool
}

// Line returns line with its secrets replaced by Redacted.
func (r *Redactor) Line(line []byte) []byte {
	if r.inPEM {
		if bytes.Contains(line, pemEnd) {
			r.inPEM = false
			return line
		}
		return []byte(Redacted)
	}
	if bytes.Contains(line, pemBegin) && !bytes.Contains(line, pemEnd) {
		r.inPEM = true
		return line
	}
	line = namedSecret.ReplaceAll(line, []byte("${1}"+Redacted))
	return bootstrapToken.ReplaceAll(line, []byte(Redacted))
}
