// Package disk lays out disk images: deterministic identifiers, the GPT, and
// (in subpackages) the file systems and image encodings that fill them.
//
// Nothing here needs root, a loop device or a mount: every structure is
// written into a plain file through io.WriterAt, and every identifier is
// derived from the build's seed, so the same tree gives the same bytes.
package disk
