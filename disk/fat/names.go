package fat

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"
)

const (
	attrReadOnly = 0x01
	attrHidden   = 0x02
	attrSystem   = 0x04
	attrVolumeID = 0x08
	attrDir      = 0x10
	attrArchive  = 0x20
	attrLFN      = attrReadOnly | attrHidden | attrSystem | attrVolumeID

	lfnLast     = 0x40
	lfnChars    = 13
	maxNameLen  = 255 // UTF-16 code units of a long name
	deletedMark = 0xE5
)

// shortChar reports whether c may appear in an 8.3 name as it is
// (fatgen103 lists these; lower case letters are folded before this).
func shortChar(c rune) bool {
	switch {
	case c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.ContainsRune("$%'-_@~`!(){}^#&", c)
}

// checkName says why name cannot be a long file name, or returns nil.
func checkName(name string) error {
	switch {
	case name == "" || name == "." || name == "..":
		return fmt.Errorf("name %q is not a file name", name)
	case strings.HasSuffix(name, ".") || strings.HasSuffix(name, " "):
		return fmt.Errorf("name %q ends in a dot or a space, which FAT drops", name)
	case len(utf16.Encode([]rune(name))) > maxNameLen:
		return fmt.Errorf("name %q is longer than %d UTF-16 units", name, maxNameLen)
	}
	for _, c := range name {
		if c < 0x20 || c == 0x7f || strings.ContainsRune(`"*/:<>?\|`, c) {
			return fmt.Errorf("name %q holds %q, which FAT does not allow", name, c)
		}
	}
	if !utf8.ValidString(name) {
		return fmt.Errorf("name %q is not valid UTF-8", name)
	}
	return nil
}

// basis is the first steps of fatgen103's basis-name generation: upper
// case, characters an 8.3 name cannot hold become '_', spaces and leading
// periods go, up to 8 characters before the first period and up to 3 after
// the last. fits is set when the upper-cased name is exactly that 8.3 name,
// so it needs no numeric tail.
func basis(name string) (base, ext string, fits bool) {
	lossy := false
	var b strings.Builder
	for _, c := range strings.ToUpper(name) {
		switch {
		case c == ' ':
			lossy = true
		case c == '.' || shortChar(c):
			b.WriteRune(c)
		default:
			b.WriteByte('_')
			lossy = true
		}
	}
	s := b.String()
	trimmed := strings.TrimLeft(s, ".")
	if trimmed != s {
		lossy = true
	}
	s = trimmed
	prim, rest := s, ""
	if i := strings.IndexByte(s, '.'); i >= 0 {
		prim = s[:i]
		if j := strings.LastIndexByte(s, '.'); j >= 0 {
			rest = s[j+1:]
		}
		if strings.Count(s, ".") > 1 {
			lossy = true
		}
	}
	base, ext = prim, rest
	if len(base) > 8 {
		base, lossy = base[:8], true
	}
	if len(ext) > 3 {
		ext, lossy = ext[:3], true
	}
	if base == "" {
		base, lossy = "_", true
	}
	return base, ext, !lossy
}

// shortName packs base and ext into the 11 bytes of a directory entry.
func shortName(base, ext string) [11]byte {
	var n [11]byte
	for i := range n {
		n[i] = ' '
	}
	copy(n[:8], base)
	copy(n[8:], ext)
	return n
}

// withTail is base with the numeric tail ~n, cut so the result fits 8.
func withTail(base string, n int) string {
	tail := "~" + strconv.Itoa(n)
	if len(base)+len(tail) > 8 {
		base = base[:8-len(tail)]
	}
	return base + tail
}

// assignShortNames gives every name of one directory its 8.3 alias, in the
// order given (byte order of name). Names that fit 8.3 claim theirs first,
// so a generated alias never takes a name a later entry would need; the
// rest get the lowest free numeric tail. needLFN is set where the long name
// differs from the alias.
func assignShortNames(names []string) (short [][11]byte, needLFN []bool, err error) {
	short = make([][11]byte, len(names))
	needLFN = make([]bool, len(names))
	used := map[[11]byte]string{}
	type pending struct {
		i         int
		base, ext string
	}
	var rest []pending
	for i, name := range names {
		base, ext, fits := basis(name)
		if !fits {
			rest = append(rest, pending{i, base, ext})
			continue
		}
		sn := shortName(base, ext)
		if other, dup := used[sn]; dup {
			return nil, nil, fmt.Errorf("names %q and %q differ only in case, which FAT cannot tell apart", other, name)
		}
		used[sn] = name
		short[i] = sn
		upper := base
		if ext != "" {
			upper += "." + ext
		}
		needLFN[i] = name != upper
	}
	for _, p := range rest {
		for n := 1; ; n++ {
			if n > 999999 {
				return nil, nil, fmt.Errorf("%q: no free 8.3 alias", names[p.i])
			}
			sn := shortName(withTail(p.base, n), p.ext)
			if _, taken := used[sn]; !taken {
				used[sn] = names[p.i]
				short[p.i] = sn
				needLFN[p.i] = true
				break
			}
		}
	}
	// Long names must differ beyond case as well: the alias check above only
	// sees names that fit 8.3.
	folded := map[string]string{}
	for _, name := range names {
		k := strings.ToUpper(name)
		if other, dup := folded[k]; dup {
			return nil, nil, fmt.Errorf("names %q and %q differ only in case, which FAT cannot tell apart", other, name)
		}
		folded[k] = name
	}
	return short, needLFN, nil
}

// checksum is the short-name checksum every long-name entry carries.
func checksum(sn [11]byte) uint8 {
	var sum uint8
	for _, c := range sn {
		sum = (sum&1)<<7 + sum>>1 + c
	}
	return sum
}

// lfnSlots is how many long-name entries name needs.
func lfnSlots(name string) int {
	return (len(utf16.Encode([]rune(name))) + lfnChars - 1) / lfnChars
}

// putLFN writes the long-name entries for name into b, last part first as
// they sit on disk, and returns the number of bytes written.
func putLFN(b []byte, name string, sum uint8) int {
	u := utf16.Encode([]rune(name))
	n := (len(u) + lfnChars - 1) / lfnChars
	// The name is NUL-terminated when it does not fill its last entry, and
	// the rest is padded with 0xFFFF.
	padded := make([]uint16, n*lfnChars)
	copy(padded, u)
	for i := len(u); i < len(padded); i++ {
		padded[i] = 0xFFFF
	}
	if len(u) < len(padded) {
		padded[len(u)] = 0
	}
	off := 0
	for seq := n; seq >= 1; seq-- {
		e := b[off : off+dirEntSize]
		e[0] = byte(seq)
		if seq == n {
			e[0] |= lfnLast
		}
		e[11] = attrLFN
		e[13] = sum
		part := padded[(seq-1)*lfnChars : seq*lfnChars]
		for k, c := range part {
			var at int
			switch {
			case k < 5:
				at = 1 + 2*k
			case k < 11:
				at = 14 + 2*(k-5)
			default:
				at = 28 + 2*(k-11)
			}
			e[at], e[at+1] = byte(c), byte(c>>8)
		}
		off += dirEntSize
	}
	return off
}

var (
	minTime = time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC)
	maxTime = time.Date(2107, 12, 31, 23, 59, 58, 0, time.UTC)
)

// fatTime is t in FAT's form: a date from 1980, a time in 2-second steps,
// and the creation time's extra 10 ms units (0..199). FAT has no time zone;
// the image states UTC, as the epoch does. Times outside FAT's range clamp
// to its ends.
func fatTime(t time.Time) (date, tm uint16, tenth uint8) {
	t = t.UTC()
	if t.Before(minTime) {
		t = minTime
	}
	if t.After(maxTime) {
		t = maxTime
	}
	date = uint16(t.Year()-1980)<<9 | uint16(t.Month())<<5 | uint16(t.Day())
	tm = uint16(t.Hour())<<11 | uint16(t.Minute())<<5 | uint16(t.Second()/2)
	tenth = uint8(t.Second()%2*100 + t.Nanosecond()/10_000_000)
	return date, tm, tenth
}

// parseTime is the inverse of fatTime for a date and time.
func parseTime(date, tm uint16, tenth uint8) time.Time {
	return time.Date(int(date>>9)+1980, time.Month(date>>5&0xF), int(date&0x1F),
		int(tm>>11), int(tm>>5&0x3F), int(tm&0x1F)*2+int(tenth)/100, int(tenth)%100*10_000_000, time.UTC)
}

// Timestamp is the modification time FAT records for t, as a reader gets it
// back: UTC, in 2-second steps, within 1980..2107.
func Timestamp(t time.Time) time.Time {
	date, tm, _ := fatTime(t)
	return parseTime(date, tm, 0)
}
