package recipes

import (
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Mode is a file mode's permission bits, including setuid, setgid and sticky
// (0..07777), written in YAML as a quoted octal string such as "0644".
type Mode uint32

const modeMsg = `mode must be a quoted octal string such as "0644" (YAML reads 0644 as the integer 420)`

// ParseMode reads an octal string: "0644", "644", "4755", "0o755".
func ParseMode(s string) (Mode, error) {
	t := strings.TrimPrefix(strings.TrimPrefix(s, "0o"), "0O")
	if t == "" || len(t) > 5 {
		return 0, fmt.Errorf("mode %q is not an octal number between 0000 and 07777", s)
	}
	v, err := strconv.ParseUint(t, 8, 32)
	if err != nil || v > 07777 {
		return 0, fmt.Errorf("mode %q is not an octal number between 0000 and 07777", s)
	}
	return Mode(v), nil
}

// UnmarshalYAML accepts only a quoted string: an unquoted 0644 is the integer
// 420 to YAML, and accepting it would silently give the wrong mode.
func (m *Mode) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		return errors.New(modeMsg)
	}
	v, err := ParseMode(n.Value)
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// String is the four-digit octal form, "0644".
func (m Mode) String() string { return fmt.Sprintf("%04o", uint32(m)) }

// FileMode converts to io/fs bits, where setuid, setgid and sticky are not
// the octal 04000, 02000 and 01000.
func (m Mode) FileMode() fs.FileMode {
	fm := fs.FileMode(m & 0777)
	if m&04000 != 0 {
		fm |= fs.ModeSetuid
	}
	if m&02000 != 0 {
		fm |= fs.ModeSetgid
	}
	if m&01000 != 0 {
		fm |= fs.ModeSticky
	}
	return fm
}

// Owner is "user:group" as written: names or numbers, unresolved. The
// conductor resolves names against the tree's /etc/passwd and /etc/group.
type Owner struct {
	User  string
	Group string
}

// IsZero reports whether no owner was given (the layer's default applies).
func (o Owner) IsZero() bool { return o == Owner{} }

func (o Owner) String() string {
	if o.IsZero() {
		return ""
	}
	return o.User + ":" + o.Group
}

// ParseOwner reads "0:0", "root:root", "1000:capi" or "root" (group = user).
func ParseOwner(s string) (Owner, error) {
	u, g, found := strings.Cut(s, ":")
	if !found {
		g = u
	}
	if !validOwnerPart(u) || !validOwnerPart(g) {
		return Owner{}, fmt.Errorf("owner %q must be USER:GROUP or USER, each a name or a number", s)
	}
	return Owner{User: u, Group: g}, nil
}

func validOwnerPart(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	if isDigits(s) {
		_, err := strconv.ParseUint(s, 10, 32)
		return err == nil
	}
	return validAccountName(s)
}

// validAccountName follows the shadow-utils rule, allowing a trailing "$"
// for machine accounts.
func validAccountName(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c == '_':
		case i > 0 && (c >= '0' && c <= '9' || c == '-' || c == '.' || c >= 'A' && c <= 'Z'):
		case i > 0 && i == len(s)-1 && c == '$':
		default:
			return false
		}
	}
	return true
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// NormalizeSHA256 accepts "<64 hex>" or "sha256:<64 hex>" and returns the
// bare lowercase hex.
func NormalizeSHA256(s string) (string, error) {
	h := strings.TrimPrefix(s, "sha256:")
	if len(h) != 64 || !isLowerHex(h) {
		if len(h) == 64 && isLowerHex(strings.ToLower(h)) {
			return "", fmt.Errorf("sha256 %q must be lowercase hex", s)
		}
		return "", fmt.Errorf("sha256 %q must be 64 lowercase hex digits, optionally after \"sha256:\"", s)
	}
	return h, nil
}

// MaxSize is the largest size a recipe may give: 1 EiB, where ext4 with
// 64-bit block numbers ends, and far enough below the int64 limit that no
// sum or alignment of sizes overflows.
const MaxSize int64 = 1 << 60

// ParseSize reads a size: a number of bytes with an optional unit. K, M, G, T
// and KiB, MiB, GiB, TiB are powers of 1024 (as systemd-repart and mkosi read
// them); KB, MB, GB, TB are powers of 1000. "auto" returns 0, and 0 is never
// returned for anything else: a zero size is an error. So 0 means auto. It is
// the only size parser: formats takes the bytes it returns.
func ParseSize(s string) (int64, error) {
	if s == "auto" {
		return 0, nil
	}
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("size %q must be \"auto\" or a number with an optional unit such as 256MiB or 4GiB", s)
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	mult, ok := sizeUnits[strings.TrimSpace(s[i:])]
	if !ok {
		return 0, fmt.Errorf("size %q has an unknown unit %q (use B, KiB, MiB, GiB, TiB, K, M, G, T, KB, MB, GB or TB)", s, strings.TrimSpace(s[i:]))
	}
	if n == 0 {
		return 0, fmt.Errorf("size %q must be greater than zero", s)
	}
	if n > MaxSize/mult {
		return 0, fmt.Errorf("size %q is larger than 1 EiB", s)
	}
	return n * mult, nil
}

var sizeUnits = map[string]int64{
	"": 1, "B": 1,
	"K": 1 << 10, "KiB": 1 << 10, "KB": 1e3,
	"M": 1 << 20, "MiB": 1 << 20, "MB": 1e6,
	"G": 1 << 30, "GiB": 1 << 30, "GB": 1e9,
	"T": 1 << 40, "TiB": 1 << 40, "TB": 1e12,
}

// splitImageRef splits name:tag@sha256:hex. Parts that are absent are "".
func splitImageRef(ref string) (name, tag, digest string) {
	name, digest, _ = strings.Cut(ref, "@")
	slash := strings.LastIndex(name, "/")
	if c := strings.LastIndex(name, ":"); c > slash {
		name, tag = name[:c], name[c+1:]
	}
	return name, tag, digest
}

// checkRef validates an image reference. needTagAndDigest demands both.
func checkRef(ref string, needTag bool) error {
	if ref == "" {
		return errors.New("ref is required")
	}
	if strings.ContainsAny(ref, " \t\n") {
		return fmt.Errorf("ref %q contains white space", ref)
	}
	if strings.Count(ref, "@") > 1 {
		return fmt.Errorf("ref %q has more than one \"@\"", ref)
	}
	name, tag, digest := splitImageRef(ref)
	if name == "" || strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/") || strings.Contains(name, "//") {
		return fmt.Errorf("ref %q has no valid repository name", ref)
	}
	if strings.Contains(ref, "@") {
		if !strings.HasPrefix(digest, "sha256:") {
			return fmt.Errorf("ref %q: digest must be sha256:<64 lowercase hex>", ref)
		}
		if _, err := NormalizeSHA256(digest); err != nil {
			return fmt.Errorf("ref %q: digest must be sha256:<64 lowercase hex>", ref)
		}
	}
	if tag != "" && !validTag(tag) {
		return fmt.Errorf("ref %q has an invalid tag %q", ref, tag)
	}
	if needTag && tag == "" {
		return fmt.Errorf("ref %q must have a tag, the name the runtime finds the image by: name:tag (stamp.lock pins its digest) or name:tag@sha256:<64 hex>", ref)
	}
	return nil
}

func validTag(t string) bool {
	if t == "" || len(t) > 128 {
		return false
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' ||
			i > 0 && (c == '.' || c == '-')
		if !ok {
			return false
		}
	}
	return true
}
