package formats

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strings"

	"github.com/stamp-dev/stamp/disk"
	"github.com/stamp-dev/stamp/disk/authenticode"
	"github.com/stamp-dev/stamp/disk/efivar"
	"github.com/stamp-dev/stamp/disk/fat"
	"github.com/stamp-dev/stamp/disk/pe"
	"github.com/stamp-dev/stamp/disk/uki"
	"github.com/stamp-dev/stamp/rootfs"
)

// A raw disk with boot.loader uki boots a unified kernel image that stamp
// assembles on the tree's systemd-stub (disk/uki): the tree's newest
// kernel, an initramfs (stamp's, which opens a verified /usr; or the tree's
// own when /usr is not on a partition of its own), the tree's os-release
// and the loader entry's command line, with usrhash= when /usr is verified.
// On the ESP it is /EFI/Linux/NAME.efi, a Type #2 entry of the Boot Loader
// Specification that the tree's systemd-boot, the removable media boot
// file, finds and boots; with systemdBoot false it is the removable media
// boot file itself, which the firmware starts alone.
//
// With secureBoot, the user's key signs the UKI and systemd-boot
// (disk/authenticode), and the ESP gets the certificate as EFI signature
// lists and signed updates of db, KEK and PK in /loader/keys/auto, which
// systemd-boot enrols on a machine in setup mode (secure-boot-enroll force
// in loader.conf). The key itself goes nowhere.

// Where loader uki puts things on the ESP.
const (
	espLinux      = "/EFI/Linux"
	espKeys       = "/loader/keys/auto"
	osReleasePath = "/etc/os-release"
)

// SecureBootSpec signs a raw disk's boot chain with the user's own key.
type SecureBootSpec struct {
	// Signer holds the key; it is never serialized, so neither the cache
	// key nor any record holds it.
	Signer *authenticode.Signer `json:"-"`
	// Certificate is the hex SHA-256 of the signer's certificate, which
	// the cache key and the record hold instead: a certificate has one
	// key, and PKCS#1 v1.5 signatures have no randomness, so it decides
	// the bytes as the key does.
	Certificate string
}

// ukiPlan is a disk's UKI: laid out while the disk is planned, with a root
// hash of the same length standing in for /usr's, so that the ESP can be
// sized; built for real once /usr's hash tree is written.
type ukiPlan struct {
	path string // on the ESP
	stub *uki.Stub
	// phases are the boot phases the tree's systemd measures into PCR 11
	// after the stub, in order.
	phases  []string
	parts   uki.Parts
	cmdline string // without usrhash=
	verity  bool
	signer  *authenticode.Signer
	size    int64
	index   int // of the UKI among the ESP's files

	// Set by build.
	built        []byte
	digest       string
	pcr11        []byte
	secs         []uki.Section
	digests      map[string][]byte // of each section's contents
	cmdlineBuilt string
}

// ukiESPFiles lays out the ESP of loader uki. usrOption is the command
// line's naming of a plain /usr partition ("" for none); verity says /usr
// is verified, and its root hash is added by build.
func ukiESPFiles(ctx context.Context, src *Source, boot *BootSpec, rootPartUUID, usrOption string, verityUsr, usrPart bool) ([]espFile, *ukiPlan, error) {
	t := src.Tree
	stub, err := ukiStub(src)
	if err != nil {
		return nil, nil, err
	}
	osrel, err := osRelease(t)
	if err != nil {
		return nil, nil, fmt.Errorf("boot.loader: uki: %w", err)
	}
	linux, ver, err := ukiKernel(t, src.Arch)
	if err != nil {
		return nil, nil, err
	}
	initrd, err := ukiInitrd(ctx, t, ver, verityUsr, usrPart)
	if err != nil {
		return nil, nil, err
	}
	cmdline := kernelOptions(rootPartUUID, boot.Cmdline)
	if usrOption != "" {
		cmdline += " " + usrOption
	}
	u := &ukiPlan{stub: stub, cmdline: cmdline, verity: verityUsr, phases: measuredPhases(t),
		parts: uki.Parts{OSRelease: osrel, Linux: linux, Initrd: pe.Bytes(initrd)}}
	if boot.SecureBoot != nil {
		u.signer = boot.SecureBoot.Signer
		if u.signer == nil {
			return nil, nil, fmt.Errorf("boot.secureBoot: no key was loaded for certificate %s", boot.SecureBoot.Certificate)
		}
	}
	// Sized with a stand-in root hash: the command line, and so the image,
	// has the same length with the real one.
	if err := u.build(strings.Repeat("0", 2*sha256.Size)); err != nil {
		return nil, nil, err
	}
	u.size = int64(len(u.built))

	arch := efiArch[src.Arch]
	var files []espFile
	if boot.SystemdBoot == nil || *boot.SystemdBoot {
		u.path = espLinux + "/" + src.Name + ".efi"
		if files, err = u.menuFiles(src); err != nil {
			return nil, nil, err
		}
	} else {
		u.path = "/EFI/BOOT/" + arch.bootFile
	}
	if u.signer != nil {
		e, err := efivar.Enroll(u.signer, disk.SignatureOwner(src.Seed), src.Epoch)
		if err != nil {
			return nil, nil, fmt.Errorf("boot.secureBoot: %w", err)
		}
		esl := efivar.SignatureList(u.signer.Cert, disk.SignatureOwner(src.Seed))
		files = append(files,
			bytesFATFile(espKeys+"/PK.auth", e.PK), bytesFATFile(espKeys+"/KEK.auth", e.KEK), bytesFATFile(espKeys+"/db.auth", e.DB),
			bytesFATFile(espKeys+"/PK.esl", esl), bytesFATFile(espKeys+"/KEK.esl", esl), bytesFATFile(espKeys+"/db.esl", esl))
	}
	u.index = len(files)
	files = append(files, espFile{File: fatFileOf(u.path, u.size, func() []byte { return u.built })})
	return files, u, nil
}

// ukiStub is the tree's systemd-stub for the source's architecture.
func ukiStub(src *Source) (*uki.Stub, error) {
	stubPath, ok := uki.StubPaths[src.Arch]
	if !ok {
		return nil, fmt.Errorf("boot.loader: uki on architecture %q: stamp knows no systemd-stub for it (amd64 or arm64)", src.Arch)
	}
	se, err := treeFile(src.Tree, stubPath)
	if err != nil {
		return nil, fmt.Errorf("boot.loader: uki needs the systemd-stub %s in the tree (Debian's systemd-boot-efi package): %w", stubPath, err)
	}
	stubBytes, err := readTreeFile(src.Tree, se, 16<<20)
	if err != nil {
		return nil, err
	}
	stub, err := uki.ParseStub(stubBytes)
	if err != nil {
		return nil, fmt.Errorf("boot.loader: uki: %s: %w", stubPath, err)
	}
	if stub.Arch != src.Arch {
		return nil, fmt.Errorf("boot.loader: uki: %s is a stub for %s, not %s", stubPath, stub.Arch, src.Arch)
	}
	return stub, nil
}

// ukiKernel is the tree's kernel as a UKI's .linux section, and its version.
func ukiKernel(t *rootfs.Sealed, arch string) (pe.Content, string, error) {
	kpath, ver, err := KernelOf(t)
	if err != nil {
		return pe.Content{}, "", fmt.Errorf("boot.loader: uki needs a kernel in /boot: %w", err)
	}
	img, err := kernelImage(t, kpath, arch)
	if err != nil {
		return pe.Content{}, "", fmt.Errorf("boot.loader: %w", err)
	}
	ke := t.Get(kpath)
	linux := pe.Content{Size: ke.Size, Open: func() (io.ReadCloser, error) { return t.Open(ke.Path) }}
	if img != nil {
		linux = pe.Bytes(img)
	}
	return linux, ver, nil
}

// ukiInitrd is the tree's initramfs for kernel ver, or stamp's when /usr
// is a partition of its own or the tree has none: the tree's cannot mount
// /usr from a partition of its own, let alone verify it.
func ukiInitrd(ctx context.Context, t *rootfs.Sealed, ver string, verityUsr, usrPart bool) ([]byte, error) {
	if ie, err := treeFile(t, "/boot/initrd.img-"+ver); err == nil && !usrPart {
		return readTreeFile(t, ie, 1<<30)
	}
	var b bytes.Buffer
	if err := WriteBootInitramfs(ctx, t, &b, BootInitramfsOptions{KernelVersion: ver, UsrVerity: verityUsr}); err != nil {
		return nil, fmt.Errorf("boot.loader: uki: making the initramfs: %w", err)
	}
	return b.Bytes(), nil
}

// menuFiles are systemd-boot and its configuration, which starts the UKI
// at once; signed, and set to enrol the keys, when the UKI is signed.
func (u *ukiPlan) menuFiles(src *Source) ([]espFile, error) {
	t, arch := src.Tree, efiArch[src.Arch]
	sdboot := "/usr/lib/systemd/boot/efi/" + arch.systemdBoot
	be, err := treeFile(t, sdboot)
	if err != nil {
		return nil, fmt.Errorf("boot.loader: uki boots from systemd-boot, which needs %s in the tree (Debian's systemd-boot-efi package), or set boot.systemdBoot false: %w", sdboot, err)
	}
	bootFile := treeFATFile("/EFI/BOOT/"+arch.bootFile, t, be)
	if u.signer != nil {
		b, err := readTreeFile(t, be, 16<<20)
		if err != nil {
			return nil, err
		}
		if b, err = signPE(b, u.signer); err != nil {
			return nil, fmt.Errorf("boot.secureBoot: signing %s: %w", sdboot, err)
		}
		bootFile = bytesFATFile("/EFI/BOOT/"+arch.bootFile, b)
	}
	conf := fmt.Sprintf("default %s.efi\ntimeout 0\nconsole-mode keep\n", src.Name)
	if u.signer != nil {
		// On a machine in setup mode, systemd-boot enrols the keys of
		// /loader/keys/auto and resets; from then on the firmware
		// enforces Secure Boot with them.
		conf += "secure-boot-enroll force\n"
	}
	return []espFile{bootFile, bytesFATFile(loaderConf, []byte(conf))}, nil
}

// build assembles the UKI with /usr's root hash (hex) on its command line
// when /usr is verified, signs it, and predicts its PCR 11.
func (u *ukiPlan) build(rootHash string) error {
	cmdline := u.cmdline
	if u.verity {
		cmdline += " usrhash=" + rootHash
	}
	parts := u.parts
	parts.Cmdline = []byte(cmdline)
	im, secs, err := uki.Build(u.stub, parts)
	if err != nil {
		return fmt.Errorf("boot.loader: uki: %w", err)
	}
	var sign pe.Signer
	if u.signer != nil {
		sign = u.signer.PE
	}
	b, err := im.SealBytes(sign)
	if err != nil {
		return fmt.Errorf("boot.loader: uki: %w", err)
	}
	if u.size != 0 && int64(len(b)) != u.size {
		return fmt.Errorf("boot.loader: uki: the image is %d bytes, not the %d it was laid out at", len(b), u.size)
	}
	var ms []uki.Measurement
	if u.pcr11, ms, err = u.stub.PCR11(secs); err != nil {
		return fmt.Errorf("boot.loader: uki: %w", err)
	}
	u.digests = map[string][]byte{}
	for _, m := range ms {
		u.digests[m.What] = m.Digest
	}
	u.cmdlineBuilt = cmdline
	u.built, u.secs = b, secs
	sum := sha256.Sum256(u.built)
	u.digest = hex.EncodeToString(sum[:])
	return nil
}

// facts are what the disk says of its UKI, in the manifest and
// provenance.json; inspect reads the same keys back from the ESP.
func (u *ukiPlan) facts(esp string) []Fact {
	fs := []Fact{{"uki", esp + ":" + u.path}, {"uki.stub", "systemd-stub " + u.stub.Version}}
	for _, s := range u.secs {
		fs = append(fs, Fact{"uki.section" + s.Name, fmt.Sprintf("%d bytes sha256:%x", s.Content.Size, u.digests[s.Name])})
	}
	fs = append(fs, Fact{"uki.cmdline", u.cmdlineBuilt}, Fact{"uki.pcr11.sha256", hex.EncodeToString(u.pcr11)})
	pcr := u.pcr11
	for _, ph := range u.phases {
		pcr = uki.Extend(pcr, uki.Phases(ph))
		fs = append(fs, Fact{"uki.pcr11.sha256.after-" + ph, hex.EncodeToString(pcr)})
	}
	if u.signer != nil {
		fs = append(fs, Fact{"uki.signer", fmt.Sprintf("%s sha256:%s", u.signer.Cert.Subject, u.signer.Fingerprint())})
	}
	return fs
}

// pcrPhaseUnits are systemd 252's units that measure boot phases into PCR
// 11 once the root is up, and the word each measures (the initrd's phases
// need systemd in the initramfs, which stamp's is not).
var pcrPhaseUnits = []struct{ unit, phase string }{
	{"systemd-pcrphase-sysinit.service", "sysinit"},
	{"systemd-pcrphase.service", "ready"},
}

// measuredPhases are the boot phases the tree's systemd will measure into
// PCR 11 after the stub: those whose unit sysinit.target wants (as
// systemd's package installs them), given systemd-pcrphase and the TPM
// libraries it loads (libtss2-esys, -rc, -mu; without them it measures
// nothing).
func measuredPhases(t *rootfs.Sealed) []string {
	var libexec string
	for _, p := range []string{"/usr/lib/systemd/systemd-pcrphase", "/lib/systemd/systemd-pcrphase"} {
		if _, err := treeFile(t, p); err == nil {
			libexec = p
		}
	}
	if libexec == "" {
		return nil
	}
	for _, lib := range []string{"libtss2-esys.so.0", "libtss2-rc.so.0", "libtss2-mu.so.0"} {
		found := false
		for _, d := range []string{"/usr/lib/x86_64-linux-gnu/", "/usr/lib/aarch64-linux-gnu/", "/lib/x86_64-linux-gnu/", "/lib/aarch64-linux-gnu/"} {
			if _, err := treeFile(t, d+lib); err == nil {
				found = true
			}
		}
		if !found {
			return nil
		}
	}
	var phases []string
	for _, u := range pcrPhaseUnits {
		if e, err := t.Lookup("/etc/systemd/system/"+u.unit, false); err == nil && e.Type == rootfs.TypeSymlink && e.Target == "/dev/null" {
			continue // masked
		}
		for _, dir := range []string{"/usr/lib/systemd/system/sysinit.target.wants/", "/lib/systemd/system/sysinit.target.wants/", "/etc/systemd/system/sysinit.target.wants/"} {
			if _, err := t.Lookup(dir+u.unit, false); err == nil {
				phases = append(phases, u.phase)
				break
			}
		}
	}
	return phases
}

// signPE signs an EFI application as it is, its COFF symbol table
// dropped, since data after the last section is signed but covered by no
// section.
func signPE(b []byte, s *authenticode.Signer) ([]byte, error) {
	im, err := pe.Open(b)
	if err != nil {
		return nil, err
	}
	if err := im.StripSymbolTable(); err != nil {
		return nil, err
	}
	return im.SealBytes(s.PE)
}

// osRelease is the tree's os-release, which systemd-boot reads the UKI's
// title from: it must name the system (PRETTY_NAME, IMAGE_ID, NAME or ID),
// or systemd-boot does not list the UKI.
func osRelease(t *rootfs.Sealed) ([]byte, error) {
	e, err := treeFile(t, osReleasePath)
	if err != nil {
		if e, err = treeFile(t, "/usr/lib/os-release"); err != nil {
			return nil, fmt.Errorf("the tree has no %s or /usr/lib/os-release, which systemd-boot takes a UKI's name from", osReleasePath)
		}
	}
	b, err := readTreeFile(t, e, 1<<20)
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if ok && strings.Trim(v, `"'`) != "" && (k == "PRETTY_NAME" || k == "IMAGE_ID" || k == "NAME" || k == "ID") {
			return b, nil
		}
	}
	return nil, fmt.Errorf("%s names no system (PRETTY_NAME, IMAGE_ID, NAME or ID), so systemd-boot would not list the UKI", e.Path)
}

// readTreeFile reads a file of the tree of at most limit bytes.
func readTreeFile(t *rootfs.Sealed, e *rootfs.Entry, limit int64) ([]byte, error) {
	if e.Size > limit {
		return nil, fmt.Errorf("%s: %d bytes, more than the %d expected", e.Path, e.Size, limit)
	}
	f, err := t.Open(e.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// fatFileOf is an ESP file whose content is known only when it is written.
func fatFileOf(p string, size int64, content func() []byte) fat.File {
	return fat.File{Path: p, Size: size, Open: func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(content())), nil
	}}
}

// LoadSecureBoot reads the user's PEM key and certificate for
// SecureBootSpec; an error names "key" or "cert".
func LoadSecureBoot(keyPEM, certPEM []byte) (*SecureBootSpec, error) {
	s, err := authenticode.LoadPEM(keyPEM, certPEM)
	if err != nil {
		return nil, err
	}
	return &SecureBootSpec{Signer: s, Certificate: s.Fingerprint()}, nil
}
