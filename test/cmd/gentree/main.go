// Command gentree writes a deterministic tar of a realistic-looking tree for
// benchmarks: many small files, some large ones, directories, symlinks and
// hard links, semi-compressible content.
package main

import (
	"archive/tar"
	"bufio"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"time"
)

func main() {
	out := flag.String("o", "tree.tar", "output tar")
	total := flag.Int64("size", 300<<20, "approximate bytes of file content")
	entries := flag.Int("entries", 10000, "approximate number of entries")
	flag.Parse()
	if err := run(*out, *total, *entries); err != nil {
		fmt.Fprintln(os.Stderr, "gentree:", err)
		os.Exit(1)
	}
}

func run(out string, total int64, entries int) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	tw := tar.NewWriter(bw)
	rng := rand.New(rand.NewPCG(1, 2))
	mtime := time.Unix(1690000000, 0)
	dirs := entries / 20
	files := entries - dirs - entries/50
	// A few large files carry half the bytes, as binaries do in a real root.
	large := 20
	largeSize := total / 2 / int64(large)
	smallSize := (total / 2) / int64(files-large)
	word := make([]byte, 64<<10)
	for i := range word {
		word[i] = byte("abcdefghijklmnopqrstuvwxyz0123456789 \n"[rng.IntN(38)])
	}
	for d := 0; d < dirs; d++ {
		if err := tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("d%03d/", d), Typeflag: tar.TypeDir, Mode: 0o755, ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return err
		}
	}
	for i := 0; i < files; i++ {
		size := smallSize/2 + rng.Int64N(smallSize+1)
		if i < large {
			size = largeSize
		}
		name := fmt.Sprintf("d%03d/f%05d", i%dirs, i)
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: size, ModTime: mtime, Uid: i % 3, Format: tar.FormatPAX}); err != nil {
			return err
		}
		for left := size; left > 0; {
			n := min(left, int64(len(word)))
			off := rng.IntN(len(word) - int(n) + 1)
			if _, err := tw.Write(word[off : off+int(n)]); err != nil {
				return err
			}
			left -= n
		}
	}
	for i := 0; i < entries/50; i++ {
		h := &tar.Header{Name: fmt.Sprintf("d%03d/l%05d", i%dirs, i), Typeflag: tar.TypeSymlink, Linkname: fmt.Sprintf("f%05d", i), ModTime: mtime, Mode: 0o777, Format: tar.FormatPAX}
		if i%2 == 1 {
			h.Typeflag, h.Linkname = tar.TypeLink, fmt.Sprintf("d%03d/f%05d", i%dirs, i)
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return bw.Flush()
}
