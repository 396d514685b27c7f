package layers

// Input is something a layer reads from outside the recipe: a tarball, a
// host file, an artifact. The conductor resolves every input (from the
// recipe's digest, the lock, or by fetching) and fills Digest before any
// layer applies, so a mismatch stops the build before the tree changes.
type Input struct {
	Kind   string // tarball, file, oci, deb, image
	URI    string // absolute host path or URL
	Digest string // "sha256:<hex>"; set by the recipe, the lock or the fetch
	// Pinned is set when the recipe itself gave the digest.
	Pinned bool
}

// WithInputs is implemented by layers that read inputs.
type WithInputs interface {
	Inputs() []*Input
}
