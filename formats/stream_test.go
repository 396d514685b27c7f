package formats

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/rootfs"
)

// streamWriters are the formats that copy file contents straight from the
// tree into an archive.
var streamWriters = []struct {
	name  string
	write func(ctx context.Context, tree *rootfs.Tree, w io.Writer) error
}{
	{"tar", func(ctx context.Context, tree *rootfs.Tree, w io.Writer) error {
		return WriteTar(ctx, tree.View(), w, TarOptions{})
	}},
	{"cpio", func(ctx context.Context, tree *rootfs.Tree, w io.Writer) error {
		return WriteCpio(ctx, tree.View(), w, CpioOptions{})
	}},
}

// TestStreamWritersRefuseAFileChangedBehindTheIndex checks that a file whose
// size on disk no longer matches the index fails the write, naming the
// file, instead of making an archive that disagrees with its own headers.
func TestStreamWritersRefuseAFileChangedBehindTheIndex(t *testing.T) {
	for _, sw := range streamWriters {
		for _, change := range []string{"shrink", "grow"} {
			t.Run(sw.name+"/"+change, func(t *testing.T) {
				tree := tarTestTree(t)
				content := "root:x:0:0:root:/root:/bin/bash\n"
				if change == "shrink" {
					content = "root"
				} else {
					content += "intruder:x:0:0::/:/bin/sh\n"
				}
				if err := os.WriteFile(tree.DiskPath("/etc/passwd"), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
				err := sw.write(context.Background(), tree, io.Discard)
				if err == nil || !strings.Contains(err.Error(), "/etc/passwd") {
					t.Fatalf("err = %v, want one naming /etc/passwd", err)
				}
			})
		}
	}
}
