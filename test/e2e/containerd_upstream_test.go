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
