package ext4

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/test/harness"
)

var (
	testEpoch = time.Unix(1700000000, 0).UTC()
	testUUID  = [16]byte{0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef}
	testSeed  = [16]byte{0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10, 0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10}
)

const (
	testUUIDString = "01234567-89ab-cdef-0123-456789abcdef"
	testSeedString = "fedcba98-7654-3210-fedc-ba9876543210"
)

func testOptions() Options {
	return Options{UUID: testUUID, HashSeed: testSeed, Epoch: testEpoch}
}

func sealTree(t testing.TB, tr *rootfs.Tree) {
	t.Helper()
	if _, _, err := rootfs.Seal(context.Background(), tr, rootfs.SealOptions{Epoch: testEpoch, NoDefaultCleanup: true}); err != nil {
		t.Fatal(err)
	}
}

// writeImage writes the tree into a new sparse file and returns its path.
func writeImage(t testing.TB, tr *rootfs.Tree, o Options) (string, *Summary) {
	t.Helper()
	img := filepath.Join(t.TempDir(), "fs.img")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	size, err := Plan(tr.View(), o)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	sum, err := Write(context.Background(), tr.View(), f, o)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Size != size {
		t.Fatalf("Write made %d bytes, Plan said %d", sum.Size, size)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return img, sum
}

// fsck runs e2fsck -fn (env added to its environment) and fails on any exit status but 0 or any line
// beyond the pass headers and the summary.
func fsck(t testing.TB, img string, env ...string) {
	t.Helper()
	cmd := exec.Command(harness.Tool(t, "e2fsck"), "-fn", img)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("e2fsck -fn %s: %v\n%s", img, err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		switch {
		case strings.HasPrefix(line, "e2fsck "),
			strings.HasPrefix(line, "Pass "),
			strings.Contains(line, " files (") && strings.HasSuffix(line, " blocks"):
		default:
			t.Fatalf("e2fsck -fn %s says more than a clean check:\n%s", img, out)
		}
	}
}

func debugfs(t testing.TB, img, req string) string {
	t.Helper()
	cmd := exec.Command(harness.Tool(t, "debugfs"), "-R", req, img)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("debugfs -R %q: %v", req, err)
	}
	return string(out)
}

// debugfsBatch runs several requests in one debugfs and returns each one's
// output. Requests must print whole lines (not cat).
func debugfsBatch(t testing.TB, img string, reqs []string) []string {
	t.Helper()
	cmdFile := filepath.Join(t.TempDir(), "cmds")
	if err := os.WriteFile(cmdFile, []byte(strings.Join(reqs, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(harness.Tool(t, "debugfs"), "-f", cmdFile, img).Output()
	if err != nil {
		t.Fatalf("debugfs -f: %v", err)
	}
	var outs []string
	for _, sec := range strings.Split(string(out), "debugfs: ")[1:] {
		_, body, _ := strings.Cut(sec, "\n")
		outs = append(outs, body)
	}
	if len(outs) != len(reqs) {
		t.Fatalf("debugfs answered %d of %d requests", len(outs), len(reqs))
	}
	return outs
}
