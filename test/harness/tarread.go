package harness

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// TarEntry is everything a tar member says about a path, in a form that
// compares with ==-style checks across formats.
type TarEntry struct {
	Name     string // clean absolute path: "/", "/usr/bin/ping"
	RawName  string // the name as stored, e.g. "./usr/bin/"
	Type     byte   // tar.TypeReg, tar.TypeDir, ... (TypeRegA is reported as TypeReg)
	Mode     int64  // permission bits with setuid, setgid and sticky (07777)
	UID, GID int
	Size     int64
	SHA256   string // hex digest of the content; regular files only
	Linkname string // symlink target as stored, or hard-link target as a clean absolute path
	DevMajor int64
	DevMinor int64
	ModTime  time.Time
	Xattrs   map[string]string // from SCHILY.xattr.* PAX records; nil when none
}

// String is one line that names every field, for diffs in test failures.
func (e TarEntry) String() string {
	var x []string
	for _, k := range sortedKeys(e.Xattrs) {
		x = append(x, fmt.Sprintf("%s=%q", k, e.Xattrs[k]))
	}
	return fmt.Sprintf("%s type=%c mode=%04o owner=%d:%d size=%d sha256=%s link=%q dev=%d,%d mtime=%d xattrs=[%s]",
		e.Name, e.Type, e.Mode, e.UID, e.GID, e.Size, e.SHA256, e.Linkname, e.DevMajor, e.DevMinor,
		e.ModTime.Unix(), strings.Join(x, " "))
}

func sortedKeys(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}

// CleanTarName turns a member name into a clean absolute path.
func CleanTarName(name string) string {
	k := strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(name, "./"), "/"), "/")
	if k == "" || k == "." {
		return "/"
	}
	return "/" + k
}

// ReadTar reads a tar file, plain or compressed with gzip, zstd or xz, and
// fails the test on any error.
func ReadTar(t testing.TB, path string) []TarEntry {
	t.Helper()
	entries, err := ReadTarFile(path)
	if err != nil {
		t.Fatalf("ReadTar: %v", err)
	}
	return entries
}

// ReadTarFile is ReadTar for callers without a testing.TB.
func ReadTarFile(path string) ([]TarEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	entries, err := ReadTarStream(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return entries, nil
}

// ReadTarStream reads a whole tar stream, compressed or not, in stream order.
func ReadTarStream(r io.Reader) ([]TarEntry, error) {
	dr, err := decompressReader(r)
	if err != nil {
		return nil, err
	}
	defer dr.Close()
	tr := tar.NewReader(dr)
	var out []TarEntry
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		e := TarEntry{
			Name:     CleanTarName(h.Name),
			RawName:  h.Name,
			Type:     h.Typeflag,
			Mode:     h.Mode & 0o7777,
			UID:      h.Uid,
			GID:      h.Gid,
			Size:     h.Size,
			Linkname: h.Linkname,
			DevMajor: h.Devmajor,
			DevMinor: h.Devminor,
			ModTime:  h.ModTime,
		}
		if h.Typeflag == tar.TypeLink {
			e.Linkname = CleanTarName(h.Linkname)
		}
		if e.Type == tar.TypeReg {
			s := sha256.New()
			if _, err := io.Copy(s, tr); err != nil {
				return nil, fmt.Errorf("%s: %w", h.Name, err)
			}
			e.SHA256 = hex.EncodeToString(s.Sum(nil))
		}
		for k, v := range h.PAXRecords {
			if name, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok {
				if e.Xattrs == nil {
					e.Xattrs = map[string]string{}
				}
				e.Xattrs[name] = v
			}
		}
		out = append(out, e)
	}
}

// TarIndex maps each entry's Name to it. A later entry of the same name wins,
// as it does when the archive is extracted.
func TarIndex(entries []TarEntry) map[string]TarEntry {
	m := make(map[string]TarEntry, len(entries))
	for _, e := range entries {
		m[e.Name] = e
	}
	return m
}
