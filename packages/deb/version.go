package deb

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Version is a parsed Debian version: [epoch:]upstream[-revision].
type Version struct {
	Epoch    uint64
	Upstream string
	Revision string
}

// ParseVersion splits s as dpkg's parseversion does: the epoch is what comes
// before the first colon, the revision what comes after the last hyphen.
func ParseVersion(s string) (Version, error) {
	var v Version
	s = strings.TrimSpace(s)
	if s == "" {
		return v, errors.New("empty version")
	}
	if strings.ContainsAny(s, " \t\n") {
		return v, fmt.Errorf("version %q: contains white space", s)
	}
	rest := s
	if e, r, ok := strings.Cut(s, ":"); ok {
		n, err := strconv.ParseUint(e, 10, 31)
		if err != nil {
			return v, fmt.Errorf("version %q: epoch %q is not a number", s, e)
		}
		v.Epoch, rest = n, r
	}
	if i := strings.LastIndexByte(rest, '-'); i >= 0 {
		v.Upstream, v.Revision = rest[:i], rest[i+1:]
		if v.Revision == "" {
			return v, fmt.Errorf("version %q: empty revision", s)
		}
	} else {
		v.Upstream = rest
	}
	if v.Upstream == "" {
		return v, fmt.Errorf("version %q: empty upstream version", s)
	}
	for _, c := range []byte(v.Upstream + v.Revision) {
		if !isAlnum(c) && !strings.ContainsRune(".+-~:", rune(c)) {
			return v, fmt.Errorf("version %q: invalid character %q", s, c)
		}
	}
	return v, nil
}

// String formats v as dpkg does: the epoch only when non-zero.
func (v Version) String() string {
	s := v.Upstream
	if v.Epoch != 0 {
		s = strconv.FormatUint(v.Epoch, 10) + ":" + s
	}
	if v.Revision != "" {
		s += "-" + v.Revision
	}
	return s
}

// Compare orders a and b as dpkg --compare-versions does: -1, 0 or 1.
func (a Version) Compare(b Version) int {
	switch {
	case a.Epoch < b.Epoch:
		return -1
	case a.Epoch > b.Epoch:
		return 1
	}
	if c := verrevcmp(a.Upstream, b.Upstream); c != 0 {
		return c
	}
	return verrevcmp(a.Revision, b.Revision)
}

// CompareVersions parses and compares two version strings. A string that
// does not parse sorts as its raw bytes would under verrevcmp, so a broken
// index entry never panics the resolver.
func CompareVersions(a, b string) int {
	va, errA := ParseVersion(a)
	vb, errB := ParseVersion(b)
	if errA != nil || errB != nil {
		return verrevcmp(a, b)
	}
	return va.Compare(vb)
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// order is dpkg's weight of a non-digit character: "~" before the end of
// the string, the end before letters, letters before everything else.
func order(c int) int {
	switch {
	case c == 0:
		return 0
	case isDigit(byte(c)):
		return 0
	case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
		return c
	case c == '~':
		return -1
	}
	return c + 256
}

// verrevcmp is dpkg's lib/dpkg/version.c verrevcmp: alternating non-digit
// and digit runs, the former compared by order, the latter numerically.
func verrevcmp(a, b string) int {
	i, j := 0, 0
	at := func(s string, k int) int {
		if k < len(s) {
			return int(s[k])
		}
		return 0
	}
	for i < len(a) || j < len(b) {
		firstDiff := 0
		for i < len(a) && !isDigit(a[i]) || j < len(b) && !isDigit(b[j]) {
			ac, bc := order(at(a, i)), order(at(b, j))
			if ac != bc {
				return sign(ac - bc)
			}
			i++
			j++
		}
		for i < len(a) && a[i] == '0' {
			i++
		}
		for j < len(b) && b[j] == '0' {
			j++
		}
		for i < len(a) && isDigit(a[i]) && j < len(b) && isDigit(b[j]) {
			if firstDiff == 0 {
				firstDiff = int(a[i]) - int(b[j])
			}
			i++
			j++
		}
		if i < len(a) && isDigit(a[i]) {
			return 1
		}
		if j < len(b) && isDigit(b[j]) {
			return -1
		}
		if firstDiff != 0 {
			return sign(firstDiff)
		}
	}
	return 0
}

func sign(n int) int {
	switch {
	case n < 0:
		return -1
	case n > 0:
		return 1
	}
	return 0
}
