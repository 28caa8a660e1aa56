// Package edgeimage tests `make edge-image` from the outside: the disk
// image's partitions and file systems as sfdisk, fsck and debugfs see them,
// what the root file system holds, and that two builds from the same inputs
// give the same root file system.
package edgeimage
