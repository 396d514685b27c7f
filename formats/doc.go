// Package formats turns a sealed rootfs.Tree into output files and reads those
// files back.
//
// There is one file per output format, and each holds both a writer and a
// reader, as archive/tar does: the writer is what a build produces, the reader
// is what inspect, diff and verify use to account for every byte without
// mounting anything.
//
// Formats only read the tree. They never change it, so every output of one
// build sees the same tree, and they never import recipes or layers: what a
// format needs arrives as explicit options. Everything a format adds that the
// tree does not hold (a boot loader, an init, a config) is listed by the
// format so the manifest can account for it.
package formats
