package formats

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadContainerDiskQcow2Fails is the regression test for a reader that
// dropped the error of the disk inside a qcow2 containerDisk: inspect, diff
// and verify then saw an image with no tree instead of a failure.
func TestReadContainerDiskQcow2Fails(t *testing.T) {
	ctx := context.Background()
	tree := rawTestTree(t, "amd64")
	img, _ := writeRaw(t, rawSource(tree, "amd64"), rawSpec())
	src := rawSource(tree, "amd64")
	src.From = img
	qdir := t.TempDir()
	res, err := qcow2Format{}.Write(ctx, src, &Spec{Format: "qcow2", Name: "qcow2", From: "raw"}, qdir, "node")
	if err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(qdir, res.Files[0])
	containerDisk := func(t *testing.T, qcow string) string {
		t.Helper()
		src := ociSource(t, tree)
		src.From = qcow
		dir, res := ociWrite(t, src, &Spec{Format: "oci", Options: &OCISpec{Kind: "containerdisk"}})
		return filepath.Join(dir, res.Files[0])
	}

	// The sound image is read through the qcow2 down to its partitions, so
	// the failure below comes from the corruption and nothing else.
	im, err := ReadImage(ctx, containerDisk(t, good))
	if err != nil {
		t.Fatalf("sound containerDisk: %v", err)
	}
	if len(im.Partitions) != 2 || im.Tree.Len() == 0 {
		t.Fatalf("sound containerDisk read as %d partitions and %d entries", len(im.Partitions), im.Tree.Len())
	}

	// Point guest cluster 0 (the GPT) at a host cluster far past the end
	// of the file. The header and the L1 table stay sound, so the qcow2
	// opens and the error comes only when the disk is read.
	b, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	be := binary.BigEndian
	l1 := be.Uint64(b[40:])
	l2 := be.Uint64(b[l1:]) &^ (1 << 63)
	if l2 == 0 || be.Uint64(b[l2:]) == 0 {
		t.Fatalf("guest cluster 0 is not allocated (L1 at %d, L2 at %d)", l1, l2)
	}
	be.PutUint64(b[l2:], 1<<63|1<<40)
	bad := filepath.Join(t.TempDir(), "node.qcow2")
	if err := os.WriteFile(bad, b, 0o644); err != nil {
		t.Fatal(err)
	}
	im, err = ReadImage(ctx, containerDisk(t, bad))
	if err == nil {
		t.Fatalf("a containerDisk whose qcow2 cannot be read was read as %d partitions and %d entries", len(im.Partitions), im.Tree.Len())
	}
	if msg := err.Error(); !strings.Contains(msg, "/disk/node.qcow2") || !strings.Contains(msg, "guest cluster 0") {
		t.Errorf("err %q, want one naming the disk and the unreadable cluster", msg)
	}
}
