package deb

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/test/harness"
)

// versionTable holds pairs with the answer dpkg --compare-versions gives;
// TestCompareMatchesDpkg checks the table itself against dpkg.
var versionTable = []struct {
	a, b string
	want int
}{
	{"1.0", "1.0", 0},
	{"1.0", "1.1", -1},
	{"1.10", "1.9", 1},
	{"1.0~rc1", "1.0", -1},
	{"1.0~rc1", "1.0~rc2", -1},
	{"1.0~~", "1.0~", -1},
	{"1.0~", "1.0", -1},
	{"1.0", "1.0+b1", -1},
	{"1.0a", "1.0", 1},
	{"1.0a", "1.0+", -1},
	{"1:0.1", "2.0", 1},
	{"0:1.0", "1.0", 0},
	{"1.0-1", "1.0-2", -1},
	{"1.0-1", "1.0", 1},
	{"1.0-0", "1.0", 0},
	{"2.36-9+deb12u4", "2.36-9+deb12u10", -1},
	{"1.6.20~ds1-1", "1.6.20-1", -1},
	{"1.2.3-4-5", "1.2.3-4", 1},
	{"0001", "1", 0},
	{"1.01", "1.1", 0},
	{"a", "b", -1},
	{"1a", "1.", -1},
	{"1:1.0~rc1-1~bpo12+1", "1:1.0~rc1-1", -1},
	{"7.88.1-10+deb12u5", "7.88.1-10+deb12u12", -1},
	{"1.8.9-2", "1.8.9-2+b1", -1},
}

func TestCompareTable(t *testing.T) {
	for _, c := range versionTable {
		if got := CompareVersions(c.a, c.b); got != c.want {
			t.Errorf("CompareVersions(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
		if got := CompareVersions(c.b, c.a); got != -c.want {
			t.Errorf("CompareVersions(%q, %q) = %d, want %d", c.b, c.a, got, -c.want)
		}
	}
}

// randomVersion builds versions from the characters that make comparisons
// interesting: digits with leading zeros, letters, "~", "+", ".", epochs and
// revisions.
func randomVersion(r *rand.Rand) string {
	parts := []string{"0", "00", "1", "01", "2", "9", "10", "a", "b", "z", "A", "~", "~~", "+", ".", "rc", "+b1", "~rc1", "deb12u"}
	var b strings.Builder
	if r.IntN(5) == 0 {
		fmt.Fprintf(&b, "%d:", r.IntN(3))
	}
	b.WriteString([]string{"0", "1", "2", "10"}[r.IntN(4)])
	for n := r.IntN(5); n > 0; n-- {
		b.WriteString(parts[r.IntN(len(parts))])
	}
	if r.IntN(2) == 0 {
		b.WriteString("-")
		b.WriteString([]string{"0", "1", "2", "1a", "1~b", "1+b2", "10"}[r.IntN(7)])
		for n := r.IntN(3); n > 0; n-- {
			b.WriteString(parts[r.IntN(len(parts))])
		}
	}
	return b.String()
}

// TestCompareMatchesDpkg asks the real dpkg about the table and about
// hundreds of generated pairs, in one shell so it stays fast.
func TestCompareMatchesDpkg(t *testing.T) {
	harness.Tool(t, "dpkg")
	type pair struct{ a, b string }
	var pairs []pair
	for _, c := range versionTable {
		if _, err := ParseVersion(c.a); err != nil {
			continue
		}
		if _, err := ParseVersion(c.b); err != nil {
			continue
		}
		pairs = append(pairs, pair{c.a, c.b})
	}
	r := rand.New(rand.NewPCG(1, 2))
	for len(pairs) < 800 {
		a, b := randomVersion(r), randomVersion(r)
		if r.IntN(4) == 0 {
			b = a + parts(r)
		}
		if _, err := ParseVersion(a); err != nil {
			continue
		}
		if _, err := ParseVersion(b); err != nil {
			continue
		}
		pairs = append(pairs, pair{a, b})
	}
	var in strings.Builder
	for _, p := range pairs {
		fmt.Fprintf(&in, "%s %s\n", p.a, p.b)
	}
	script := `while read a b; do
	if dpkg --compare-versions "$a" lt "$b" 2>/dev/null; then echo -1;
	elif dpkg --compare-versions "$a" eq "$b" 2>/dev/null; then echo 0;
	else echo 1; fi
done`
	cmd := exec.Command("sh", "-c", script)
	cmd.Stdin = strings.NewReader(in.String())
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	i := 0
	for sc.Scan() {
		var want int
		fmt.Sscan(sc.Text(), &want)
		p := pairs[i]
		if got := CompareVersions(p.a, p.b); got != want {
			t.Errorf("CompareVersions(%q, %q) = %d, dpkg says %d", p.a, p.b, got, want)
		}
		i++
	}
	if i != len(pairs) {
		t.Fatalf("dpkg answered %d of %d pairs", i, len(pairs))
	}
}

func parts(r *rand.Rand) string {
	return []string{"~", "+", "a", "0", ".0", "~~", "-1"}[r.IntN(7)]
}

func TestParseVersion(t *testing.T) {
	v, err := ParseVersion("1:2.3-4-5")
	if err != nil || v.Epoch != 1 || v.Upstream != "2.3-4" || v.Revision != "5" || v.String() != "1:2.3-4-5" {
		t.Fatalf("ParseVersion = %+v, %v", v, err)
	}
	for _, bad := range []string{"", "x:1", "1.0-", "1 0", "1:", "1.0_1"} {
		if _, err := ParseVersion(bad); err == nil {
			t.Errorf("ParseVersion(%q) succeeded", bad)
		}
	}
}
