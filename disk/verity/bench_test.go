package verity

import (
	"context"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stamp-dev/stamp/disk"
	"github.com/stamp-dev/stamp/test/harness"
)

// BenchmarkFormatVsVeritysetup hashes the same 1 GiB partition of /usr
// data (the host's /usr, copied back to back) with Format and with
// veritysetup format (cryptsetup-bin), both with the same salt and UUID,
// and reports each one's throughput.
func BenchmarkFormatVsVeritysetup(b *testing.B) {
	veritysetup := harness.Tool(b, "veritysetup")
	const size = 1 << 30
	data := harness.SparseUsrDisk(b, size, size, 0)
	salt, uuid := disk.VeritySalt("bench", "usr-verity"), disk.VerityUUID("bench", "usr-verity")
	hash := filepath.Join(b.TempDir(), "hash.img")
	f, err := os.Open(data)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	b.Run("stamp", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			h, err := os.Create(hash)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := Format(context.Background(), f, size, h, Options{Salt: salt, UUID: uuid, Extents: disk.DataExtents(f, size)}); err != nil {
				b.Fatal(err)
			}
			h.Close()
		}
	})
	b.Run("veritysetup", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			os.WriteFile(hash, nil, 0o644)
			out, err := exec.Command(veritysetup, "format", "--salt="+hex.EncodeToString(salt), "--uuid="+disk.FormatUUID(uuid), data, hash).CombinedOutput()
			if err != nil {
				b.Fatalf("veritysetup format: %v\n%s", err, out)
			}
		}
	})
}
