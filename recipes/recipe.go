package recipes

import "strings"

// APIVersion and Kind are the only values a v1alpha1 recipe may declare.
const (
	APIVersion = "stamp.dev/v1alpha1"
	Kind       = "Recipe"
)

// Recipe is one decoded, defaulted and validated recipe file.
type Recipe struct {
	APIVersion string
	Kind       string
	// Name seeds every derived UUID/GUID and names outputs; [a-z0-9][a-z0-9._-]*.
	Name string
	Arch string // amd64 | arm64
	// Epoch is the build time in Unix seconds. SOURCE_DATE_EPOCH in the
	// environment overrides it (the conductor applies that).
	Epoch int64
	// Seed, when set, replaces Name as the seed of derived IDs, so a rename
	// keeps every ID.
	Seed string

	// OfflineOnly forbids every step that runs a program of the image
	// (run layers, debs with scripts: chroot), so the build needs no
	// namespaces and gives the same bytes on any builder.
	OfflineOnly bool
	// Release, when set, is a file in the image that names what made it
	// (the recipe, its digest and stamp's version), in os-release syntax.
	Release string

	Base      Base
	Customize Phase
	Provision Phase
	Seal      Seal
	Outputs   []Output
	// Params are the declared parameters in declaration order, each with
	// the value ${name} became where it is used.
	Params []Param

	// Dir is the absolute directory of the recipe file (set by Load): relative
	// host paths in the recipe start here.
	Dir string
	// Path is the file name as given to Load or Parse; errors use it.
	Path string
	// TreeDigest ("sha256:...") covers the recipe as decoded, parameters
	// substituted, without its outputs, comments or layout: what decides
	// the tree, and so what an image records of its recipe.
	TreeDigest string
}

// Output returns the output with the given name.
func (r *Recipe) Output(name string) (*Output, bool) {
	for i := range r.Outputs {
		if r.Outputs[i].Name == name {
			return &r.Outputs[i], true
		}
	}
	return nil, false
}

// Base is phase 1: what the tree starts from, a tarball or a Debian
// system bootstrapped from an archive (exactly one of Tarball and Debs).
type Base struct {
	Tarball string // path relative to the recipe, or an https:// URL
	SHA256  string // 64 lowercase hex digits, no "sha256:" prefix; required for URLs
	// Debs bootstraps the base from a Debian archive: its Variant's
	// packages and Packages, installed into an empty tree.
	Debs *Debs
	Pre  []string
	Post []string
	Line int
}

// Phase is customize or provision: host hooks around a list of layers.
type Phase struct {
	Pre    []string // host hooks run before the layers
	Post   []string // host hooks run after the layers
	Layers []Layer
}

// Layer is one item of a phase's layers list. Exactly one of the kind fields
// is set; Kind names it (see layerKinds).
type Layer struct {
	Line  int
	Field string // e.g. "customize.layers[2]"

	Tarball *Tarball
	Files   []File
	Symlink []Symlink // a single mapping in YAML becomes one element
	Mkdir   []Mkdir
	Remove  []string // absolute paths or globs ("**" matches across directories)
	Users   []User
	Groups  []Group
	Systemd *Systemd
	Hook    *Hook
	OCI     *OCI
	Debs    *Debs
	Images  []Image
	Run     *Run

	// ImagesInto is where an images layer puts its images: "" for OCI
	// archives imported at first boot, "containerd" for containerd's own
	// state (see ImagesInto).
	ImagesInto string
	// ImagesDiscardLayers, with ImagesInto containerd, leaves the layer
	// blobs out of the content store once unpacked; nil follows the
	// tree's containerd configuration.
	ImagesDiscardLayers *bool
}

// Tarball is a tarball layer, extracted over the tree.
type Tarball struct {
	Path   string // relative to the recipe, or an https:// URL
	SHA256 string // 64 lowercase hex digits; required for URLs
	Dest   string // absolute directory in the tree; default "/"
}

// File puts one file, or a host directory's contents, into the tree.
type File struct {
	Path string // absolute; ending in "/" with From = copy a host directory
	// Content is inline content; exactly one of Content and From is set.
	Content *string
	From    string // host path relative to the recipe
	Mode    *Mode
	Owner   Owner
	MTime   *int64 // Unix seconds; nil = the build epoch
}

// IsDir reports whether the file entry copies a directory.
func (f *File) IsDir() bool { return strings.HasSuffix(f.Path, "/") }

// Symlink makes Path a symbolic link to Target.
type Symlink struct {
	Path   string
	Target string
	Owner  Owner
}

// Mkdir makes a directory and its missing parents.
type Mkdir struct {
	Path  string
	Mode  *Mode
	Owner Owner
}

// User is an account to add (or update) in the tree's passwd/shadow/group.
type User struct {
	Name    string
	UID     *uint32
	Group   string // primary group name; default: a group named like the user
	GID     *uint32
	Groups  []string // supplementary groups
	Home    string
	Shell   string
	Comment string
	System  bool
	// Password is already hashed (crypt(3) form); "" leaves the account locked.
	Password   string
	CreateHome *bool
}

// Group is a group to add (or update) in the tree's group/gshadow.
type Group struct {
	Name    string
	GID     *uint32
	Members []string
	System  bool
}

// Systemd enables, disables and masks units by writing the links systemctl would.
type Systemd struct {
	Enable  []string
	Disable []string
	Mask    []string
	Default string // default.target, e.g. multi-user.target
}

// Hook runs a host program on the tree directory.
type Hook struct {
	Run  string // host path relative to the recipe
	Args []string
	// Env is added to the hook's fixed environment. Sort the keys before use.
	Env map[string]string
}

// OCI copies files out of an OCI image or artifact.
type OCI struct {
	Ref      string   // name:tag, name@sha256:..., or name:tag@sha256:...
	Dest     string   // absolute; default "/"
	Paths    []string // absolute paths inside the image; empty = everything
	Mode     *Mode
	Owner    Owner
	Platform string // os/arch[/variant]; empty = linux/<recipe arch>
}

// Run runs a program of the image with the tree as its root.
type Run struct {
	// Command is the program (absolute, or found through PATH inside the
	// image) and its arguments; there is no shell unless it names one.
	Command []string
	// Env is added to the fixed environment. Sort the keys before use.
	Env map[string]string
	// Network shares the build machine's network; by default the program
	// has none.
	Network bool
}

// Debs installs Debian packages from a repository, resolved offline.
type Debs struct {
	Repo       string // http(s):// or file:// URL of the archive root
	Suite      string // ending in "/": a flat repository's directory
	Suites     []string
	Components []string // default [main]; none for a flat repository
	Packages   []string
	Keyring    string // host path relative to the recipe
	Trusted    bool   // skip signature checks
	Recommends bool
	Exclude    []string
	// DeferScripts lets maintainer scripts no built-in handler covers wait
	// for a first-boot "dpkg --configure -a" instead of failing the build.
	DeferScripts bool
	// Skip names commands of SkippableCommands that maintainer scripts
	// call and that then run neither at build time nor at first boot.
	Skip []string
	// Scripts is how maintainer scripts run: "offline" (the default), by
	// the built-in handlers, identical for every builder; or "chroot", for
	// real in a chroot of the tree, which needs a root build or user
	// namespaces. Real scripts leave what handlers do not (debconf's
	// database, ldconfig's cache), so a chroot build is reproducible only
	// against other chroot builds.
	Scripts string
	// Variant, in base.debs only, is the package set a bootstrap starts
	// from, with mmdebstrap's meanings (see Variants).
	Variant string
}

// Variants are base.debs' package sets, as mmdebstrap names them:
// essential is every Essential: yes package; apt adds apt; minbase and
// required add every Priority: required package; important and standard
// add those priorities too. Each is closed under Depends.
var Variants = []string{"essential", "apt", "minbase", "required", "important", "standard"}

// DefaultVariant is base.debs' variant when the recipe names none.
const DefaultVariant = "minbase"

// Debs script modes.
const (
	ScriptsOffline = "offline"
	ScriptsChroot  = "chroot"
)

// Image is a container image to preload into the tree's image store.
type Image struct {
	Ref string // name:tag, optionally @sha256:<64 hex> (else stamp.lock pins it)
}

// Name, Tag and Digest split Ref; Ref is validated at decode time.
func (i Image) Name() string {
	n, _, _ := splitImageRef(i.Ref)
	return n
}

// Tag is the tag part of Ref.
func (i Image) Tag() string {
	_, t, _ := splitImageRef(i.Ref)
	return t
}

// Digest is the digest part of Ref, "sha256:<hex>".
func (i Image) Digest() string {
	_, _, d := splitImageRef(i.Ref)
	return d
}

// Seal configures rootfs.Seal.
type Seal struct {
	Cleanup Cleanup
}

// Cleanup says which paths Seal empties or removes. YAML "default" sets
// Default; "none" leaves both zero; a list of globs means the default set
// plus these globs.
type Cleanup struct {
	Default bool
	Globs   []string
}

// Output formats.
const (
	FormatTar   = "tar"
	FormatRaw   = "raw"
	FormatQcow2 = "qcow2"
	FormatCpio  = "cpio"
	FormatPXE   = "pxe"
	FormatOCI   = "oci"
	FormatVHD   = "vhd"
	FormatVMDK  = "vmdk"
	FormatOVA   = "ova"
	FormatGCE   = "gce"
)

// Output is one artifact made from the sealed tree (or from an earlier output).
type Output struct {
	Line   int
	Field  string // e.g. "outputs[1]"
	Format string // tar | raw | qcow2 | vhd | vmdk | ova | gce | cpio | pxe | oci
	// Name is unique among outputs; default the format.
	Name string
	// Compression: tar none|gzip|zstd|xz (default none); cpio and pxe the same
	// set, default zstd; qcow2 none|zlib; oci's layer gzip|zstd|none, default
	// gzip.
	Compression string
	// Size of a raw disk in bytes, read by ParseSize from "auto" (0) or a
	// size such as "4GiB".
	Size       int64
	Partitions []Partition
	Boot       *Boot
	// From names an earlier output this one encodes: qcow2, vhd, vmdk, ova
	// and gce from raw, pxe from cpio, oci containerdisk from raw or qcow2.
	From   string
	Kind   string // oci: rootfs | containerdisk
	Layout string // oci: dir | archive
	// Type is vhd: fixed | dynamic, default fixed; vmdk: streamOptimized |
	// monolithicSparse, default streamOptimized.
	Type       string
	Entrypoint []string
	Env        []string          // oci: KEY=VALUE
	Labels     map[string]string // oci; sort the keys before use
	// FreeSpace is extra room in bytes added to "auto" sizes of a raw disk,
	// written as a size such as "512MiB"; 0 when not given.
	FreeSpace int64
	// Grow ships a systemd-repart drop-in so the root partition and its
	// filesystem grow to fill a larger disk on first boot; nil means true
	// for raw disks.
	Grow *bool
	// The virtual machine an ova describes: CPUs (default 2), Memory in
	// bytes (default 4 GiB), Firmware (efi, the default, or bios, when the
	// raw disk it holds has boot.bios) and the Network its one NIC is on
	// (default "VM Network", vSphere's default port group).
	CPUs     int
	Memory   int64
	Firmware string
	Network  string
}

// SecureBoot names the user's Secure Boot signing key and its
// certificate, PEM files on the build host, relative to the recipe.
type SecureBoot struct {
	Key  string
	Cert string
}

// Partition is one GPT partition of a raw disk.
type Partition struct {
	Name       string
	Type       string // esp | root | usr | usr-verity | xbootldr | swap | linux | bios
	Size       int64  // bytes; 0 is "auto"
	Filesystem string // vfat | ext4 | swap | none
	Label      string // filesystem label
}

// Boot places a boot loader on a raw disk.
type Boot struct {
	Loader  string // systemd-boot | shim (Secure Boot) | uki | grub | none
	Cmdline string
	// SystemdBoot, for loader uki: systemd-boot boots the UKI as its Type
	// #2 entry (nil or true), or the UKI is the removable media boot file
	// alone (false).
	SystemdBoot *bool
	// SecureBoot, for loader uki, signs the UKI and systemd-boot with the
	// user's own key and lays out its enrolment.
	SecureBoot *SecureBoot
	// BIOS also boots legacy BIOS machines, with GRUB for i386-pc in a
	// partition of type bios; it needs loader systemd-boot or shim.
	BIOS bool
}
