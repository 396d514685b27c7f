package formats

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/stamp-dev/stamp/rootfs"
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
