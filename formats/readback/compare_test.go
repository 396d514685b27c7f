package readback

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestFirstStreamDifferenceIsTheFirstDifferingOffset checks the offset
// verify reports, across its read buffer's boundary too, and -1 for equal
// streams.
func TestFirstStreamDifferenceIsTheFirstDifferingOffset(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 3<<20)
	for _, tc := range []struct {
		a, b []byte
		want int64
	}{
		{[]byte("same"), []byte("same"), -1},
		{[]byte("abcd"), []byte("abXd"), 2},
		{[]byte("abc"), []byte("abcdef"), 3},
		{big, append(append([]byte{}, big[:2<<20+5]...), 'y'), 2<<20 + 5},
	} {
		got, err := firstStreamDifference(bytes.NewReader(tc.a), bytes.NewReader(tc.b))
		if err != nil || got != tc.want {
			t.Errorf("first difference %d (%v), want %d", got, err, tc.want)
		}
	}
}

// TestReadSumsGroupsADirectoryOutputsFiles checks that SHA256SUMS lines of
// one directory output (an OCI layout) form one group, in the file's order,
// whatever case or binary marker sha256sum wrote.
func TestReadSumsGroupsADirectoryOutputsFiles(t *testing.T) {
	p := filepath.Join(t.TempDir(), "SHA256SUMS")
	h := strings.Repeat("ab", 32)
	if err := os.WriteFile(p, []byte(h+"  x.tar\n"+h+"  x.oci/index.json\n"+strings.ToUpper(h)+" *x.oci/oci-layout\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sums, err := ReadSums(p)
	if err != nil {
		t.Fatal(err)
	}
	names, groups := groupSums(sums)
	if !reflect.DeepEqual(names, []string{"x.tar", "x.oci"}) || len(groups["x.oci"]) != 2 || groups["x.oci"][1].SHA256 != h {
		t.Errorf("groups %v %v", names, groups)
	}
	if groupDigest(groups["x.tar"]) != h {
		t.Error("a single file's digest is not its own")
	}
}

// TestReadSumsRefusesAMalformedLine checks that a line without a digest is
// an error, not a skipped output.
func TestReadSumsRefusesAMalformedLine(t *testing.T) {
	p := filepath.Join(t.TempDir(), "SHA256SUMS")
	if err := os.WriteFile(p, []byte("not-a-digest  x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadSums(p); err == nil {
		t.Error("a malformed SHA256SUMS is accepted")
	}
}
