// Package mdsection rewrites the generated section of a Markdown file:
// the part between two marker comments, which a generator owns while
// the rest of the file stays hand-written.
package mdsection
