package verity

import (
	"bytes"
	"context"
	"encoding/hex"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stamp-dev/stamp/disk"
	"github.com/stamp-dev/stamp/test/harness"
)

// dataFile writes blocks data blocks, every third one random and the rest
// left as holes, so the extents matter.
func dataFile(t *testing.T, dir string, blocks int, seed int64) string {
	t.Helper()
	p := filepath.Join(dir, "data.img")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(int64(blocks) * BlockSize); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(seed))
	b := make([]byte, BlockSize)
	for i := 0; i < blocks; i++ {
		if i%3 != 0 {
			continue
		}
		rng.Read(b)
		if _, err := f.WriteAt(b, int64(i)*BlockSize); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// TestFormatMatchesVeritysetup formats data devices of a size that needs no
// tree, one that fills a hash block exactly, one a block more, and one
// three levels deep, with stamp and with veritysetup format (Debian's
// cryptsetup-bin) given the same salt and UUID, and compares the root hash
// and every byte of the hash device.
func TestFormatMatchesVeritysetup(t *testing.T) {
	veritysetup := harness.Tool(t, "veritysetup")
	salt, _ := hex.DecodeString("5f8a6c1e0d3b2a4958e7f6c5b4a3928170615243342516f7e8d9cab0b1c2d3e4")
	uuid := disk.UUID("verity-test", "hash")
	rootRE := regexp.MustCompile(`(?m)^Root hash:\s+([0-9a-f]+)$`)
	for _, blocks := range []int{1, 128, 129, 128*128 + 5} {
		dir := t.TempDir()
		data := dataFile(t, dir, blocks, int64(blocks))
		theirs := filepath.Join(dir, "theirs.hash")
		if err := os.WriteFile(theirs, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(veritysetup, "format", "--hash=sha256", "--data-block-size=4096", "--hash-block-size=4096",
			"--format=1", "--salt="+hex.EncodeToString(salt), "--uuid="+disk.FormatUUID(uuid), data, theirs).CombinedOutput()
		if err != nil {
			t.Fatalf("veritysetup format: %v\n%s", err, out)
		}
		m := rootRE.FindSubmatch(out)
		if m == nil {
			t.Fatalf("veritysetup printed no root hash:\n%s", out)
		}
		want, err := os.ReadFile(theirs)
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(data)
		if err != nil {
			t.Fatal(err)
		}
		size := int64(blocks) * BlockSize
		for _, ext := range [][]disk.Extent{nil, disk.DataExtents(f, size)} {
			for _, workers := range []int{1, 3} {
				var hash sparseBuffer
				r, err := Format(context.Background(), f, size, &hash, Options{Salt: salt, UUID: uuid, Extents: ext, Workers: workers})
				if err != nil {
					t.Fatal(err)
				}
				if r.RootHashHex() != string(m[1]) {
					t.Errorf("%d blocks: root hash %s, veritysetup's %s", blocks, r.RootHashHex(), m[1])
				}
				got := hash.Bytes()
				if HashSize(size) != r.Size || int64(len(got)) > r.Size {
					t.Errorf("%d blocks: HashSize %d, Format's size %d, wrote %d bytes", blocks, HashSize(size), r.Size, len(got))
				}
				got = append(got, make([]byte, max(0, len(want)-len(got)))...)
				if !bytes.Equal(got, want) {
					t.Errorf("%d blocks (%d extents, %d workers): the hash device differs from veritysetup's (%d and %d bytes)", blocks, len(ext), workers, len(got), len(want))
				}
			}
		}
		sb, err := ReadSuperblock(bytes.NewReader(want))
		if err != nil {
			t.Fatal(err)
		}
		if sb.DataBlocks != uint64(blocks) || !bytes.Equal(sb.Salt, salt) || sb.UUID != uuid || sb.Algorithm != "sha256" || sb.BlockSize != BlockSize {
			t.Errorf("veritysetup's superblock reads back as %+v", sb)
		}
		f.Close()
	}
}

// sparseBuffer is an io.WriterAt into memory.
type sparseBuffer struct{ b []byte }

func (s *sparseBuffer) WriteAt(p []byte, off int64) (int, error) {
	if end := off + int64(len(p)); end > int64(len(s.b)) {
		s.b = append(s.b, make([]byte, end-int64(len(s.b)))...)
	}
	copy(s.b[off:], p)
	return len(p), nil
}

func (s *sparseBuffer) Bytes() []byte { return s.b }
