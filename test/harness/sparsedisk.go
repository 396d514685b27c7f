package harness

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"testing"
)

// SparseUsrDisk writes a sparse raw disk of size bytes holding about data
// bytes of the host's /usr files (binaries and text, as a real root file
// system holds) in runs, with a hole of hole bytes after every 32 MiB, and
// returns its path. Disk encoders are benchmarked on it.
func SparseUsrDisk(tb testing.TB, size, data, hole int64) string {
	tb.Helper()
	p := filepath.Join(tb.TempDir(), "bench.raw")
	f, err := os.Create(p)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		tb.Fatal(err)
	}
	var files []string
	filepath.WalkDir("/usr", func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			files = append(files, p)
		}
		return nil
	})
	sort.Strings(files)
	var off, written int64
	for _, name := range files {
		if written >= data || off >= size-(16<<20) {
			break
		}
		r, err := os.Open(name)
		if err != nil {
			continue
		}
		n, _ := io.Copy(io.NewOffsetWriter(f, off), io.LimitReader(r, 8<<20))
		r.Close()
		written += n
		off += n
		if written/(32<<20) != (written-n)/(32<<20) {
			off += hole
		}
	}
	return p
}
