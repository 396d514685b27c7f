package erofs

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"testing"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/rootfstest"
)

// An image written with a store holding the superblock it comes out with
// is hashed as it is written, to the sha256 of its file; one whose
// superblock differs from the store's is not hashed (Summary.SHA256 is
// empty), and neither is one written with no store.
func TestHashedAsWritten(t *testing.T) {
	write := func(tr *rootfs.Tree, store SegmentStore) (data []byte, filed []FiledSegment, sum string) {
		t.Helper()
		o := testOptions()
		o.Segments, o.Filed = store, &filed
		img, st := writeImage(t, tr, o)
		data, err := os.ReadFile(img)
		if err != nil {
			t.Fatal(err)
		}
		return data, filed, st.SHA256
	}
	fileSum := func(b []byte) string {
		s := sha256.Sum256(b)
		return hex.EncodeToString(s[:])
	}
	tr := mixedTree(t)
	first, filed, sum := write(tr, nil)
	if sum != "" {
		t.Fatalf("an image written with no store says it was hashed: %s", sum)
	}

	// A file of a few more blocks moves the metadata, and the
	// superblock names where it starts.
	grown := mixedTree(t)
	rootfstest.Add(t, grown, "/grown", rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644, MTime: testEpoch}, noise(3, 5*blockSize))
	sealTree(t, grown)
	grownData, grownFiled, _ := write(grown, nil)

	t.Run("same superblock", func(t *testing.T) {
		data, _, sum := write(tr, newMemSegments(first, filed))
		if sum != fileSum(data) || sum != fileSum(first) {
			t.Fatalf("hashed as written: %q; the file's sha256 is %s", sum, fileSum(data))
		}
	})
	t.Run("file edited, same blocks", func(t *testing.T) {
		edited := mixedTree(t)
		if err := edited.Remove("/etc/hostname"); err != nil {
			t.Fatal(err)
		}
		rootfstest.Add(t, edited, "/etc/hostname", rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644, MTime: testEpoch}, "edge\n")
		sealTree(t, edited)
		data, _, sum := write(edited, newMemSegments(first, filed))
		if string(data) == string(first) {
			t.Fatal("the edited tree writes the same image")
		}
		if sum != fileSum(data) {
			t.Fatalf("hashed as written: %q; the file's sha256 is %s", sum, fileSum(data))
		}
	})
	t.Run("superblock moved", func(t *testing.T) {
		data, _, sum := write(grown, newMemSegments(first, filed))
		if sum != "" {
			t.Fatalf("an image whose superblock is not the store's says it was hashed: %s (file %s)", sum, fileSum(data))
		}
		if string(data) != string(grownData) {
			t.Fatal("the image differs from one written with no store")
		}
		// And back: the store's superblock is the grown image's.
		if _, _, sum := write(tr, newMemSegments(grownData, grownFiled)); sum != "" {
			t.Fatalf("an image whose superblock is not the store's says it was hashed: %s", sum)
		}
	})
}
