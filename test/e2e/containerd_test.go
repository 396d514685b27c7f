package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"

	ctdstate "github.com/stamp-dev/stamp/layers/containerd"
	"github.com/stamp-dev/stamp/test/harness"
)

// ctdBase is the tree the images are written into: a dpkg database that
// has the host's containerd installed (the one the test runs), and its
// configuration naming the sandbox image.
func ctdBase(t *testing.T, version, sandbox string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(name, body string, typ byte, mode int64) {
		h := &tar.Header{Name: name, Typeflag: typ, Mode: mode, ModTime: time.Unix(pullEpoch, 0), Format: tar.FormatPAX}
		if typ == tar.TypeReg {
			h.Size = int64(len(body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, body)
	}
	for _, d := range []string{"etc/", "etc/containerd/", "var/", "var/lib/", "var/lib/dpkg/"} {
		add(d, "", tar.TypeDir, 0o755)
	}
	add("etc/containerd/config.toml", fmt.Sprintf("version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = %q\n", sandbox), tar.TypeReg, 0o644)
	status := ""
	if version != "" {
		status = "Package: containerd\nStatus: install ok installed\nPriority: optional\nSection: admin\n" +
			"Installed-Size: 1\nMaintainer: test\nArchitecture: amd64\nVersion: " + version + "\nDescription: the host's containerd\n\n"
	}
	add("var/lib/dpkg/status", status, tar.TypeReg, 0o644)
	tw.Close()
	return buf.Bytes()
}

// hostContainerd is the host's containerd package version, as dpkg has it.
func hostContainerd(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("dpkg-query", "-W", "-f", "${Version}", "containerd").Output()
	if err != nil {
		t.Fatalf("the containerd package is not installed (test/scripts/deps.sh installs it): %v", err)
	}
	return strings.TrimSpace(string(out))
}

// TestImagesIntoContainerd writes images into containerd's state with stamp
// and hands the tree to the real containerd: it lists every image
// complete, lists the layer chains, runs a container from a written
// snapshot, and its own pull of the same image from the registry unpacks
// the same files as stamp did.
func TestImagesIntoContainerd(t *testing.T) {
	testImagesIntoContainerd(t, ctdFlavor{version: hostContainerd(t)})
}

// ctdFlavor is the containerd a test hands the tree to.
type ctdFlavor struct {
	// version is what the tree's dpkg database says of it.
	version string
	// bin holds its containerd, ctr and containerd-shim-runc-v2; "" is
	// the host's.
	bin string
	// repo, when set, holds it as the package containerd.io: the tree
	// installs it, and the test runs the tree's own.
	repo *harness.DebRepo
}

// in is the flavor whose programs are those of the tree unpacked at root.
func (f ctdFlavor) in(root string) ctdFlavor {
	if f.repo != nil {
		f.bin = filepath.Join(root, "usr", "bin")
	}
	return f
}

// tool is the path of one of the flavor's programs.
func (f ctdFlavor) tool(name string) string {
	if f.bin == "" {
		return name
	}
	return filepath.Join(f.bin, name)
}

func testImagesIntoContainerd(t *testing.T, fl ctdFlavor) {
	if os.Geteuid() != 0 {
		t.Fatal("this test runs containerd, which needs root")
	}
	for _, tool := range []string{fl.tool("containerd"), fl.tool("ctr"), "runc", "tar", "busybox"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing (test/scripts/deps.sh installs it): %v", tool, err)
		}
	}
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatal(err)
	}
	reg := harness.StartRegistry(t)
	// The bottom layer: busybox, a file the top layer whites out, a
	// directory it makes opaque, and a directory whose attributes the top
	// layer's applier copies up.
	lower := harness.TarLayer(t,
		harness.TarFile{Name: "bin/", Type: tar.TypeDir, Mode: 0o755},
		harness.TarFile{Name: "bin/busybox", Body: string(bb), Mode: 0o755},
		harness.TarFile{Name: "bin/sh", Type: tar.TypeSymlink, Link: "busybox", Mode: 0o777},
		harness.TarFile{Name: "etc/", Type: tar.TypeDir, Mode: 0o755},
		harness.TarFile{Name: "etc/hidden", Body: "the top layer hides this\n"},
		harness.TarFile{Name: "etc/kept", Body: "kept\n"},
		harness.TarFile{Name: "opaque/", Type: tar.TypeDir, Mode: 0o755},
		harness.TarFile{Name: "opaque/old", Body: "old\n"},
		harness.TarFile{Name: "srv/", Type: tar.TypeDir, Mode: 0o750, UID: 5, GID: 6, Xattrs: map[string]string{"user.dir": "lower"}},
	)
	upper := harness.GzipLayer(t,
		harness.TarFile{Name: "etc/.wh.hidden", Body: ""},
		harness.TarFile{Name: "opaque/", Type: tar.TypeDir, Mode: 0o755},
		harness.TarFile{Name: "opaque/.wh..wh..opq", Body: ""},
		harness.TarFile{Name: "opaque/new", Body: "new\n"},
		harness.TarFile{Name: "hello.txt", Body: "hello from the top layer\n", Mode: 0o4755, UID: 1000, GID: 1000,
			Xattrs: map[string]string{"user.stamp": "top", "trusted.overlay.redirect": "/etc"}},
		harness.TarFile{Name: "hello-link", Type: tar.TypeLink, Link: "hello.txt"},
		harness.TarFile{Name: "srv/app/data", Body: "data\n", UID: 7, GID: 7}, // srv/ itself is not listed
	)
	app := harness.Image(t, "amd64", lower, upper)
	pause := harness.Image(t, "amd64", lower)
	appRef, pauseRef := reg.Addr+"/k8s/app:v1", reg.Addr+"/k8s/pause:3.10"
	appIdx := multiArch(app, harness.Image(t, "arm64", harness.TarLayer(t, harness.TarFile{Name: "x", Body: "arm64"})))
	appDigest := harness.PushIndex(t, appRef, appIdx)
	pauseDigest := harness.Push(t, pauseRef, pause)

	version, baseVersion, install := fl.version, fl.version, ""
	if fl.repo != nil {
		// The tree gets its containerd from the package, and the test
		// runs that one.
		baseVersion = ""
		install = fmt.Sprintf("customize:\n  layers:\n    - debs: {repo: %q, suite: /, keyring: %s, packages: [containerd.io]}",
			fl.repo.FileURL(), fl.repo.Keyring)
	}
	build := func(t *testing.T, name, extra string) (dir, tarPath string) {
		dir = harness.TempDirFor65534(t)
		recipe := fmt.Sprintf(`apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: %s
arch: amd64
epoch: %d
base:
  tarball: ./base.tar
%s
provision:
  layers:
    - images:
        into: containerd
        refs: ["%s@%s", "%s@%s"]%s
outputs:
  - {format: tar}
`, name, pullEpoch, install, appRef, appDigest, pauseRef, pauseDigest, extra)
		writeFiles(t, dir, map[string]string{"recipe.yaml": recipe, "base.tar": string(ctdBase(t, baseVersion, pauseRef))})
		out := filepath.Join(dir, "out")
		stampAs65534(t, dir, nil, "build", "recipe.yaml", "-o", out, "--cache-dir", filepath.Join(dir, "cache"), "--work-dir", dir).mustSucceed(t)
		// As root, and with the layers and blobs kept by reference in the
		// cache: the same bytes.
		for _, b := range []struct {
			name string
			run  func(*testing.T, string, []string, ...string) result
		}{{"root", stamp}, {"cached", stampCached}} {
			o := filepath.Join(dir, "out-"+b.name)
			b.run(t, dir, nil, "build", "recipe.yaml", "-o", o, "--cache-dir", filepath.Join(dir, "cache-"+b.name)).mustSucceed(t)
			if a, c := mustReadFile(t, filepath.Join(out, "SHA256SUMS")), mustReadFile(t, filepath.Join(o, "SHA256SUMS")); !bytes.Equal(a, c) {
				t.Fatalf("the %s build differs:\n%s\nwant\n%s", b.name, c, a)
			}
		}
		return dir, filepath.Join(out, name+".tar")
	}

	t.Run("complete", func(t *testing.T) {
		dir, tarPath := build(t, "ctd", "")
		stamp(t, dir, nil, "verify", "recipe.yaml", "--cache-dir", filepath.Join(dir, "verify-cache")).mustSucceed(t)
		// stamp inspect lists what containerd's databases hold.
		insp := stamp(t, dir, nil, "inspect", tarPath).mustSucceed(t).stdout
		// The sandbox image is pinned where that containerd's CRI pins it
		// (from 1.7.3; Debian's bookworm has 1.6).
		pinned := "io.cri-containerd.image=managed"
		if s, err := ctdstate.SchemaFor("containerd", version); err != nil {
			t.Fatal(err)
		} else if s.Pinned(version) {
			pinned = "io.cri-containerd.pinned=pinned"
		}
		for _, want := range []string{
			"containerd:", "metadata version ",
			"image k8s.io/" + pauseRef + " -> " + pauseDigest, pinned,
			"image k8s.io/" + appRef + " -> " + appDigest + " (application/vnd.oci.image.index.v1+json",
			"snapshot k8s.io/overlayfs/" + chainIDs(t, app)[1] + " parent " + chainIDs(t, app)[0] + " (committed, snapshots/2)",
		} {
			if !strings.Contains(insp, want) {
				t.Errorf("stamp inspect does not say %q:\n%s", want, insp)
			}
		}
		root := unpackAsRoot(t, tarPath)
		state := filepath.Join(root, "var/lib/containerd")
		t.Logf("containerd state: content %d KiB, snapshots %d KiB",
			duKiB(t, filepath.Join(state, "io.containerd.content.v1.content")), duKiB(t, filepath.Join(state, "io.containerd.snapshotter.v1.overlayfs")))
		ctd := startContainerd(t, fl.in(root), state)
		if v := ctd.ctr(t, "version"); !strings.Contains(v, upstreamOf(version)) {
			t.Fatalf("the containerd running is not %s:\n%s", version, v)
		} else {
			t.Logf("containerd %s: %s", version, strings.Join(strings.Fields(v), " "))
		}
		ls := ctd.ctr(t, "-n", "k8s.io", "images", "ls", "-q")
		appName := strings.TrimSuffix(appRef, "")
		for _, want := range []string{appName, pauseRef, reg.Addr + "/k8s/app@" + appDigest, reg.Addr + "/k8s/pause@" + pauseDigest} {
			if !containsLine(ls, want) {
				t.Errorf("ctr images ls lacks %s:\n%s", want, ls)
			}
		}
		if n := len(strings.Fields(ls)); n != 6 {
			t.Errorf("ctr images ls lists %d images, want 6 (two images under three names each, the config IDs shared by none):\n%s", n, ls)
		}
		check := ctd.ctr(t, "-n", "k8s.io", "images", "check")
		for _, l := range strings.Split(strings.TrimSpace(check), "\n")[1:] {
			if !strings.Contains(l, "complete") {
				t.Errorf("ctr images check: not complete: %s", l)
			}
		}
		snaps := ctd.ctr(t, "-n", "k8s.io", "snapshots", "ls")
		chain := chainIDs(t, app)
		for i, c := range chain {
			if !strings.Contains(snaps, c) {
				t.Errorf("ctr snapshots ls lacks the chain %s:\n%s", c, snaps)
			}
			if i > 0 && !strings.Contains(snaps, chain[i-1]) {
				t.Errorf("snapshot %s's parent is not listed", c)
			}
		}
		if strings.Count(snaps, "Committed") != 2 {
			t.Errorf("ctr snapshots ls: want two committed chains:\n%s", snaps)
		}
		const script = "cat /hello.txt; cat /hello-link; ls -a /etc /opaque; test -e /etc/hidden && echo HIDDEN-SHOWS; cat /srv/app/data"
		ours := ctd.ctr(t, "-n", "k8s.io", "run", "--rm", appRef, "stamp-written", "/bin/sh", "-c", script)
		if !strings.Contains(ours, "hello from the top layer\nhello from the top layer\n") || strings.Contains(ours, "HIDDEN") ||
			strings.Contains(ours, "old") || !strings.Contains(ours, "new") || !strings.Contains(ours, "data") {
			t.Errorf("the container from the written snapshot printed:\n%s", ours)
		}
		// containerd's own pull of the same image, in a namespace of its
		// own, from the registry.
		ctd.ctr(t, "-n", "pulled", "images", "pull", "--plain-http", appRef+"@"+appDigest)
		theirs := ctd.ctr(t, "-n", "pulled", "run", "--rm", appRef+"@"+appDigest, "containerd-pulled", "/bin/sh", "-c", script)
		if ours != theirs {
			t.Errorf("the container from containerd's own pull printed:\n%s\nfrom stamp's:\n%s", theirs, ours)
		}
		ctd.stop(t)
		// The snapshots containerd unpacked hold what stamp's hold.
		ids := backendIDs(t, filepath.Join(state, "io.containerd.snapshotter.v1.overlayfs", "metadata.db"))
		for _, c := range chain {
			a, b := ids["k8s.io/"+c], ids["pulled/"+c]
			if a == "" || b == "" {
				t.Fatalf("chain %s: snapshots k8s.io %q, pulled %q", c, a, b)
			}
			snapdir := filepath.Join(state, "io.containerd.snapshotter.v1.overlayfs", "snapshots")
			compareDirs(t, filepath.Join(snapdir, a, "fs"), filepath.Join(snapdir, b, "fs"))
		}
		// The metadata database still opens, and containerd starts on it
		// again.
		db, err := bolt.Open(filepath.Join(state, "io.containerd.metadata.v1.bolt", "meta.db"), 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
		if err != nil {
			t.Fatalf("meta.db after containerd ran: %v", err)
		}
		db.View(func(tx *bolt.Tx) error {
			if b := tx.Bucket([]byte("v1")); b == nil || b.Bucket([]byte("k8s.io")).Bucket([]byte("images")).Bucket([]byte(pauseRef)) == nil {
				t.Error("meta.db after containerd ran has no image " + pauseRef)
			}
			return nil
		})
		db.Close()
		ctd = startContainerd(t, fl.in(root), state)
		if ls := ctd.ctr(t, "-n", "k8s.io", "images", "ls", "-q"); !containsLine(ls, pauseRef) {
			t.Errorf("after a restart, ctr images ls:\n%s", ls)
		}
		ctd.stop(t)
	})

	t.Run("discard", func(t *testing.T) {
		_, tarPath := build(t, "ctd-discard", "\n        discardLayers: true")
		root := unpackAsRoot(t, tarPath)
		state := filepath.Join(root, "var/lib/containerd")
		blobs := filepath.Join(state, "io.containerd.content.v1.content", "blobs", "sha256")
		for i := range 2 {
			if _, err := os.Stat(filepath.Join(blobs, layerDigest(t, app, i).Hex)); !os.IsNotExist(err) {
				t.Errorf("layer %d's blob is in the content store: %v", i, err)
			}
		}
		t.Logf("containerd state without layers: content %d KiB", duKiB(t, filepath.Join(state, "io.containerd.content.v1.content")))
		ctd := startContainerd(t, fl.in(root), state)
		// Without the layers no unpack could make the snapshot: the
		// container runs from the one stamp wrote.
		out := ctd.ctr(t, "-n", "k8s.io", "run", "--rm", appRef, "discarded", "/bin/busybox", "cat", "/hello.txt")
		if out != "hello from the top layer\n" {
			t.Errorf("the container printed %q", out)
		}
		ctd.stop(t)
	})
}

func containsLine(s, want string) bool {
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) == want {
			return true
		}
	}
	return false
}

// chainIDs are an image's layer chain IDs, bottom first.
func chainIDs(t *testing.T, img v1.Image) []string {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i, d := range cf.RootFS.DiffIDs {
		if i == 0 {
			out = append(out, d.String())
			continue
		}
		s := sha256.Sum256([]byte(out[i-1] + " " + d.String()))
		out = append(out, "sha256:"+hex.EncodeToString(s[:]))
	}
	return out
}

// unpackAsRoot unpacks a tar output as root with owners, devices and every
// xattr, as the node's disk holds them.
func unpackAsRoot(t *testing.T, tarPath string) string {
	t.Helper()
	root := t.TempDir()
	out, err := exec.Command("tar", "--xattrs", "--xattrs-include=*", "--numeric-owner", "--same-owner", "-p",
		"-xf", tarPath, "-C", root).CombinedOutput()
	if err != nil {
		t.Fatalf("tar -x %s: %v\n%s", tarPath, err, out)
	}
	return root
}

func duKiB(t *testing.T, dir string) int64 {
	t.Helper()
	out, err := exec.Command("du", "-sk", dir).Output()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	fmt.Sscan(string(out), &n)
	return n
}

// containerd is the host's containerd running on a state directory of a
// test, with its own socket and runtime state.
type containerd struct {
	cmd    *exec.Cmd
	sock   string
	log    *bytes.Buffer
	ctrBin string
}

func startContainerd(t *testing.T, fl ctdFlavor, root string) *containerd {
	t.Helper()
	dir, err := os.MkdirTemp("", "stamp-ctd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "containerd.sock")
	cfg := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.images", "io.containerd.cri.v1.runtime", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = %q
[ttrpc]
  address = %q
`, root, filepath.Join(dir, "state"), sock, sock+".ttrpc")
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	c := &containerd{sock: sock, log: &bytes.Buffer{}, ctrBin: fl.tool("ctr")}
	c.cmd = exec.Command(fl.tool("containerd"), "--config", filepath.Join(dir, "config.toml"), "--log-level", "debug")
	if fl.bin != "" {
		// Its own shim, found through PATH.
		c.cmd.Env = append(os.Environ(), "PATH="+fl.bin+":"+os.Getenv("PATH"))
	}
	c.cmd.Stdout, c.cmd.Stderr = c.log, c.log
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			c.cmd.Process.Kill()
			c.cmd.Wait()
		}
		if t.Failed() {
			t.Logf("containerd's log:\n%s", lastLines(c.log.String(), 60))
		}
	})
	for i := 0; ; i++ {
		if err := exec.Command(c.ctrBin, "-a", sock, "version").Run(); err == nil {
			break
		}
		if i > 100 {
			t.Fatalf("containerd did not answer on %s:\n%s", sock, c.log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	return c
}

func (c *containerd) ctr(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.ctrBin, append([]string{"-a", c.sock}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("ctr %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String()
}

func (c *containerd) stop(t *testing.T) {
	t.Helper()
	c.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		c.cmd.Process.Kill()
		<-done
		t.Fatal("containerd did not stop on SIGTERM")
	}
}

// backendIDs maps "namespace/chainID" to the overlayfs snapshotter's
// directory number, read from its database.
func backendIDs(t *testing.T, file string) map[string]string {
	t.Helper()
	db, err := bolt.Open(file, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	out := map[string]string{}
	db.View(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("v1")).Bucket([]byte("snapshots")).ForEach(func(k, v []byte) error {
			parts := strings.SplitN(string(k), "/", 3)
			if v != nil || len(parts) != 3 {
				return nil
			}
			id, _ := readUvarint(tx.Bucket([]byte("v1")).Bucket([]byte("snapshots")).Bucket(k).Get([]byte("id")))
			out[parts[0]+"/"+parts[2]] = fmt.Sprint(id)
			return nil
		})
	})
	return out
}

func readUvarint(b []byte) (uint64, int) {
	var x uint64
	var s uint
	for i, c := range b {
		if c < 0x80 {
			return x | uint64(c)<<s, i + 1
		}
		x |= uint64(c&0x7f) << s
		s += 7
	}
	return 0, 0
}

// compareDirs holds two unpacked snapshot directories to each other:
// every path's type, mode, owner, device number, xattrs (trusted ones
// included), content and symlink target, and which paths share an inode.
func compareDirs(t *testing.T, a, b string) {
	t.Helper()
	describe := func(root string) (map[string]string, map[string]string) {
		entries, links := map[string]string{}, map[string]string{}
		inodes := map[uint64]string{}
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				t.Fatal(err)
			}
			rel := strings.TrimPrefix(p, root)
			var st unix.Stat_t
			if err := unix.Lstat(p, &st); err != nil {
				t.Fatal(err)
			}
			desc := fmt.Sprintf("mode %o owner %d:%d", st.Mode, st.Uid, st.Gid)
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFCHR, unix.S_IFBLK:
				desc += fmt.Sprintf(" dev %d,%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
			case unix.S_IFLNK:
				target, _ := os.Readlink(p)
				desc += " -> " + target
			case unix.S_IFREG:
				data, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				desc += " sha256 " + sha256Hex(data)
				if st.Nlink > 1 {
					if first, ok := inodes[st.Ino]; ok {
						links[rel] = first
					} else {
						inodes[st.Ino] = rel
					}
				}
			}
			sz, _ := unix.Llistxattr(p, nil)
			if sz > 0 {
				buf := make([]byte, sz)
				n, _ := unix.Llistxattr(p, buf)
				names := strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00")
				sort.Strings(names)
				for _, name := range names {
					v := make([]byte, 256)
					m, _ := unix.Lgetxattr(p, name, v)
					desc += fmt.Sprintf(" %s=%q", name, v[:max(m, 0)])
				}
			}
			entries[rel] = desc
			return nil
		})
		return entries, links
	}
	ea, la := describe(a)
	eb, lb := describe(b)
	for p, d := range eb {
		if ea[p] != d {
			t.Errorf("%s: stamp wrote %q, containerd unpacked %q", p, ea[p], d)
		}
	}
	for p := range ea {
		if _, ok := eb[p]; !ok {
			t.Errorf("%s: stamp wrote %q, containerd unpacked nothing there", p, ea[p])
		}
	}
	if fmt.Sprint(la) != fmt.Sprint(lb) {
		t.Errorf("hard links: stamp %v, containerd %v", la, lb)
	}
}

// upstreamOf is containerd's own version in a package version:
// "1.6.20~ds1-1+deb12u3" is 1.6.20.
func upstreamOf(v string) string {
	if i := strings.LastIndex(v, "-"); i > 0 {
		v = v[:i]
	}
	if i := strings.IndexAny(v, "~+"); i > 0 {
		v = v[:i]
	}
	return v
}
