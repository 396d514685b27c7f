// Package recipes is the recipe schema (apiVersion stamp.dev/v1alpha1): strict
// decoding with line numbers, defaults and validation.
//
// The contract:
//
//   - Field names are the ones in DESIGN.md's "The recipe (v1alpha1)". Fields
//     may be added; none is renamed or removed without a migration note.
//   - Decoding is strict. An unknown or repeated key, a value of the wrong
//     type, an unquoted mode, a missing base or a malformed digest is an
//     error. Every error is an *Error naming the file, the line, and the field
//     path ("customize.layers[1].files[0].mode"); Parse returns all it finds,
//     in document order, joined with errors.Join, so callers can errors.As
//     any of them and exit 2.
//   - Defaults are applied here, once, so every consumer sees the same
//     recipe: arch amd64, epoch 0, tar compression none, cpio and pxe
//     compression zstd, an output's name is its format, seal cleanup default,
//     debs components [main], oci outputs kind rootfs and layout dir, raw size
//     auto with an ESP and a root partition, a boot loader systemd-boot.
//   - Nothing is resolved against the file system or the network. Host paths
//     stay as written (relative to Recipe.Dir); owners stay as names or
//     numbers (the conductor resolves names against the tree's /etc/passwd);
//     tags stay tags (stamp.lock pins them). SOURCE_DATE_EPOCH, when set,
//     overrides Epoch; the conductor applies that, not this package.
//   - Parameters: params declares names with defaults; ${name} in any string
//     value is replaced before anything else is decoded, so every check sees
//     the value the build uses, and the error for a bad value names the field
//     that used it. $${ is a literal ${. Options.Set overrides defaults, and
//     the one default read from the host, the Debian mirror its apt sources
//     name, comes through Options.HostApt, an fs.FS the caller hands in.
//   - This is the only package (with recipes/lock) that imports a YAML library.
package recipes
