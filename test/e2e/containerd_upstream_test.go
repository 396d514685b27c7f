//go:build node

package e2e

import (
	"testing"

	"github.com/stamp-dev/stamp/test/harness"
)

// TestImagesIntoUpstreamContainerd is TestImagesIntoContainerd handed to
// the containerd image-builder puts on its nodes (2.3, the metadata schema
// of the 2.x line), built from the Go module proxy: the state stamp writes
// for it is what it reads, and its own pull unpacks the same snapshots.
func TestImagesIntoUpstreamContainerd(t *testing.T) {
	testImagesIntoContainerd(t, ctdFlavor{version: harness.UpstreamContainerdPackage(), bin: harness.UpstreamContainerd(t)})
}

// TestImagesIntoTreeContainerd installs the upstream containerd in the
// tree from a .deb of it (harness.UpstreamContainerdRepo), writes the
// images for the version the tree's dpkg database then records, and hands
// the state to the tree's own containerd.
func TestImagesIntoTreeContainerd(t *testing.T) {
	testImagesIntoContainerd(t, ctdFlavor{version: harness.UpstreamContainerdPackage(), bin: harness.UpstreamContainerd(t),
		repo: harness.UpstreamContainerdRepo(t)})
}
