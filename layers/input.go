package layers

// Input is something a layer reads from outside the recipe: a tarball, a
// host file, an artifact. The conductor resolves every input (from the
// recipe's digest, the lock, or by fetching) and fills Digest before any
// layer applies, so a mismatch stops the build before the tree changes.
type Input struct {
	Kind   InputKind
	URI    string // absolute host path or URL
	Digest string // "sha256:<hex>"; set by the recipe, the lock or the fetch
	// Pinned is set when the recipe itself gave the digest.
	Pinned bool
}

// InputKind says what an Input is, and with it how it is fetched and pinned
// in stamp.lock, where it is written as the string.
type InputKind string

const (
	InputTarball InputKind = "tarball" // a base or tarball layer's archive
	InputFile    InputKind = "file"    // a host file, such as a keyring
	InputOCI     InputKind = "oci"     // an OCI artifact or image the oci layer unpacks
	InputDeb     InputKind = "deb"     // a Debian index or package
	InputImage   InputKind = "image"   // an image the images layer pre-seeds
)

// WithInputs is implemented by layers that read inputs.
type WithInputs interface {
	Inputs() []*Input
}
