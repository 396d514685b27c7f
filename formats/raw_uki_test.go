package formats

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/disk"
	"github.com/stamp-dev/stamp/disk/uki"
	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/test/harness"
)

// sealedSpec is a sealed disk: the UKI booted by systemd-boot, signed with
// key, /usr verified on a partition of its own.
func sealedSpec(t testing.TB, key *harness.SecureBootKey) *RawSpec {
	t.Helper()
	sb, err := LoadSecureBoot(key.KeyPEM, key.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	return &RawSpec{
		Partitions: []PartitionSpec{
			{Name: "esp", Type: "esp", Size: 64 << 20, Filesystem: "vfat"},
			{Name: "usr", Type: "usr", Filesystem: "ext4"},
			{Name: "usr-verity", Type: "usr-verity", Filesystem: "none"},
			{Name: "root", Type: "root", Filesystem: "ext4"},
		},
		Grow: true,
		Boot: &BootSpec{Loader: "uki", Cmdline: "console=ttyS0 rw", SecureBoot: sb}}
}

// facts are an image's facts and its file systems', as inspect prints
// them.
func facts(im *Image) []Fact {
	out := append([]Fact(nil), im.Facts...)
	for _, fs := range im.Filesystems {
		out = append(out, fs.Facts...)
	}
	return out
}

func factOf(res *Result, key string) string {
	for _, f := range res.Facts {
		if f.Key == key {
			return f.Value
		}
	}
	return ""
}

// TestRawUKISealed writes a sealed disk from a tree of real Debian parts
// (kernel, systemd-stub and systemd-boot of systemd-boot-efi 252, dmsetup)
// and holds each part to its reference tool: sgdisk, fsck.vfat and e2fsck
// find the disk clean; veritysetup verify accepts /usr's partition against
// the hash partition and the root hash on the UKI's command line; the
// partitions' GUIDs are the root hash's halves and their types the
// Discoverable Partitions Specification's; sbverify accepts the UKI and
// systemd-boot with the signer's certificate; objdump lists the UKI's
// sections; the enrolment files are on the ESP; the root file system holds
// no /usr; and a second write gives the same bytes.
func TestRawUKISealed(t *testing.T) {
	harness.RequireTools(t, "sgdisk", "fsck.vfat", "mcopy", "e2fsck", "dd", "veritysetup", "sbverify", "objdump")
	kit := harness.BootParts(t)
	tree := kit.SealedTree(t, harness.BootTreeOptions{Marker: "sealed"})
	key := harness.NewSecureBootKey(t, "stamp sealed test", 0)
	img, res := writeRaw(t, rawSource(tree, "amd64"), sealedSpec(t, key))
	sgdiskClean(t, img)

	roothash := factOf(res, "verity.usr.roothash")
	pcr := factOf(res, "uki.pcr11.sha256")
	if len(roothash) != 64 || len(pcr) != 64 {
		t.Fatalf("facts %v", res.Facts)
	}
	rh, _ := hex.DecodeString(roothash)
	_, parts := readGPT(t, img)
	byName := map[string]disk.Partition{}
	for _, p := range parts {
		byName[p.Name] = p
	}
	usr, hashp, root, esp := byName["usr"], byName["usr-verity"], byName["root"], byName["esp"]
	if usr.Type != disk.TypeUsrAMD64 || hashp.Type != disk.TypeUsrVerityAMD64 || !bytes.Equal(usr.GUID[:], rh[:16]) || !bytes.Equal(hashp.GUID[:], rh[16:]) {
		t.Errorf("usr %s %s, usr-verity %s %s; root hash %s", usr.Type, disk.FormatUUID(usr.GUID), hashp.Type, disk.FormatUUID(hashp.GUID), roothash)
	}
	if usr.Attributes&disk.AttrReadOnly == 0 || hashp.Attributes&disk.AttrReadOnly == 0 {
		t.Errorf("the usr partitions are not flagged read-only: %#x, %#x", usr.Attributes, hashp.Attributes)
	}
	usrImg, hashImg := extract(t, img, usr), extract(t, img, hashp)
	out := run(t, "veritysetup", "verify", "--debug", usrImg, hashImg, roothash)
	if !strings.Contains(out, "Verification of data area succeeded") {
		t.Errorf("veritysetup verify:\n%s", out)
	}
	run(t, "e2fsck", "-fn", usrImg)
	rootImg := extract(t, img, root)
	run(t, "e2fsck", "-fn", rootImg)
	for _, l := range strings.Split(run(t, "debugfs", "-R", "ls -p /usr", rootImg), "\n") {
		if f := strings.Split(l, "/"); len(f) > 5 && f[5] != "." && f[5] != ".." {
			t.Errorf("the root's /usr holds %s", f[5])
		}
	}
	espImg := extract(t, img, esp)
	run(t, "fsck.vfat", "-n", espImg)
	dir := t.TempDir()
	for _, f := range []string{"EFI/BOOT/BOOTX64.EFI", "EFI/Linux/node.efi", "loader/loader.conf",
		"loader/keys/auto/PK.auth", "loader/keys/auto/KEK.auth", "loader/keys/auto/db.auth", "loader/keys/auto/db.esl"} {
		run(t, "mcopy", "-n", "-i", espImg, "::"+f, filepath.Join(dir, filepath.Base(f)))
	}
	for _, f := range []string{"BOOTX64.EFI", "node.efi"} {
		if out := run(t, "sbverify", "--cert", key.CertPath, filepath.Join(dir, f)); !strings.Contains(out, "Signature verification OK") {
			t.Errorf("sbverify %s: %s", f, out)
		}
	}
	if conf, _ := os.ReadFile(filepath.Join(dir, "loader.conf")); !strings.Contains(string(conf), "default node.efi\n") || !strings.Contains(string(conf), "secure-boot-enroll force\n") {
		t.Errorf("loader.conf:\n%s", conf)
	}
	t.Logf("objdump -h:\n%s", run(t, "objdump", "-h", filepath.Join(dir, "node.efi")))
	b, err := os.ReadFile(filepath.Join(dir, "node.efi"))
	if err != nil {
		t.Fatal(err)
	}
	info, err := uki.Read(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	wantCmdline := "root=PARTUUID=" + disk.FormatUUID(root.GUID) + " ro console=ttyS0 rw usrhash=" + roothash
	if info.Cmdline != wantCmdline || hex.EncodeToString(info.PCR11) != pcr || info.SignatureErr != nil {
		t.Errorf("the UKI: command line %q (want %q), PCR 11 %x (facts %s), signature %v", info.Cmdline, wantCmdline, info.PCR11, pcr, info.SignatureErr)
	}
	t.Logf("facts: %v", res.Facts)

	// Read back as inspect reads it: /usr joins the tree, the UKI's facts
	// are the writer's, and the hash tree checks against the UKI.
	im, err := ReadImage(t.Context(), img)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range tree.View().Entries() {
		got := im.Tree.Get(e.Path)
		if got == nil || got.Type != e.Type || got.Size != e.Size || got.Digest != e.Digest || got.Perm != e.Perm {
			t.Errorf("read back, %s is %+v, not %+v", e.Path, got, e.Inode)
		}
	}
	read := map[string]string{}
	for _, f := range facts(im) {
		read[f.Key] = f.Value
	}
	for _, f := range res.Facts {
		if strings.HasPrefix(f.Key, "uki.") && f.Key != "uki" && read[f.Key] != f.Value && !strings.HasPrefix(read[f.Key], f.Value) {
			t.Errorf("fact %s: written %q, read back %q", f.Key, f.Value, read[f.Key])
		}
	}
	if v := read["verity.usr"]; !strings.Contains(v, roothash+": /usr's data, its hash partition and the UKI's usrhash= agree") {
		t.Errorf("verity.usr read back: %q", v)
	}
	if v := read["uki.signer"]; !strings.HasSuffix(v, ", verifies") {
		t.Errorf("uki.signer read back: %q", v)
	}
	if v := read["secure-boot.boot-loader"]; !strings.Contains(v, "CN=stamp sealed test") || !strings.HasSuffix(v, ", verifies") {
		t.Errorf("secure-boot.boot-loader read back: %q", v)
	}
	t.Logf("read back: %v", facts(im))

	again, _ := writeRaw(t, rawSource(tree, "amd64"), sealedSpec(t, key))
	if sumFile(t, again) != sumFile(t, img) {
		t.Error("two writes of the sealed disk differ")
	}
}

// TestRawUKIRefusals: what the sealed layout cannot hold fails before the
// disk file exists, naming the field.
func TestRawUKIRefusals(t *testing.T) {
	kit := harness.BootParts(t)
	key := harness.NewSecureBootKey(t, "stamp sealed test", 0)
	good := kit.SealedTree(t, harness.BootTreeOptions{Marker: "sealed"})
	split := kit.SealedTree(t, harness.BootTreeOptions{Marker: "sealed"})
	if err := split.Remove("/lib64"); err != nil {
		t.Fatal(err)
	}
	if _, err := split.MkdirAll("/lib64", rootfsHeaderDir()); err != nil {
		t.Fatal(err)
	}
	noDmsetup := kit.SealedTree(t, harness.BootTreeOptions{Marker: "sealed"})
	if err := noDmsetup.Remove(Dmsetup); err != nil {
		t.Fatal(err)
	}
	arm := kit.SealedTree(t, harness.BootTreeOptions{Marker: "sealed"})
	for _, c := range []struct {
		name string
		src  *Source
		edit func(*RawSpec)
		want string
	}{
		{"split usr", rawSource(split, "amd64"), nil, "partitions[1]: the tree's /lib64 is a directory, not a link into /usr"},
		{"no dmsetup", rawSource(noDmsetup, "amd64"), nil, "a verified /usr is opened with the tree's dmsetup (Debian's dmsetup package)"},
		{"arm64 without its stub", rawSource(arm, "arm64"), nil, "boot.loader: uki needs the systemd-stub /usr/lib/systemd/boot/efi/linuxaa64.efi.stub in the tree"},
		{"usr without uki", rawSource(good, "amd64"), func(s *RawSpec) { s.Boot = &BootSpec{Loader: "systemd-boot"} }, "partitions[1].type: /usr on a partition of its own is booted by loader uki"},
		{"verity without usr", rawSource(good, "amd64"), func(s *RawSpec) { s.Partitions = append(s.Partitions[:1], s.Partitions[2:]...) }, "partitions[1].type: a usr-verity partition hashes a partition of type usr"},
		{"secure boot with shim", rawSource(good, "amd64"), func(s *RawSpec) { s.Boot.Loader = "shim" }, "boot.secureBoot: signing with your own key is for loader uki"},
		{"hash partition too small", rawSource(good, "amd64"), func(s *RawSpec) { s.Partitions[2].Size = 1 << 20; s.Partitions[1].Size = 512 << 20 }, "partitions[2].size: 1.0 MiB is too small for the hash tree"},
	} {
		t.Run(c.name, func(t *testing.T) {
			spec := sealedSpec(t, key)
			if c.edit != nil {
				c.edit(spec)
			}
			dir := t.TempDir()
			_, err := rawFormat{}.Write(t.Context(), c.src, &Spec{Format: "raw", Name: "raw", Options: spec}, dir, "node")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want %q", err, c.want)
			}
			if left, _ := os.ReadDir(dir); len(left) != 0 {
				t.Errorf("a refused disk left %v", left)
			}
		})
	}
}

// TestUKIStubVersionUnknown: a stub of a version stamp does not know is
// refused, naming boot.loader and the version.
func TestUKIStubVersionUnknown(t *testing.T) {
	kit := harness.BootParts(t)
	tree := kit.SealedTree(t, harness.BootTreeOptions{Marker: "sealed"})
	stub, err := os.ReadFile(kit.LinuxStub)
	if err != nil {
		t.Fatal(err)
	}
	stub = bytes.Replace(stub, []byte("systemd-stub 252."), []byte("systemd-stub 999."), 1)
	if _, err := tree.Create(uki.StubPaths["amd64"], rootfsHeaderFile(), bytes.NewReader(stub)); err != nil {
		t.Fatal(err)
	}
	_, err = rawFormat{}.Write(t.Context(), rawSource(tree, "amd64"), &Spec{Format: "raw", Name: "raw", Options: sealedSpec(t, harness.NewSecureBootKey(t, "k", 0))}, t.TempDir(), "node")
	if err == nil || !strings.Contains(err.Error(), "boot.loader: uki: /usr/lib/systemd/boot/efi/linuxx64.efi.stub: systemd-stub 999.") {
		t.Errorf("a stub 999: %v", err)
	}
}

func rootfsHeaderDir() rootfs.Header {
	return rootfs.Header{Type: rootfs.TypeDir, Perm: 0o755, MTime: tarEpoch}
}

func rootfsHeaderFile() rootfs.Header {
	return rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644, MTime: tarEpoch}
}

// TestUKIPhases: a tree whose systemd measures the boot phases sysinit and
// ready (systemd-pcrphase, its units wanted by sysinit.target, the TPM
// libraries it loads) gets the PCR 11 after each predicted too, each
// phase's SHA-256 extending the stub's value, as systemd-measure computes
// (disk/uki's test holds the two together); a masked unit measures
// nothing.
func TestUKIPhases(t *testing.T) {
	kit := harness.BootParts(t)
	tree := kit.SealedTree(t, harness.BootTreeOptions{Marker: "sealed"})
	for _, p := range []string{"/usr/lib/systemd/systemd-pcrphase", "/usr/lib/x86_64-linux-gnu/libtss2-esys.so.0",
		"/usr/lib/x86_64-linux-gnu/libtss2-rc.so.0", "/usr/lib/x86_64-linux-gnu/libtss2-mu.so.0",
		"/usr/lib/systemd/system/systemd-pcrphase-sysinit.service", "/usr/lib/systemd/system/systemd-pcrphase.service"} {
		if _, err := tree.Create(p, rootfsHeaderFile(), strings.NewReader("fake")); err != nil {
			t.Fatal(err)
		}
	}
	for _, u := range []string{"systemd-pcrphase-sysinit.service", "systemd-pcrphase.service"} {
		if _, err := tree.Create("/usr/lib/systemd/system/sysinit.target.wants/"+u, rootfs.Header{Type: rootfs.TypeSymlink, Perm: 0o777, MTime: tarEpoch, Target: "../" + u}, nil); err != nil {
			t.Fatal(err)
		}
	}
	key := harness.NewSecureBootKey(t, "phases", 0)
	_, res := writeRaw(t, rawSource(tree, "amd64"), sealedSpec(t, key))
	pcr, _ := hex.DecodeString(factOf(res, "uki.pcr11.sha256"))
	sysinit := uki.Extend(pcr, uki.Phases("sysinit"))
	ready := uki.Extend(sysinit, uki.Phases("ready"))
	if factOf(res, "uki.pcr11.sha256.after-sysinit") != hex.EncodeToString(sysinit) || factOf(res, "uki.pcr11.sha256.after-ready") != hex.EncodeToString(ready) {
		t.Errorf("facts %v", res.Facts)
	}
	if _, err := tree.Create("/etc/systemd/system/systemd-pcrphase.service", rootfs.Header{Type: rootfs.TypeSymlink, Perm: 0o777, MTime: tarEpoch, Target: "/dev/null"}, nil); err != nil {
		t.Fatal(err)
	}
	_, res = writeRaw(t, rawSource(tree, "amd64"), sealedSpec(t, key))
	if factOf(res, "uki.pcr11.sha256.after-sysinit") == "" || factOf(res, "uki.pcr11.sha256.after-ready") != "" {
		t.Errorf("with systemd-pcrphase.service masked: %v", res.Facts)
	}
}

// TestRawUKIAlone: without /usr on a partition of its own, the UKI is the
// removable media boot file alone and boots the tree's initramfs, if it has
// one; the disk reads back with the UKI's facts.
func TestRawUKIAlone(t *testing.T) {
	kit := harness.BootParts(t)
	tree := kit.SealedTree(t, harness.BootTreeOptions{Marker: "alone"})
	if _, err := tree.Create("/boot/initrd.img-"+kit.KernelVersion, rootfsHeaderFile(), strings.NewReader("the tree's own initramfs")); err != nil {
		t.Fatal(err)
	}
	no := false
	spec := &RawSpec{Partitions: []PartitionSpec{{Name: "esp", Type: "esp", Size: 64 << 20, Filesystem: "vfat"}, {Name: "root", Type: "root", Filesystem: "ext4"}},
		Boot: &BootSpec{Loader: "uki", Cmdline: "console=ttyS0", SystemdBoot: &no}}
	img, res := writeRaw(t, rawSource(tree, "amd64"), spec)
	if factOf(res, "uki") != "esp:/EFI/BOOT/BOOTX64.EFI" || factOf(res, "uki.signer") != "" || factOf(res, "verity.usr.roothash") != "" {
		t.Errorf("facts %v", res.Facts)
	}
	if want := fmt.Sprintf("%d bytes sha256:%x", len("the tree's own initramfs"), sha256.Sum256([]byte("the tree's own initramfs"))); factOf(res, "uki.section.initrd") != want {
		t.Errorf("initrd %q, want the tree's: %q", factOf(res, "uki.section.initrd"), want)
	}
	im, err := ReadImage(t.Context(), img)
	if err != nil {
		t.Fatal(err)
	}
	read := map[string]string{}
	for _, f := range facts(im) {
		read[f.Key] = f.Value
	}
	if read["uki.pcr11.sha256"] != factOf(res, "uki.pcr11.sha256") || read["uki.signer"] != "unsigned" {
		t.Errorf("read back: %v", facts(im))
	}
	for _, a := range res.Adds {
		if strings.Contains(a, "loader.conf") {
			t.Errorf("the UKI alone has a loader.conf: %s", a)
		}
	}
}
