package rootfs

import (
	"bufio"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// RecordPath is where the build's own record lives inside the image. It is
// excluded from the tree digest, so the record can name the digest.
const RecordPath = "/usr/lib/stamp/manifest.json"

// recordDir only ever holds the record, so it is left out with it.
const recordDir = "/usr/lib/stamp"

// Entries returns every entry in byte order of the path.
func (t *Tree) Entries() []*Entry {
	out := make([]*Entry, 0, len(t.entries))
	for _, p := range t.Paths() {
		out = append(out, t.entries[p])
	}
	return out
}

// ManifestLine formats one entry the way manifest.txt lists it: the path,
// then key=value fields in a fixed order. Strings are escaped so a line never
// holds a space, newline or backslash that is not part of the syntax. link=
// names the first path (in byte order) of a hard-link group; first maps each
// shared inode to that path.
func ManifestLine(e *Entry, first map[*Inode]string, withOrigin bool) string {
	var b strings.Builder
	b.WriteString(escape(e.Path))
	fmt.Fprintf(&b, " type=%s mode=%04o uid=%d gid=%d mtime=%d", e.Type, e.Perm, e.UID, e.GID, e.MTime.Unix())
	switch e.Type {
	case TypeRegular:
		fmt.Fprintf(&b, " size=%d sha256=%s", e.Size, e.Digest)
	case TypeSymlink:
		b.WriteString(" target=" + escape(e.Target))
	case TypeChar, TypeBlock:
		fmt.Fprintf(&b, " dev=%d,%d", e.Major, e.Minor)
	}
	if e.nlink > 1 && first != nil {
		fmt.Fprintf(&b, " nlink=%d", e.nlink)
		if f := first[e.Inode]; f != "" && f != e.Path {
			b.WriteString(" link=" + escape(f))
		}
	}
	for _, name := range e.XattrNames() {
		b.WriteString(" xattr." + escape(name) + "=" + base64.StdEncoding.EncodeToString([]byte(e.Xattrs[name])))
	}
	if withOrigin {
		if e.Origin.Layer != "" {
			b.WriteString(" origin.layer=" + escape(e.Origin.Layer))
		}
		if e.Origin.Input != "" {
			b.WriteString(" origin.input=" + escape(e.Origin.Input))
		}
		if e.Origin.Member != "" {
			b.WriteString(" origin.member=" + escape(e.Origin.Member))
		}
	}
	return b.String()
}

// FirstLinks maps every inode shared by several entries to the first of its
// paths in byte order. entries must be sorted.
func FirstLinks(entries []*Entry) map[*Inode]string {
	first := map[*Inode]string{}
	for _, e := range entries {
		if e.nlink > 1 {
			if _, ok := first[e.Inode]; !ok {
				first[e.Inode] = e.Path
			}
		}
	}
	return first
}

// SetNlink sets the link count of entries read back from an output, where no
// Tree counts them.
func SetNlink(entries []*Entry) {
	counts := map[*Inode]int{}
	for _, e := range entries {
		counts[e.Inode]++
	}
	for _, e := range entries {
		e.nlink = counts[e.Inode]
	}
}

// WriteManifest writes one ManifestLine per entry. entries must be sorted.
func WriteManifest(w io.Writer, entries []*Entry, withOrigin bool) error {
	bw := bufio.NewWriter(w)
	first := FirstLinks(entries)
	for _, e := range entries {
		if _, err := bw.WriteString(ManifestLine(e, first, withOrigin) + "\n"); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// Digest is the tree digest: the sha256 of the manifest without origins and
// without the embedded record, as "sha256:<hex>".
func Digest(entries []*Entry) string {
	h := sha256.New()
	first := FirstLinks(entries)
	for _, e := range entries {
		if e.Path == RecordPath || e.Path == recordDir {
			continue
		}
		io.WriteString(h, ManifestLine(e, first, false)+"\n")
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// Escape encodes bytes that would break a line-based syntax (space, control
// bytes, non-ASCII, backslash, '=') as \ooo, as mtree and getfattr do.
func Escape(s string) string { return escape(s) }

// Unescape reverses Escape.
func Unescape(s string) (string, error) { return unescape(s) }

func escape(s string) string {
	clean := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || c == '\\' || c == '=' {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || c == '\\' || c == '=' {
			fmt.Fprintf(&b, "\\%03o", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

func unescape(s string) (string, error) {
	if !strings.Contains(s, "\\") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		if i+4 > len(s) {
			return "", fmt.Errorf("bad escape in %q", s)
		}
		v, err := strconv.ParseUint(s[i+1:i+4], 8, 8)
		if err != nil {
			return "", fmt.Errorf("bad escape in %q", s)
		}
		b.WriteByte(byte(v))
		i += 3
	}
	return b.String(), nil
}

// ParseManifest reads manifest.txt back into entries (hard links share an
// inode; origins are kept). Content digests are taken as written.
func ParseManifest(r io.Reader) ([]*Entry, error) {
	var out []*Entry
	byPath := map[string]*Entry{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	line := 0
	for sc.Scan() {
		line++
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		p, err := unescape(fields[0])
		if err != nil {
			return nil, fmt.Errorf("manifest line %d: %w", line, err)
		}
		e := &Entry{Path: p, Inode: &Inode{}}
		var link string
		for _, f := range fields[1:] {
			k, v, ok := strings.Cut(f, "=")
			if !ok {
				return nil, fmt.Errorf("manifest line %d: field %q has no value", line, f)
			}
			if err := setField(e, k, v, &link); err != nil {
				return nil, fmt.Errorf("manifest line %d: %s: %w", line, k, err)
			}
		}
		if link != "" {
			t := byPath[link]
			if t == nil {
				return nil, fmt.Errorf("manifest line %d: link to unknown path %q", line, link)
			}
			e.Inode = t.Inode
		}
		byPath[p] = e
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	SetNlink(out)
	return out, nil
}

func setField(e *Entry, k, v string, link *string) error {
	var err error
	u := func() uint32 {
		var n uint64
		n, err = strconv.ParseUint(v, 10, 32)
		return uint32(n)
	}
	switch {
	case k == "type":
		e.Type, err = ParseType(v)
	case k == "mode":
		var n uint64
		n, err = strconv.ParseUint(v, 8, 32)
		e.Perm = uint32(n)
	case k == "uid":
		e.UID = u()
	case k == "gid":
		e.GID = u()
	case k == "mtime":
		var n int64
		n, err = strconv.ParseInt(v, 10, 64)
		e.MTime = time.Unix(n, 0).UTC()
	case k == "size":
		e.Size, err = strconv.ParseInt(v, 10, 64)
	case k == "sha256":
		e.Digest = v
	case k == "target":
		e.Target, err = unescape(v)
	case k == "dev":
		ma, mi, _ := strings.Cut(v, ",")
		var a, b uint64
		if a, err = strconv.ParseUint(ma, 10, 32); err == nil {
			b, err = strconv.ParseUint(mi, 10, 32)
		}
		e.Major, e.Minor = uint32(a), uint32(b)
	case k == "nlink":
	case k == "link":
		*link, err = unescape(v)
	case strings.HasPrefix(k, "xattr."):
		var name string
		var val []byte
		if name, err = unescape(k[len("xattr."):]); err == nil {
			val, err = base64.StdEncoding.DecodeString(v)
		}
		if e.Xattrs == nil {
			e.Xattrs = map[string]string{}
		}
		e.Xattrs[name] = string(val)
	case k == "origin.layer":
		e.Origin.Layer, err = unescape(v)
	case k == "origin.input":
		e.Origin.Input, err = unescape(v)
	case k == "origin.member":
		e.Origin.Member, err = unescape(v)
	default:
		return fmt.Errorf("unknown field")
	}
	return err
}
