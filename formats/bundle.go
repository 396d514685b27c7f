package formats

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/hashio"
)

// What the network-boot bundles (pxe, live) write alike.

// writeKernel writes the kernel a bundle boots: img when kernelImage
// decompressed it, else the tree's file at kpath as it is.
func writeKernel(ctx context.Context, w io.Writer, t *rootfs.Sealed, kpath string, img []byte) error {
	if img != nil {
		_, err := w.Write(img)
		return err
	}
	f, err := t.Open(kpath)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, &tarCtxReader{ctx: ctx, r: f})
	return err
}

// sha256Sums is a SHA256SUMS file of a bundle's files, in the order given,
// as sha256sum -c reads it.
func sha256Sums(files []string, sums map[string]string) []byte {
	var b bytes.Buffer
	for _, f := range files {
		fmt.Fprintf(&b, "%s  %s\n", sums[f], f)
	}
	return b.Bytes()
}

// bundleWriter writes a bundle's files into dir, each hashed as it is
// written.
type bundleWriter struct {
	dir   string
	files []string          // written so far, by name in the bundle
	sums  map[string]string // hex sha256, by name in the bundle
}

func newBundleWriter(dir string) *bundleWriter {
	return &bundleWriter{dir: dir, sums: map[string]string{}}
}

// put writes the file name (slash-separated, under dir) with what fill
// writes.
func (bw *bundleWriter) put(name string, fill func(w io.Writer) error) error {
	h := sha256.New()
	err := writeFile(filepath.Join(bw.dir, filepath.FromSlash(name)), func(f *os.File) error {
		// Hashed as written, so nothing reads it back: past the page
		// cache.
		ds := hashio.NewDirectStream(f)
		err := fill(io.MultiWriter(ds, h))
		if cerr := ds.Close(); err == nil {
			err = cerr
		}
		return err
	})
	if err != nil {
		return err
	}
	bw.sums[name] = hex.EncodeToString(h.Sum(nil))
	bw.files = append(bw.files, name)
	return nil
}

// sumsIn are the sums of the files written so far, by their names under
// the output directory that holds the bundle as dir: what Result.Sums
// wants, so no file is read again to be hashed.
func (bw *bundleWriter) sumsIn(dir string) map[string]string {
	out := make(map[string]string, len(bw.sums))
	for name, sum := range bw.sums {
		out[path.Join(dir, name)] = sum
	}
	return out
}

// putString writes the file name holding s.
func (bw *bundleWriter) putString(name, s string) error {
	return bw.put(name, func(w io.Writer) error { _, err := io.WriteString(w, s); return err })
}

// putSums writes the SHA256SUMS file name of the files written so far,
// and returns its content; files is sorted after, the sums file among them.
func (bw *bundleWriter) putSums(name string) ([]byte, error) {
	sort.Strings(bw.files)
	sumText := sha256Sums(bw.files, bw.sums)
	if err := bw.put(name, func(w io.Writer) error { _, err := w.Write(sumText); return err }); err != nil {
		return nil, err
	}
	sort.Strings(bw.files)
	return sumText, nil
}
