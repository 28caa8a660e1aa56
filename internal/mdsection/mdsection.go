package mdsection

import (
	"bytes"
	"fmt"
	"os"
)

// Splice replaces the section of doc from begin to end (both marker
// lines included) with section, which must start with begin and end
// with end; a doc without the markers gets section appended.
func Splice(doc, begin, end string, section []byte) error {
	old, err := os.ReadFile(doc)
	if err != nil {
		return err
	}
	var out []byte
	b, e := bytes.Index(old, []byte(begin)), bytes.Index(old, []byte(end))
	switch {
	case b >= 0 && e > b:
		rest := old[e+len(end):]
		if len(rest) > 0 && rest[0] == '\n' {
			rest = rest[1:]
		}
		out = append(append(append([]byte{}, old[:b]...), section...), rest...)
	case b < 0 && e < 0:
		out = append(append(append([]byte{}, old...), '\n'), section...)
	default:
		return fmt.Errorf("%s: damaged generated section (markers out of order)", doc)
	}
	return os.WriteFile(doc, out, 0o644)
}
