// Package containerd writes container images into a tree as containerd
// keeps them, so that a node boots with its images present and nothing to
// import: the content store's blobs, the overlayfs snapshotter's committed
// snapshots (each layer unpacked as containerd's applier unpacks it), and the
// two bbolt databases that describe them (containerd's metadata and the
// snapshotter's own), written the same way every time.
//
// What containerd reads changes between its releases; Schemas says what
// each release line this package knows reads, and the tree's dpkg database
// says which release the tree holds. The knowledge comes from containerd's
// own source (metadata/buckets.go, snapshots/storage/bolt.go, the unpacker
// and the CRI plugin's image pull); containerd itself is not a dependency:
// its module drags in gRPC, protobuf and the runtime for what is a handful
// of buckets, and its writers use the wall clock and random keys.
package containerd

import (
	"fmt"
	"strings"

	"github.com/stamp-dev/stamp/packages/deb"
)

// Schema is what one containerd release line reads from its state
// directory.
type Schema struct {
	// Line is the release line, e.g. "1.7".
	Line string
	// DBVersion is the metadata database's minor version (the v1 bucket's
	// "version" key): a release migrates an older one at start and refuses
	// a newer one.
	DBVersion int64
	// ConfigVersions are the config.toml versions the release reads.
	ConfigVersions []int64
	// SandboxImage is the CRI plugin's sandbox (pause) image when the
	// configuration names none.
	SandboxImage string
	// Pinned tells whether the CRI plugin labels the sandbox image
	// io.cri-containerd.pinned=pinned (from 1.7.3 on), so kubelet never
	// removes it.
	Pinned func(version string) bool
}

// Schemas are the release lines this package writes for, oldest first.
// Every line keeps the metadata database in schema "v1"; 2.0 moved
// sandboxes into it (minor version 4). The snapshotter's database and the
// content store have not changed since 1.6.
var Schemas = []Schema{
	{Line: "1.6", DBVersion: 3, ConfigVersions: []int64{1, 2}, SandboxImage: "registry.k8s.io/pause:3.6",
		Pinned: func(string) bool { return false }},
	{Line: "1.7", DBVersion: 3, ConfigVersions: []int64{1, 2}, SandboxImage: "registry.k8s.io/pause:3.8",
		Pinned: func(v string) bool { return deb.CompareVersions(v, "1.7.3") >= 0 }},
	{Line: "2.0", DBVersion: 4, ConfigVersions: []int64{2, 3}, SandboxImage: "registry.k8s.io/pause:3.10",
		Pinned: func(string) bool { return true }},
	{Line: "2.1", DBVersion: 4, ConfigVersions: []int64{2, 3}, SandboxImage: "registry.k8s.io/pause:3.10",
		Pinned: func(string) bool { return true }},
	{Line: "2.2", DBVersion: 4, ConfigVersions: []int64{2, 3}, SandboxImage: "registry.k8s.io/pause:3.10.1",
		Pinned: func(string) bool { return true }},
	{Line: "2.3", DBVersion: 4, ConfigVersions: []int64{2, 3}, SandboxImage: "registry.k8s.io/pause:3.10.2",
		Pinned: func(string) bool { return true }},
}

// UnknownVersionError is a containerd whose state this package cannot
// write.
type UnknownVersionError struct {
	Package, Version string
}

func (e *UnknownVersionError) Error() string {
	var lines []string
	for _, s := range Schemas {
		lines = append(lines, s.Line+".x")
	}
	return fmt.Sprintf("the tree's %s is version %s, whose state layout stamp does not know (it writes for containerd %s); "+
		"install one of those, or use images without into: containerd (archives imported at first boot)",
		e.Package, e.Version, strings.Join(lines, ", "))
}

// SchemaFor is the schema of a containerd package version as dpkg records
// it ("1.6.20~ds1-1+deb12u3", "1.7.24-1", "2.0.0").
func SchemaFor(pkg, version string) (Schema, error) {
	up := upstreamVersion(version)
	for _, s := range Schemas {
		if up == s.Line || strings.HasPrefix(up, s.Line+".") {
			return s, nil
		}
	}
	return Schema{}, &UnknownVersionError{Package: pkg, Version: version}
}

// upstreamVersion is containerd's own version inside a Debian version:
// without the epoch, the Debian revision and a "~ds1"/"+ds1" repack suffix.
func upstreamVersion(v string) string {
	if _, after, ok := strings.Cut(v, ":"); ok {
		v = after
	}
	if i := strings.LastIndex(v, "-"); i > 0 {
		v = v[:i]
	}
	if i := strings.IndexAny(v, "~+"); i > 0 {
		v = v[:i]
	}
	return v
}
