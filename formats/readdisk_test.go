package formats

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/test/harness"
)

// diskTool runs a tool the disk reader's tests build their images with.
func diskTool(t *testing.T, name string, args ...string) {
	t.Helper()
	out, err := exec.Command(harness.Tool(t, name), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// TestReadDiskMadeByOtherTools reads a GPT disk whose ext4 root was made by
// mke2fs -d and whose ESP by mkfs.vfat and mcopy, raw and converted to qcow2
// by qemu-img, so the reader is checked against images stamp did not write.
func TestReadDiskMadeByOtherTools(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mke2fs -d copies the owners of the files it reads; making files owned by others needs root")
	}
	ctx := context.Background()
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	write := func(p, content string, mode os.FileMode, uid int) {
		t.Helper()
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		// chown clears setuid, so it comes first; os.Chmod would drop the
		// bit from a plain number.
		if err := os.Lchown(full, uid, uid); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Chmod(full, uint32(mode)); err != nil {
			t.Fatal(err)
		}
	}
	write("etc/hostname", "node\n", 0o644, 0)
	write("usr/bin/sudo", "\x7fELF sudo", 0o4755, 0)
	write("home/capi/.profile", "export PATH\n", 0o600, 1000)
	write("usr/lib/stamp/manifest.json", `{"entries":[{"path":"/etc/hostname"}]}`+"\n", 0o644, 0)
	// A file with a hole, which mke2fs -d keeps as one: go-diskfs alone
	// reads such a file without the hole.
	sparse := append(append([]byte("head"), make([]byte, 3<<20)...), []byte("tail")...)
	write("var/lib/sparse", "", 0o644, 0)
	sf, err := os.OpenFile(filepath.Join(root, "var/lib/sparse"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	sf.WriteAt([]byte("head"), 0)
	sf.WriteAt([]byte("tail"), int64(len(sparse)-4))
	sf.Close()
	if err := os.Link(filepath.Join(root, "usr/bin/sudo"), filepath.Join(root, "usr/bin/sudoedit")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/usr/bin/sudo", filepath.Join(root, "usr/bin/s")); err != nil {
		t.Fatal(err)
	}
	// A target of 60 bytes or more is kept in a data block, not the inode.
	longTarget := "/opt/" + strings.Repeat("long-target/", 8) + "end"
	if err := os.Symlink(longTarget, filepath.Join(root, "usr/bin/long")); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(root, "dev"), 0o755)
	if err := syscall.Mknod(filepath.Join(root, "dev/sda1"), syscall.S_IFBLK|0o660, int(259<<8|(300&0xff)|(300&^0xff)<<12)); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Chmod(filepath.Join(root, "dev/sda1"), 0o660); err != nil { // past the umask
		t.Fatal(err)
	}
	if err := os.Chtimes(filepath.Join(root, "etc/hostname"), tarEpoch, tarEpoch); err != nil {
		t.Fatal(err)
	}
	// xattrs and an ACL, when the host's file system takes them; the ACL
	// is stored in ext4's own form and must read back in the xattr form.
	hostXattrs := map[string]string{}
	profile := filepath.Join(root, "home/capi/.profile")
	if syscall.Setxattr(profile, "user.comment", []byte("hello"), 0) == nil {
		hostXattrs["user.comment"] = "hello"
	}
	if _, err := exec.LookPath("setfacl"); err == nil && exec.Command("setfacl", "-m", "u:1001:r,g:50:rw", profile).Run() == nil {
		buf := make([]byte, 256)
		if n, err := syscall.Getxattr(profile, "system.posix_acl_access", buf); err == nil {
			hostXattrs["system.posix_acl_access"] = string(buf[:n])
		}
	}

	ext4Img, espImg, raw := filepath.Join(dir, "root.ext4"), filepath.Join(dir, "esp.vfat"), filepath.Join(dir, "disk.raw")
	diskTool(t, "mke2fs", "-q", "-t", "ext4", "-U", "0f0e0d0c-0b0a-0908-0706-050403020100", "-L", "root", "-d", root, ext4Img, "16M")
	diskTool(t, "mkfs.vfat", "-C", "-i", "12345678", "-n", "ESP", espImg, "8192")
	boot := filepath.Join(dir, "BOOTX64.EFI")
	if err := os.WriteFile(boot, []byte("MZ not really an EFI binary"), 0o644); err != nil {
		t.Fatal(err)
	}
	diskTool(t, "mmd", "-i", espImg, "::/EFI", "::/EFI/BOOT")
	diskTool(t, "mcopy", "-i", espImg, boot, "::/EFI/BOOT/BOOTX64.EFI")
	diskTool(t, "truncate", "-s", "28M", raw)
	diskTool(t, "sgdisk", "-n", "1:2048:+8M", "-t", "1:ef00", "-c", "1:esp", "-n", "2:0:+16M", "-t", "2:4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709", "-c", "2:root", raw)
	diskTool(t, "dd", "if="+espImg, "of="+raw, "bs=1M", "seek=1", "conv=notrunc", "status=none")
	diskTool(t, "dd", "if="+ext4Img, "of="+raw, "bs=1M", "seek=9", "conv=notrunc", "status=none")
	qcow := filepath.Join(dir, "disk.qcow2")
	diskTool(t, "qemu-img", "convert", "-f", "raw", "-O", "qcow2", raw, qcow)

	t.Logf("xattrs checked: %d", len(hostXattrs))
	for _, p := range []string{raw, qcow} {
		im, err := ReadImage(ctx, p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		got := im.Tree.Get
		check := func(path string, typ rootfs.Type, perm, uid uint32, extra string) {
			t.Helper()
			e := got(path)
			if e == nil {
				t.Errorf("%s: %s missing; have %d entries", im.Format, path, im.Tree.Len())
				return
			}
			desc := fmt.Sprintf("%s %04o %d", e.Type, e.Perm, e.UID)
			if want := fmt.Sprintf("%s %04o %d", typ, perm, uid); desc != want {
				t.Errorf("%s: %s is %s, want %s", im.Format, path, desc, want)
			}
			switch typ {
			case rootfs.TypeSymlink:
				if e.Target != extra {
					t.Errorf("%s: %s -> %q, want %q", im.Format, path, e.Target, extra)
				}
			case rootfs.TypeRegular:
				if e.Digest != extra {
					t.Errorf("%s: %s sha256 %s, want %s", im.Format, path, e.Digest, extra)
				}
			}
		}
		check("/etc/hostname", rootfs.TypeRegular, 0o644, 0, sha256Hex("node\n"))
		check("/usr/bin/sudo", rootfs.TypeRegular, 0o4755, 0, sha256Hex("\x7fELF sudo"))
		profilePerm := uint32(0o600)
		if _, ok := hostXattrs["system.posix_acl_access"]; ok {
			profilePerm = 0o660 // the group bits are the ACL's mask
		}
		check("/home/capi/.profile", rootfs.TypeRegular, profilePerm, 1000, sha256Hex("export PATH\n"))
		check("/usr/bin/s", rootfs.TypeSymlink, 0o777, 0, "/usr/bin/sudo")
		check("/usr/bin/long", rootfs.TypeSymlink, 0o777, 0, longTarget)
		check("/dev/sda1", rootfs.TypeBlock, 0o660, 0, "")
		if e := got("/dev/sda1"); e != nil && (e.Major != 259 || e.Minor != 300) {
			t.Errorf("%s: /dev/sda1 is %d,%d, want 259,300", im.Format, e.Major, e.Minor)
		}
		check("/var/lib/sparse", rootfs.TypeRegular, 0o644, 0, sha256Hex(string(sparse)))
		if got("/usr/bin/sudo") != nil && got("/usr/bin/sudoedit") != nil &&
			(got("/usr/bin/sudo").Inode != got("/usr/bin/sudoedit").Inode || got("/usr/bin/sudo").Nlink() != 2) {
			t.Errorf("%s: the hard link is not read as one", im.Format)
		}
		if e := got("/home/capi/.profile"); e != nil {
			for k, v := range hostXattrs {
				if e.Xattrs[k] != v {
					t.Errorf("%s: xattr %s is %x, want %x", im.Format, k, e.Xattrs[k], v)
				}
			}
		}
		if e := got("/etc/hostname"); e != nil && !e.MTime.Equal(tarEpoch) {
			t.Errorf("%s: mtime %v, want %v", im.Format, e.MTime, tarEpoch)
		}
		if got("/lost+found") != nil {
			t.Errorf("%s: lost+found is counted as part of the tree", im.Format)
		}
		if string(im.Record) != `{"entries":[{"path":"/etc/hostname"}]}`+"\n" {
			t.Errorf("%s: record %q", im.Format, im.Record)
		}
		extra := map[string]bool{}
		for _, e := range im.Extra {
			extra[e.Path] = true
		}
		if !extra["esp:/EFI/BOOT/BOOTX64.EFI"] || !extra["root:/lost+found"] {
			t.Errorf("%s: extra entries %v", im.Format, extra)
		}
		if len(im.Partitions) != 2 || im.Partitions[0].Filesystem != "vfat" || im.Partitions[1].Filesystem != "ext4" ||
			im.Partitions[1].Start != 9<<20 {
			t.Errorf("%s: partitions %+v", im.Format, im.Partitions)
		}
		facts := map[string]string{}
		for _, fs := range im.Filesystems {
			for _, f := range fs.Facts {
				facts[fmt.Sprintf("p%d.%s", fs.Partition, f.Key)] = f.Value
			}
		}
		if facts["p2.uuid"] != "0f0e0d0c-0b0a-0908-0706-050403020100" || facts["p2.label"] != "root" ||
			facts["p1.volume-id"] != "1234-5678" {
			t.Errorf("%s: file system facts %v", im.Format, facts)
		}
		// An offset in a file's data names the file.
		bs, _ := strconv.ParseInt(facts["p2.block-size"], 10, 64)
		if got := im.Locate(9<<20 + dataBlock(t, ext4Img, "/etc/hostname")*bs + 2); !strings.HasPrefix(got, "ext4 data of /etc/hostname (inode ") {
			t.Errorf("%s: hostname's data is placed in %q", im.Format, got)
		}
		// An offset in the root file system's first inode table names the inode.
		if got := im.Locate(9<<20 + 1024 + 10); got != "partition 2 ext4 superblock" {
			t.Errorf("%s: the superblock's byte is placed in %q", im.Format, got)
		}
		var table Region
		for _, r := range im.Regions {
			if r.Item == "inode" {
				table = r
				break
			}
		}
		if got, want := im.Locate(table.Offset+11*table.ItemSize+3), "inode 12 (byte 3 of it) in "+table.Name; got != want {
			t.Errorf("%s: %q, want %q", im.Format, got, want)
		}
	}
}

func sha256Hex(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// dataBlock asks debugfs for the first data block of a file.
func dataBlock(t *testing.T, img, p string) int64 {
	t.Helper()
	out, err := exec.Command("debugfs", "-R", "bmap "+p+" 0", img).Output()
	if err != nil {
		t.Fatalf("debugfs bmap %s: %v", p, err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		t.Fatalf("debugfs bmap %s: %q", p, out)
	}
	return n
}
