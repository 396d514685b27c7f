// Package readback reads stamp's outputs back, without mounting them, and
// compares them: what inspect prints and checks, what diff reports, and the
// comparison half of verify (two builds' output directories, or a build and
// an earlier SHA256SUMS). It reads through formats' readers and knows no
// recipe: it sits under formats, whose imports it keeps.
package readback

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/stamp-dev/stamp/formats"
	"github.com/stamp-dev/stamp/rootfs"
)

// ChangeKind says what a Change is: a path added, removed or changed, or a
// structural fact of the format. diff prints it as the change's first word.
type ChangeKind string

const (
	Added     ChangeKind = "added"
	Removed   ChangeKind = "removed"
	Changed   ChangeKind = "changed"
	Structure ChangeKind = "structure"
)

// Fields a change can name. They are the words verify and diff print.
const (
	FieldType    = "type"
	FieldContent = "content"
	FieldMode    = "mode"
	FieldOwner   = "owner"
	FieldMTime   = "mtime"
	FieldXattr   = "xattr"
	FieldTarget  = "target"
	FieldDevice  = "device"
	FieldLink    = "link"
)

// Change is one difference between two images: a path added, removed or
// changed, or a structural fact of the format (a GUID, a superblock field).
type Change struct {
	Kind   ChangeKind
	Path   string // the tree path, or the fact's key for Structure
	Fields []FieldChange
}

// FieldChange is one field that differs, with both values as text.
type FieldChange struct {
	Field string
	A, B  string
}

func (c Change) String() string {
	if len(c.Fields) == 0 {
		return string(c.Kind) + " " + c.Path
	}
	var parts []string
	for _, f := range c.Fields {
		parts = append(parts, fmt.Sprintf("%s (%s -> %s)", f.Field, f.A, f.B))
	}
	return string(c.Kind) + " " + c.Path + ": " + strings.Join(parts, ", ")
}

// FieldNames lists the fields of a change, without values.
func (c Change) FieldNames() []string {
	out := make([]string, len(c.Fields))
	for i, f := range c.Fields {
		out[i] = f.Field
	}
	return out
}

// DiffOptions configure Diff.
type DiffOptions struct {
	// IncludeRecord compares the embedded record (rootfs.RecordPath) too. It
	// names every input and origin, so it differs whenever anything does.
	IncludeRecord bool
}

// Diff reads two images, of any formats stamp reads, and compares them entry
// by entry.
func Diff(ctx context.Context, a, b string, o DiffOptions) ([]Change, error) {
	ia, err := formats.ReadImage(ctx, a)
	if err != nil {
		return nil, err
	}
	ib, err := formats.ReadImage(ctx, b)
	if err != nil {
		return nil, err
	}
	return DiffImages(ia, ib, o), nil
}

// DiffImages compares two images read back. Entries the formats add beyond
// the tree, and structural facts, are compared only between images of the
// same format: a raw disk and a tar of the same tree hold the same entries
// but a tar has no partition table.
func DiffImages(a, b *formats.Image, o DiffOptions) []Change {
	changes := DiffTrees(a.Tree, b.Tree, o)
	if a.Format == b.Format {
		changes = append(changes, diffEntries(a.Extra, b.Extra, o.keep)...)
		changes = append(changes, diffFacts(a, b)...)
	}
	return changes
}

// DiffTrees compares two trees entry by entry, in byte order of path,
// whether built (rootfs.Seal's view) or read back (formats.Image.Tree): both
// are the same read-only view.
func DiffTrees(a, b *rootfs.Sealed, o DiffOptions) []Change {
	return diffEntries(a.Entries(), b.Entries(), o.keep)
}

// keep reports whether the entry e is compared.
func (o DiffOptions) keep(e *rootfs.Entry) bool {
	return o.IncludeRecord || !isRecordPath(e.Path)
}

func isRecordPath(p string) bool {
	return p == rootfs.RecordPath
}

// diffEntries walks two sorted entry lists side by side.
func diffEntries(a, b []*rootfs.Entry, keep func(*rootfs.Entry) bool) []Change {
	la, lb := rootfs.FirstLinks(a), rootfs.FirstLinks(b)
	var out []Change
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j >= len(b) || (i < len(a) && a[i].Path < b[j].Path):
			if keep(a[i]) {
				out = append(out, Change{Kind: Removed, Path: a[i].Path})
			}
			i++
		case i >= len(a) || b[j].Path < a[i].Path:
			if keep(b[j]) {
				out = append(out, Change{Kind: Added, Path: b[j].Path})
			}
			j++
		default:
			if keep(a[i]) {
				if f := entryFields(a[i], b[j], la, lb); len(f) > 0 {
					out = append(out, Change{Kind: Changed, Path: a[i].Path, Fields: f})
				}
			}
			i++
			j++
		}
	}
	return out
}

// entryFields lists every field in which two entries at the same path
// differ. A type change says only that: the other fields mean different
// things for different types.
func entryFields(a, b *rootfs.Entry, la, lb map[*rootfs.Inode]string) []FieldChange {
	if a.Type != b.Type {
		return []FieldChange{{FieldType, a.Type.String(), b.Type.String()}}
	}
	var out []FieldChange
	add := func(field, x, y string) {
		if x != y {
			out = append(out, FieldChange{field, x, y})
		}
	}
	if a.Type == rootfs.TypeRegular {
		add(FieldContent, contentText(a), contentText(b))
	}
	add(FieldMode, fmt.Sprintf("%04o", a.Perm), fmt.Sprintf("%04o", b.Perm))
	add(FieldOwner, fmt.Sprintf("%d:%d", a.UID, a.GID), fmt.Sprintf("%d:%d", b.UID, b.GID))
	add(FieldMTime, fmt.Sprint(a.MTime.Unix()), fmt.Sprint(b.MTime.Unix()))
	add(FieldTarget, a.Target, b.Target)
	if a.Type.IsDevice() {
		add(FieldDevice, fmt.Sprintf("%d,%d", a.Major, a.Minor), fmt.Sprintf("%d,%d", b.Major, b.Minor))
	}
	add(FieldXattr, xattrText(a), xattrText(b))
	if a.Type != rootfs.TypeDir {
		add(FieldLink, linkText(a, la), linkText(b, lb))
	}
	return out
}

func contentText(e *rootfs.Entry) string {
	d := e.Digest
	if len(d) > 12 {
		d = d[:12]
	}
	return fmt.Sprintf("%d bytes sha256 %s", e.Size, d)
}

func xattrText(e *rootfs.Entry) string {
	var parts []string
	for _, n := range e.XattrNames() {
		parts = append(parts, n+"="+base64.StdEncoding.EncodeToString([]byte(e.Xattrs[n])))
	}
	return strings.Join(parts, " ")
}

// linkText names the hard-link group of an entry by its first path, so two
// images agree when the same paths share data.
func linkText(e *rootfs.Entry, first map[*rootfs.Inode]string) string {
	if e.Nlink() < 2 {
		return "none"
	}
	return fmt.Sprintf("%d links, first %s", e.Nlink(), first[e.Inode])
}

// facts lists an image's structural facts and its file systems', the
// latter keyed by partition and type ("p2.ext4.uuid").
func facts(im *formats.Image) []formats.Fact {
	out := append([]formats.Fact(nil), im.Facts...)
	for _, fs := range im.Filesystems {
		prefix := fmt.Sprintf("p%d.%s.", fs.Partition, fs.Type)
		if fs.Partition == 0 {
			prefix = fs.Type + "."
		}
		for _, f := range fs.Facts {
			out = append(out, formats.Fact{Key: prefix + f.Key, Value: f.Value})
		}
	}
	return out
}

// diffFacts compares structural facts by key; the order of facts is the
// reader's and is kept.
func diffFacts(a, b *formats.Image) []Change {
	var out []Change
	fa, fb := facts(a), facts(b)
	bv := map[string]string{}
	for _, f := range fb {
		bv[f.Key] = f.Value
	}
	seen := map[string]bool{}
	for _, f := range fa {
		seen[f.Key] = true
		v, ok := bv[f.Key]
		switch {
		case !ok:
			out = append(out, Change{Kind: Structure, Path: f.Key, Fields: []FieldChange{{"value", f.Value, "(none)"}}})
		case v != f.Value:
			out = append(out, Change{Kind: Structure, Path: f.Key, Fields: []FieldChange{{"value", f.Value, v}}})
		}
	}
	for _, f := range fb {
		if !seen[f.Key] {
			out = append(out, Change{Kind: Structure, Path: f.Key, Fields: []FieldChange{{"value", "(none)", f.Value}}})
		}
	}
	for i := 0; i < len(a.Partitions) || i < len(b.Partitions); i++ {
		var pa, pb string
		if i < len(a.Partitions) {
			pa = partitionText(a.Partitions[i])
		}
		if i < len(b.Partitions) {
			pb = partitionText(b.Partitions[i])
		}
		if pa != pb {
			out = append(out, Change{Kind: Structure, Path: fmt.Sprintf("partition %d", i+1), Fields: []FieldChange{{"table entry", orNone(pa), orNone(pb)}}})
		}
	}
	return out
}

func partitionText(p formats.Partition) string {
	return fmt.Sprintf("name=%s type=%s guid=%s start=%d size=%d fs=%s", p.Name, p.Type, p.GUID, p.Start, p.Size, p.Filesystem)
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
