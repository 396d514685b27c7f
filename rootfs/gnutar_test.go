package rootfs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Archives made by real GNU tar in its own formats (GNU long names and
// links, GNU sparse, old and new sparse PAX) extract to the same content.
func TestExtractGNUTarFormats(t *testing.T) {
	if _, err := exec.LookPath("tar"); err != nil {
		t.Fatal("GNU tar is needed: run test/scripts/deps.sh")
	}
	src := t.TempDir()
	long := strings.Repeat("long-directory-name/", 8) + strings.Repeat("f", 120)
	os.MkdirAll(filepath.Join(src, filepath.Dir(long)), 0o755)
	os.WriteFile(filepath.Join(src, long), []byte("deep"), 0o644)
	os.Symlink(long, filepath.Join(src, "longlink-"+strings.Repeat("s", 100)))
	sparse := filepath.Join(src, "sparse.img")
	f, _ := os.Create(sparse)
	f.WriteAt([]byte("start"), 0)
	f.WriteAt([]byte("middle"), 64<<20)
	f.Truncate(200 << 20)
	f.Close()
	os.Link(filepath.Join(src, long), filepath.Join(src, "hardlink"))
	want := map[string]string{}
	for _, p := range []string{long, "sparse.img", "hardlink"} {
		b, _ := os.ReadFile(filepath.Join(src, p))
		s := sha256.Sum256(b)
		want["/"+p] = hex.EncodeToString(s[:])
	}
	for _, format := range []string{"gnu", "posix", "oldgnu"} {
		t.Run(format, func(t *testing.T) {
			archive := filepath.Join(t.TempDir(), "a.tar")
			cmd := exec.Command("tar", "--format="+format, "--sparse", "-cf", archive, "-C", src, ".")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("tar: %v\n%s", err, out)
			}
			tr, _ := sandbox(t)
			af, _ := os.Open(archive)
			defer af.Close()
			if _, err := Extract(context.Background(), tr, af, ExtractOptions{}); err != nil {
				t.Fatal(err)
			}
			for p, sum := range want {
				e := tr.Get(p)
				if e == nil || e.Digest != sum {
					t.Fatalf("%s: got %+v", p, e)
				}
			}
			if tr.Get("/hardlink").Inode != tr.Get("/"+long).Inode {
				t.Error("hard link not shared")
			}
			if e := tr.Get("/longlink-" + strings.Repeat("s", 100)); e == nil || e.Target != long {
				t.Error("long symlink target lost")
			}
			if e := tr.Get("/sparse.img"); e.Size != 200<<20 {
				t.Errorf("sparse size %d", e.Size)
			}
		})
	}
}
