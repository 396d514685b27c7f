package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/test/harness"
)

const erofsRecipe = `apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: live-root
epoch: 1700000000
base: {tarball: ./base.tar.zst}
customize:
  layers:
    - files:
        - {path: /etc/hostname, content: "live\n"}
        - {path: /usr/share/stamp/big.txt, from: ./big.txt}
outputs:
  - {format: tar}
  - {format: erofs}
`

// An erofs output of the real Debian base is the same byte for byte as
// root and as uid 65534 (another umask, time zone and locale), fsck.erofs
// decompresses and checks every file of it clean, and stamp reads it back
// to the same entries the tar output holds, its record checking.
func TestErofsOutput(t *testing.T) {
	harness.RequireSetpriv(t)
	fsck := harness.Tool(t, "fsck.erofs")
	var big strings.Builder
	for i := 0; big.Len() < 6<<20; i++ {
		fmt.Fprintf(&big, "line %d of a file larger than one of the writer's segments\n", i)
	}
	dir := recipeDir(t, erofsRecipe, map[string]string{"big.txt": big.String()})
	out1, out2 := buildAsRootAnd65534(t, dir, stampUmask022, []string{"TZ=UTC"}, []string{"TZ=Asia/Kathmandu", "LANG=de_DE.UTF-8"})
	const img = "live-root.erofs"
	a, err1 := os.ReadFile(filepath.Join(out1, img))
	b, err2 := os.ReadFile(filepath.Join(out2, img))
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("%s differs between the root and the uid 65534 build", img)
	}
	sums, _ := os.ReadFile(filepath.Join(out1, "SHA256SUMS"))
	if !strings.Contains(string(sums), "  "+img+"\n") {
		t.Errorf("SHA256SUMS does not list %s:\n%s", img, sums)
	}

	extract := filepath.Join(t.TempDir(), "x")
	if msg, err := exec.Command(fsck, "--extract="+extract, filepath.Join(out1, img)).CombinedOutput(); err != nil || len(bytes.TrimSpace(msg)) > 0 {
		t.Errorf("fsck.erofs --extract: %v\n%s", err, msg)
	}
	if got, err := os.ReadFile(filepath.Join(extract, "usr/share/stamp/big.txt")); err != nil || string(got) != big.String() {
		t.Errorf("fsck.erofs extracts another big.txt (%v)", err)
	}

	// Every entry equals the tar's, fields and content.
	r := stamp(t, dir, nil, "diff", filepath.Join(out1, "live-root.tar"), filepath.Join(out1, img)).mustSucceed(t)
	if strings.TrimSpace(r.stdout) != "" {
		t.Errorf("stamp diff of the tar and the erofs:\n%s", r.stdout)
	}
	r = stamp(t, dir, nil, "inspect", "--check", filepath.Join(out1, img)).mustSucceed(t)
	for _, want := range []string{"format:       erofs", "filesystem:   erofs uuid ", "features-incompat: 0x1"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stamp inspect lacks %q:\n%s", want, r.stdout)
		}
	}
}
