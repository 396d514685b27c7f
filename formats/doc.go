// Package formats turns a sealed tree (rootfs.Sealed) into output files and
// reads those files back.
//
// Table lists every format: its name, what it can be made from, its writer
// and its reader, as archive/tar pairs a Writer with a Reader. Each format's
// writer and the typed options it takes are in its own file, its reader
// beside it (tar.go and tar_read.go): the writer is what a build produces,
// the reader is what inspect, diff and verify use to account for every byte
// without mounting anything. Adding a format is those files and one line in
// Table (and its schema in recipes).
//
// Formats only read the tree. They never change it, so every output of one
// build sees the same tree, and they never import recipes or layers: what a
// format needs arrives as explicit options. Everything a format adds that the
// tree does not hold (a boot loader, an init, a config) is listed by the
// format so the manifest can account for it.
package formats
