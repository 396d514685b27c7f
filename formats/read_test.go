package formats

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/compress"
	"github.com/stamp-dev/stamp/rootfs/rootfstest"
)

// readTestTree is tarTestTree with an embedded record, as every build has.
func readTestTree(t *testing.T) (*rootfs.Tree, string) {
	t.Helper()
	tree := tarTestTree(t)
	record := `{"apiVersion":"stamp.dev/v1alpha1","entries":[]}` + "\n"
	rootfstest.Dir(t, tree, "/usr/lib/stamp", 0o755, tarEpoch)
	rootfstest.File(t, tree, rootfs.RecordPath, 0o644, tarEpoch, record)
	return tree, record
}

func writeOutputFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReadEntriesDetectsEveryArchive(t *testing.T) {
	ctx := context.Background()
	tree, record := readTestTree(t)
	for _, alg := range []compress.Algorithm{compress.None, compress.Zstd, compress.Gzip} {
		var cpioBuf bytes.Buffer
		if err := WriteCpio(ctx, tree.View(), &cpioBuf, CpioOptions{Compression: alg, MTime: tarEpoch}); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			format string
			data   []byte
		}{
			{"tar", writeTarBytes(t, tree, TarOptions{Compression: alg})},
			{"cpio", cpioBuf.Bytes()},
		} {
			p := writeOutputFile(t, "out", tc.data)
			im, err := ReadImage(ctx, p)
			if err != nil {
				t.Fatalf("%s %s: %v", tc.format, alg, err)
			}
			if im.Format != tc.format || im.Compression != alg {
				t.Errorf("%s %s read as %s %s", tc.format, alg, im.Format, im.Compression)
			}
			if string(im.Record) != record {
				t.Errorf("%s %s: record %q, want %q", tc.format, alg, im.Record, record)
			}
			// A tar cannot hold the tree's socket; a cpio holds everything.
			want := tree.Entries()
			if tc.format == "tar" {
				want = tarWant(tree)
			}
			if !im.Complete || im.Tree.Digest() != rootfs.Digest(want) {
				t.Errorf("%s %s: the entries read back do not give the tree's digest", tc.format, alg)
			}
			if tc.format == "cpio" && len(im.Extra) != 1 {
				t.Errorf("cpio: the xattr list is not set apart as the format's own entry: %d extra", len(im.Extra))
			}
		}
	}
	if _, err := ReadImage(ctx, writeOutputFile(t, "x", []byte("plain text, not an image\n"))); err == nil ||
		!strings.Contains(err.Error(), "not an output format") {
		t.Errorf("a text file is read as %v", err)
	}
}

// TestReadRegionsPlaceEveryByte checks that the regions of a tar and a cpio
// name the member whose data holds a given byte, in the decompressed stream
// when the archive is compressed.
func TestReadRegionsPlaceEveryByte(t *testing.T) {
	ctx := context.Background()
	tree, _ := readTestTree(t)
	plain := writeTarBytes(t, tree, TarOptions{})
	var cpioBuf bytes.Buffer
	if err := WriteCpio(ctx, tree.View(), &cpioBuf, CpioOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, want  string
		plain, file []byte
	}{
		{"tar", "tar member ./home/capi/.profile (data)", plain, plain},
		{"tar.zst", "tar member ./home/capi/.profile (data)", plain, writeTarBytes(t, tree, TarOptions{Compression: compress.Zstd})},
		{"cpio", "cpio member home/capi/.profile (data)", cpioBuf.Bytes(), cpioBuf.Bytes()},
	} {
		im, err := ReadImage(ctx, writeOutputFile(t, tc.name, tc.file))
		if err != nil {
			t.Fatal(err)
		}
		off := bytes.Index(tc.plain, []byte("export PATH\n"))
		if off < 0 {
			t.Fatalf("%s: content not found", tc.name)
		}
		if got := im.Locate(int64(off) + 3); got != tc.want {
			t.Errorf("%s: offset %d is in %q, want %q", tc.name, off+3, got, tc.want)
		}
		if got := im.Locate(0); !strings.HasSuffix(got, "(header)") {
			t.Errorf("%s: offset 0 is in %q, want the first header", tc.name, got)
		}
		// Regions come in file order and never overlap.
		var end int64
		for _, r := range im.Regions {
			if r.Offset < end || r.Size <= 0 {
				t.Fatalf("%s: region %+v overlaps the one before (ending at %d)", tc.name, r, end)
			}
			end = r.Offset + r.Size
		}
		if end > int64(len(tc.plain)) {
			t.Errorf("%s: regions end at %d, beyond the %d bytes", tc.name, end, len(tc.plain))
		}
	}
}

// TestReadBackTreeIsAView holds the tree an archive reads back to, as an
// fs.FS, to what the built tree's view shows: the same entries, modes,
// symlink targets, directory listings and sizes, with every FileInfo's Sys
// the view's own entry. Its content is not unpacked, so opening a file
// fails with rootfs.ErrNoContent instead of reading.
func TestReadBackTreeIsAView(t *testing.T) {
	ctx := context.Background()
	tree, _ := readTestTree(t)
	built := tree.View()
	var cpioBuf bytes.Buffer
	if err := WriteCpio(ctx, built, &cpioBuf, CpioOptions{MTime: tarEpoch}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		format string
		data   []byte
	}{
		{"tar", writeTarBytes(t, tree, TarOptions{})},
		{"cpio", cpioBuf.Bytes()},
	} {
		im, err := ReadImage(ctx, writeOutputFile(t, "out", tc.data))
		if err != nil {
			t.Fatalf("%s: %v", tc.format, err)
		}
		got := im.Tree
		if got.HasContent() {
			t.Errorf("%s: the view read back claims content", tc.format)
		}
		fsys := got.FS()
		files := 0
		err = fs.WalkDir(fsys, ".", func(name string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			p := "/" + name
			if name == "." {
				p = "/"
			}
			want := built.Get(p)
			if want == nil {
				t.Errorf("%s: %s is not in the built tree", tc.format, p)
				return nil
			}
			fi, err := fs.Lstat(fsys, name)
			if err != nil {
				return err
			}
			if e, ok := fi.Sys().(*rootfs.Entry); !ok || e != got.Get(p) {
				t.Errorf("%s: %s: Sys is %v, want the view's entry", tc.format, p, fi.Sys())
			}
			if wm := rootfs.FileInfo(d.Name(), want).Mode(); fi.Mode() != wm || fi.Size() != want.Size {
				t.Errorf("%s: %s: mode %v size %d, built %v %d", tc.format, p, fi.Mode(), fi.Size(), wm, want.Size)
			}
			switch want.Type {
			case rootfs.TypeSymlink:
				if target, err := fs.ReadLink(fsys, name); err != nil || target != want.Target {
					t.Errorf("%s: %s: ReadLink %q, %v; built %q", tc.format, p, target, err, want.Target)
				}
			case rootfs.TypeDir:
				var names []string
				for _, n := range built.Children(p) {
					if tc.format != "tar" || built.Get(path.Join(p, n)).Type != rootfs.TypeSocket {
						names = append(names, n)
					}
				}
				des, err := fs.ReadDir(fsys, name)
				var gotNames []string
				for _, de := range des {
					gotNames = append(gotNames, de.Name())
				}
				if err != nil || !slices.Equal(gotNames, names) {
					t.Errorf("%s: %s: ReadDir %q, %v; built %q", tc.format, p, gotNames, err, names)
				}
			case rootfs.TypeRegular:
				files++
				if _, err := fsys.Open(name); !errors.Is(err, rootfs.ErrNoContent) {
					t.Errorf("%s: %s: Open %v, want rootfs.ErrNoContent", tc.format, p, err)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", tc.format, err)
		}
		if files == 0 || got.Digest() != rootfs.Digest(tarWantFor(tc.format, tree)) {
			t.Errorf("%s: %d files walked; digest %s, built %s", tc.format, files, got.Digest(), rootfs.Digest(tarWantFor(tc.format, tree)))
		}
	}
}

// tarWantFor is what an archive of format holds of tree: a tar cannot hold
// sockets.
func tarWantFor(format string, tree *rootfs.Tree) []*rootfs.Entry {
	if format == "tar" {
		return tarWant(tree)
	}
	return tree.Entries()
}
