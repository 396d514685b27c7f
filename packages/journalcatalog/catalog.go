// Package journalcatalog writes systemd's journal message catalog, the
// database `journalctl --update-catalog` makes at
// /var/lib/systemd/catalog/database from the *.catalog files, byte for byte
// as systemd's catalog.c writes it: a header, the items sorted by message
// ID and language, and their texts in a string table that shares common
// tails as systemd's strbuf does. It runs no program of the image.
package journalcatalog

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
)

// Database is where journalctl keeps the catalog, in the image.
const Database = "/var/lib/systemd/catalog/database"

// Dirs are the directories journalctl reads catalog files from; a name in
// an earlier one hides the same name in a later one.
var Dirs = []string{"/usr/local/lib/systemd/catalog", "/usr/lib/systemd/catalog"}

// File is one catalog source file.
type File struct {
	Path string // its path in the image: its language and error messages
	Data []byte
}

// Choose picks the catalog files journalctl reads, in the order it reads
// them, given each directory's entry names (list returns none for a
// missing directory): names ending in .catalog, not hidden, the first
// directory's copy of a name winning, sorted by name.
func Choose(list func(dir string) []string) []string {
	chosen := map[string]string{}
	for _, d := range Dirs {
		for _, name := range list(d) {
			if !strings.HasSuffix(name, ".catalog") || strings.HasPrefix(name, ".") {
				continue
			}
			if _, ok := chosen[name]; !ok {
				chosen[name] = d + "/" + name
			}
		}
	}
	names := make([]string, 0, len(chosen))
	for n := range chosen {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = chosen[n]
	}
	return out
}

// key is what an item is filed under: a message ID and a language ("" for
// the default).
type key struct {
	id   [16]byte
	lang string
}

// items keeps the entries in the order they were first seen, as systemd's
// ordered hash map does: that order decides the string table's layout.
type items struct {
	order []key
	text  map[key]string
}

// Build returns the database for files, read in the order given (Choose's),
// or nil when they hold no entry: journalctl then writes no database.
func Build(files []File) ([]byte, error) {
	its := &items{text: map[key]string{}}
	for _, f := range files {
		if err := its.importFile(f); err != nil {
			return nil, err
		}
	}
	if len(its.order) == 0 {
		return nil, nil
	}
	sb := newStrbuf()
	type item struct {
		key
		off uint64
	}
	list := make([]item, len(its.order))
	for i, k := range its.order {
		list[i] = item{k, sb.add(its.text[k])}
	}
	sort.Slice(list, func(i, j int) bool {
		if c := bytes.Compare(list[i].id[:], list[j].id[:]); c != 0 {
			return c < 0
		}
		return list[i].lang < list[j].lang
	})
	const headerSize, itemSize = 40, 56
	out := make([]byte, 0, headerSize+itemSize*len(list)+len(sb.buf))
	out = append(out, "RHHHKSLP"...)
	out = binary.LittleEndian.AppendUint32(out, 0) // compatible flags
	out = binary.LittleEndian.AppendUint32(out, 0) // incompatible flags
	out = binary.LittleEndian.AppendUint64(out, headerSize)
	out = binary.LittleEndian.AppendUint64(out, uint64(len(list)))
	out = binary.LittleEndian.AppendUint64(out, itemSize)
	for _, it := range list {
		out = append(out, it.id[:]...)
		var lang [32]byte
		copy(lang[:], it.lang)
		out = append(out, lang[:]...)
		out = binary.LittleEndian.AppendUint64(out, it.off)
	}
	return append(out, sb.buf...), nil
}

// fileLang is the language a file's name gives its entries
// (systemd.de.catalog: "de"), or "": what follows the last '.' before
// ".catalog", looked for at most 31 bytes back, as catalog_file_lang does.
func fileLang(p string) string {
	stem, ok := strings.CutSuffix(p, ".catalog")
	if !ok || stem == "" {
		return ""
	}
	i := len(stem) - 1
	for i > 0 && stem[i] != '.' && stem[i] != '/' && len(stem)-i < 32 {
		i--
	}
	if stem[i] != '.' || i+1 >= len(stem) {
		return ""
	}
	return stem[i+1:]
}

// eolKind is which end-of-line byte b is, as a bit, or 0.
func eolKind(b byte) int {
	switch b {
	case '\n':
		return 1
	case '\r':
		return 2
	case 0:
		return 4
	}
	return 0
}

// lines splits as systemd's read_line does: a line ends at a run of
// end-of-line bytes (\n, \r, NUL) holding each kind once, a NUL ending
// the run; the end of the data ends the last line.
func lines(b []byte) []string {
	var out []string
	for len(b) > 0 {
		i := bytes.IndexAny(b, "\n\r\x00")
		if i < 0 {
			out = append(out, string(b))
			break
		}
		out = append(out, string(b[:i]))
		seen := 0
		for i < len(b) {
			k := eolKind(b[i])
			if k == 0 || seen&k != 0 {
				break
			}
			seen |= k
			i++
			if k == 4 {
				break
			}
		}
		b = b[i:]
	}
	return out
}

// importFile is catalog_import_file: entries start with "-- ID [LANG]"
// after an empty line (or at the top), their text is the lines up to the
// next entry, an empty line kept as one newline before the next line.
func (its *items) importFile(f File) error {
	deflang := fileLang(f.Path)
	var (
		payload    strings.Builder
		cur        key
		lang       string
		gotID      bool
		emptyLine  = true
		lineNumber int
	)
	finish := func() error {
		if payload.Len() == 0 {
			return fmt.Errorf("%s:%d: no payload text", f.Path, lineNumber)
		}
		l := lang
		if l == "" {
			l = deflang
		}
		its.add(key{cur.id, l}, payload.String())
		payload.Reset()
		lang = ""
		return nil
	}
	for _, line := range lines(f.Data) {
		lineNumber++
		if line == "" {
			emptyLine = true
			continue
		}
		if line[0] == '#' || line[0] == ';' {
			continue
		}
		if emptyLine && len(line) >= 35 && strings.HasPrefix(line, "-- ") && (len(line) == 35 || line[35] == ' ') {
			if id, ok := parseID(line[3:35]); ok {
				if gotID {
					if err := finish(); err != nil {
						return err
					}
				}
				if len(line) > 35 {
					t := strings.Trim(line[36:], " \t\n\r")
					switch {
					case len(t) < 2:
						return fmt.Errorf("%s:%d: language too short", f.Path, lineNumber)
					case len(t) > 31:
						return fmt.Errorf("%s:%d: language too long", f.Path, lineNumber)
					case t != deflang:
						lang = t
					}
				}
				gotID, emptyLine, cur.id = true, false, id
				continue
			}
		}
		if !gotID {
			return fmt.Errorf("%s:%d: payload before an ID", f.Path, lineNumber)
		}
		if emptyLine {
			payload.WriteByte('\n')
		}
		payload.WriteString(line)
		payload.WriteByte('\n')
		emptyLine = false
	}
	if gotID {
		return finish()
	}
	return nil
}

// parseID reads 32 hex digits, either case, as sd_id128_from_string does.
func parseID(s string) ([16]byte, bool) {
	var id [16]byte
	if len(s) != 32 {
		return id, false
	}
	_, err := hex.Decode(id[:], []byte(s))
	return id, err == nil
}

// add files an entry; one already filed under the same key is combined
// with it, the new one's headers first, as finish_item does.
func (its *items) add(k key, text string) {
	prev, ok := its.text[k]
	if !ok {
		its.order = append(its.order, k)
		its.text[k] = text
		return
	}
	its.text[k] = combine(text, prev)
}

// headerEnd is where an entry's headers end: at its first empty line, or
// at the end when the last line ends with a newline and none is empty.
func headerEnd(s string) int {
	i := 0
	for {
		e := strings.IndexByte(s[i:], '\n')
		if e < 0 || e == 0 {
			return i
		}
		i += e + 1
	}
}

// combine is combine_entries: both texts' headers, then the body of one,
// or of two when one has none.
func combine(one, two string) string {
	b1, b2 := headerEnd(one), headerEnd(two)
	body := one[b1:]
	if body == "" {
		body = two[b2:]
	}
	return one[:b1] + two[:b2] + body
}

// strbuf is systemd's strbuf: NUL-terminated strings in one buffer, a
// string equal to the tail of one already there given that one's tail.
// Its trie, keyed by bytes from the end, is kept as systemd keeps it,
// since which tail is found depends on its shape.
type strbuf struct {
	buf  []byte
	root *sbNode
}

type sbNode struct {
	off, len int
	children []sbChild // sorted by c
}

type sbChild struct {
	c     byte
	child *sbNode
}

func newStrbuf() *strbuf { return &strbuf{buf: []byte{0}, root: &sbNode{}} }

func (sb *strbuf) add(s string) uint64 {
	n := len(s)
	if n == 0 {
		return 0
	}
	node := sb.root
	var c byte
	for depth := 0; depth <= n; depth++ {
		off := node.off + node.len - n
		if depth == n || (node.len >= n && string(sb.buf[off:off+n]) == s) {
			return uint64(off)
		}
		c = s[n-1-depth]
		i := sort.Search(len(node.children), func(i int) bool { return node.children[i].c >= c })
		if i == len(node.children) || node.children[i].c != c {
			break
		}
		node = node.children[i].child
	}
	off := len(sb.buf)
	sb.buf = append(append(sb.buf, s...), 0)
	child := &sbNode{off: off, len: n}
	// After every child with the same or a lower byte, as bubbleinsert
	// places it.
	i := sort.Search(len(node.children), func(i int) bool { return node.children[i].c > c })
	node.children = append(node.children, sbChild{})
	copy(node.children[i+1:], node.children[i:])
	node.children[i] = sbChild{c, child}
	return uint64(off)
}
