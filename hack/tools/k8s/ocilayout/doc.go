// Package ocilayout writes images and image indexes as OCI image layout
// tarballs, the archive `ctr images import`, skopeo and crane read, named
// for both kinds of importer, and reads them back. Every entry has a fixed
// mtime, so the same image gives the same archive.
package ocilayout
