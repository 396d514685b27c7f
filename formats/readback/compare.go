package readback

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/stamp-dev/stamp/formats"
	"github.com/stamp-dev/stamp/formats/attest"
	"github.com/stamp-dev/stamp/rootfs/compress"
	"github.com/stamp-dev/stamp/rootfs/hashio"
)

// OutputCheck is the comparison of one output file between two builds.
type OutputCheck struct {
	Name             string
	Format           string // "tar", "raw", ...; "manifest", "provenance", "sbom" for the files beside them
	Compression      compress.Algorithm
	SHA256A, SHA256B string
	// Offset is the first byte at which the files differ, -1 when they do
	// not or one is missing. PlainOffset is the same in the stream Plain
	// names (the decompressed stream, a qcow2's guest disk), and Region
	// names what lies there.
	Offset, PlainOffset int64
	Plain               string
	Region              string
	// Lines are the output's SHA256SUMS lines (several for a directory).
	Lines []Sum
	// Changes are what reading both outputs back found.
	Changes []Change
	// Notes say what could not be compared and why.
	Notes []string
}

// Match reports whether both builds gave the same bytes.
func (c *OutputCheck) Match() bool { return c.SHA256A != "" && c.SHA256A == c.SHA256B }

// Write prints the check: the output's SHA256SUMS lines when both builds
// gave the same bytes, else its format, first differing byte and the paths
// and fields that differ.
func (c *OutputCheck) Write(w io.Writer) {
	if c.Match() {
		if len(c.Lines) == 0 {
			fmt.Fprintf(w, "%s  %s\n", c.SHA256A, c.Name)
		}
		for _, l := range c.Lines {
			fmt.Fprintf(w, "%s  %s\n", l.SHA256, l.Name)
		}
		return
	}
	what := c.Format
	if c.Compression != "" && c.Compression != compress.None {
		what += ", " + string(c.Compression)
	}
	fmt.Fprintf(w, "DIFFERS %s (%s): a %s, b %s\n", c.Name, what, orNone(c.SHA256A), orNone(c.SHA256B))
	if c.Offset >= 0 {
		fmt.Fprintf(w, "  first differing byte: offset %d", c.Offset)
		if c.PlainOffset >= 0 {
			fmt.Fprintf(w, " (offset %d in the %s)", c.PlainOffset, c.Plain)
		}
		if c.Region != "" {
			fmt.Fprintf(w, " in %s", c.Region)
		}
		fmt.Fprintln(w)
	}
	for _, ch := range c.Changes {
		fmt.Fprintf(w, "  %s\n", ch)
		if ch.Kind == Changed {
			fmt.Fprintf(w, "    path %s field %s\n", ch.Path, strings.Join(ch.FieldNames(), ","))
		}
	}
	for _, n := range c.Notes {
		fmt.Fprintf(w, "  %s\n", n)
	}
}

// attestationFiles are compared besides the outputs: they must be as
// reproducible as the outputs they describe.
var attestationFiles = []struct{ name, format string }{
	{attest.ManifestFile, "manifest"}, {attest.SBOMFile, "sbom"}, {attest.ProvenanceFile, "provenance"},
}

// CompareBuilds compares two builds' output directories: every output
// their SHA256SUMS list, then the files beside them.
func CompareBuilds(ctx context.Context, a, b string) ([]OutputCheck, error) {
	sa, err := ReadSums(filepath.Join(a, attest.SumsFile))
	if err != nil {
		return nil, err
	}
	sb, err := ReadSums(filepath.Join(b, attest.SumsFile))
	if err != nil {
		return nil, err
	}
	out := compareSums(ctx, sa, sb, a, b)
	for _, f := range attestationFiles {
		c := OutputCheck{Name: f.name, Format: f.format, Offset: -1, PlainOffset: -1}
		pa, pb := filepath.Join(a, f.name), filepath.Join(b, f.name)
		if c.SHA256A, _, err = hashio.File(pa, false); err != nil {
			c.Notes = append(c.Notes, err.Error())
		}
		if c.SHA256B, _, err = hashio.File(pb, false); err != nil {
			c.Notes = append(c.Notes, err.Error())
		}
		if !c.Match() && len(c.Notes) == 0 {
			c.Offset, _ = firstDifference(pa, pb)
			if n := firstLineDifference(pa, pb); n != "" {
				c.Notes = append(c.Notes, n)
			}
		}
		out = append(out, c)
	}
	return out, nil
}

// compareSums pairs two SHA256SUMS by output and looks into every output
// whose digests differ, reading the files from dirA and dirB. The files of
// a directory output (an OCI layout) are one output: a blob's name is its
// digest, so a changed blob shows as one removed and one added.
func compareSums(ctx context.Context, sa, sb []Sum, dirA, dirB string) []OutputCheck {
	namesA, ga := groupSums(sa)
	namesB, gb := groupSums(sb)
	var out []OutputCheck
	for _, name := range namesA {
		c := OutputCheck{Name: name, Lines: ga[name], SHA256A: groupDigest(ga[name]), Offset: -1, PlainOffset: -1}
		if lb, ok := gb[name]; ok {
			c.SHA256B = groupDigest(lb)
		}
		switch {
		case c.SHA256B == "":
			c.Notes = append(c.Notes, "only the first build has it")
		case !c.Match():
			c.Notes = append(c.Notes, memberDifferences(ga[name], gb[name])...)
			explain(ctx, &c, filepath.Join(dirA, name), filepath.Join(dirB, name))
		}
		out = append(out, c)
	}
	for _, name := range namesB {
		if _, ok := ga[name]; !ok {
			out = append(out, OutputCheck{Name: name, SHA256B: groupDigest(gb[name]), Offset: -1, PlainOffset: -1,
				Notes: []string{"only the second build has it"}})
		}
	}
	return out
}

// groupSums groups sums by output: the first component of each name.
func groupSums(sums []Sum) ([]string, map[string][]Sum) {
	var names []string
	groups := map[string][]Sum{}
	for _, s := range sums {
		top, _, _ := strings.Cut(s.Name, "/")
		if _, ok := groups[top]; !ok {
			names = append(names, top)
		}
		groups[top] = append(groups[top], s)
	}
	return names, groups
}

// groupDigest is a file's own sha256, or for a directory output the sha256
// of its SHA256SUMS lines.
func groupDigest(g []Sum) string {
	if len(g) == 1 && !strings.Contains(g[0].Name, "/") {
		return g[0].SHA256
	}
	var b strings.Builder
	for _, s := range g {
		fmt.Fprintf(&b, "%s  %s\n", s.SHA256, s.Name)
	}
	return bytesSHA256([]byte(b.String()))
}

// memberDifferences names the files of a directory output that differ.
func memberDifferences(a, b []Sum) []string {
	if len(a) == 1 && !strings.Contains(a[0].Name, "/") {
		return nil
	}
	inB := map[string]string{}
	for _, s := range b {
		inB[s.Name] = s.SHA256
	}
	inA := map[string]bool{}
	var out []string
	for _, s := range a {
		inA[s.Name] = true
		switch h, ok := inB[s.Name]; {
		case !ok:
			out = append(out, s.Name+": only in the first build")
		case h != s.SHA256:
			out = append(out, s.Name+": differs")
		}
	}
	for _, s := range b {
		if !inA[s.Name] {
			out = append(out, s.Name+": only in the second build")
		}
	}
	return out
}

// explain finds where two differing outputs first differ and, by reading
// both back, which paths and fields.
func explain(ctx context.Context, c *OutputCheck, a, b string) {
	if fi, err := os.Stat(a); err == nil && !fi.IsDir() {
		if c.Offset, err = firstDifference(a, b); err != nil {
			c.Notes = append(c.Notes, err.Error())
			return
		}
	}
	ia, errA := formats.ReadImage(ctx, a)
	ib, errB := formats.ReadImage(ctx, b)
	if errA != nil || errB != nil {
		c.Format = "file"
		if h, _ := formats.ReadHead(a); h != nil {
			c.Compression = h.Compression
			if h.Size < 1<<20 && utf8.Valid(h.Plain) && h.Compression == compress.None {
				// A small text file beside an output (an OCI .digest).
				c.Notes = append(c.Notes, firstLineDifference(a, b))
				return
			}
		}
		for _, e := range []error{errA, errB} {
			if e != nil {
				c.Notes = append(c.Notes, "cannot read back: "+e.Error())
			}
		}
		return
	}
	c.Format, c.Compression = ia.Format, ia.Compression
	switch {
	case ia.Plain != "" && ia.Plain == ib.Plain && ia.Compression == ib.Compression:
		// Place the difference where the reader measured its regions: in
		// the decompressed stream, or in the guest disk of a qcow2.
		if off, err := firstPlainDifference(ia, ib); err == nil && off >= 0 {
			c.PlainOffset, c.Plain = off, ia.Plain
			c.Region = ia.Locate(off)
		}
	case ia.Plain == "" && c.Offset >= 0:
		c.Region = ia.Locate(c.Offset)
	}
	c.Changes = DiffImages(ia, ib, DiffOptions{})
	if len(c.Changes) == 0 {
		// Only the record differs, or nothing the entries show: say which.
		c.Changes = DiffImages(ia, ib, DiffOptions{IncludeRecord: true})
	}
	if len(c.Changes) == 0 {
		c.Notes = append(c.Notes, "both read back to the same entries and structure: the difference is in how the format lays them out")
	}
}

// firstDifference returns the offset of the first byte at which two files
// differ, -1 when they are equal. A file that is a prefix of the other
// differs at its end.
func firstDifference(a, b string) (int64, error) {
	fa, err := os.Open(a)
	if err != nil {
		return -1, err
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		return -1, err
	}
	defer fb.Close()
	return firstStreamDifference(fa, fb)
}

func firstPlainDifference(a, b *formats.Image) (int64, error) {
	ra, err := formats.OpenPlain(a)
	if err != nil {
		return -1, err
	}
	defer ra.Close()
	rb, err := formats.OpenPlain(b)
	if err != nil {
		return -1, err
	}
	defer rb.Close()
	return firstStreamDifference(ra, rb)
}

func firstStreamDifference(a, b io.Reader) (int64, error) {
	const chunk = 1 << 20
	ba, bb := make([]byte, chunk), make([]byte, chunk)
	var off int64
	for {
		na, errA := io.ReadFull(a, ba)
		nb, errB := io.ReadFull(b, bb)
		n := min(na, nb)
		if i := mismatch(ba[:n], bb[:n]); i >= 0 {
			return off + int64(i), nil
		}
		if na != nb {
			return off + int64(n), nil
		}
		off += int64(n)
		endA := errA == io.EOF || errA == io.ErrUnexpectedEOF
		endB := errB == io.EOF || errB == io.ErrUnexpectedEOF
		if errA != nil && !endA {
			return -1, errA
		}
		if errB != nil && !endB {
			return -1, errB
		}
		if endA || endB {
			return -1, nil
		}
	}
}

func mismatch(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// firstLineDifference shows the first line at which two text files differ.
func firstLineDifference(a, b string) string {
	da, err1 := os.ReadFile(a)
	db, err2 := os.ReadFile(b)
	if err1 != nil || err2 != nil {
		return ""
	}
	la, lb := strings.Split(string(da), "\n"), strings.Split(string(db), "\n")
	for i := 0; i < len(la) || i < len(lb); i++ {
		var x, y string
		if i < len(la) {
			x = la[i]
		}
		if i < len(lb) {
			y = lb[i]
		}
		if x != y {
			return fmt.Sprintf("line %d: a %q, b %q", i+1, clip(x), clip(y))
		}
	}
	return ""
}

func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// CompareAgainst compares a fresh build in dir with an earlier SHA256SUMS.
// Outputs found beside the earlier sums, still matching them, are read back
// to say what differs. builders lists how the stamp build that made the
// earlier outputs differs from this one, when its provenance.json is beside
// them.
func CompareAgainst(ctx context.Context, sumsPath, dir string) (checks []OutputCheck, builders []string, err error) {
	earlier, err := ReadSums(sumsPath)
	if err != nil {
		return nil, nil, err
	}
	now, err := ReadSums(filepath.Join(dir, attest.SumsFile))
	if err != nil {
		return nil, nil, err
	}
	earlierDir := filepath.Dir(sumsPath)
	checks = compareSums(ctx, earlier, now, earlierDir, dir)
	for i := range checks {
		c := &checks[i]
		if c.Match() || c.SHA256A == "" || c.SHA256B == "" {
			continue
		}
		if got, _, err := hashio.File(filepath.Join(earlierDir, c.Name), false); err != nil || got != c.SHA256A {
			c.Changes, c.Offset, c.PlainOffset, c.Region = nil, -1, -1, ""
			c.Notes = []string{"the earlier output is not beside its SHA256SUMS, so only the digests can be compared"}
		}
	}
	old, err := attest.ReadStatement(filepath.Join(earlierDir, attest.ProvenanceFile))
	if errors.Is(err, fs.ErrNotExist) {
		return checks, nil, nil
	}
	if err != nil {
		return checks, nil, err
	}
	cur, err := attest.ReadStatement(filepath.Join(dir, attest.ProvenanceFile))
	if err != nil {
		return checks, nil, err
	}
	return checks, attest.DiffBuilders(old.Predicate.RunDetails.Builder, cur.Predicate.RunDetails.Builder), nil
}

// Sum is one line of a SHA256SUMS file.
type Sum struct{ SHA256, Name string }

// ReadSums reads a SHA256SUMS file as sha256sum writes it.
func ReadSums(p string) ([]Sum, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var out []Sum
	for i, line := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
		if line == "" {
			continue
		}
		h, name, ok := strings.Cut(line, "  ")
		if !ok {
			// sha256sum -b writes "<hex> *name".
			h, name, ok = strings.Cut(line, " *")
		}
		if !ok || !isSHA256Hex(h) {
			return nil, fmt.Errorf("%s line %d: not a sha256sum line: %q", p, i+1, line)
		}
		out = append(out, Sum{SHA256: strings.ToLower(h), Name: name})
	}
	return out, nil
}

// isSHA256Hex reports whether h is a sha256 in hex, of either case.
func isSHA256Hex(h string) bool {
	if len(h) != 2*sha256.Size {
		return false
	}
	_, err := hex.DecodeString(h)
	return err == nil
}

func bytesSHA256(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}
