package formats

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/stamp-dev/stamp/rootfs"
)

// Secure Boot of a raw disk (boot.loader shim), laid out on the ESP as
// Debian lays out a removable-media install (grub-install --removable):
// Debian's shim, signed by Microsoft, as the removable media boot file;
// beside it Debian's signed GRUB, which shim verifies against the Debian
// key built into it, and MokManager; and in /EFI/debian, the prefix built
// into signed GRUB, the grub.cfg it reads. That configuration boots the
// ESP's kernel, the tree's Debian-signed one (GRUB has shim verify it),
// and the initramfs systemd-boot would boot, with the loader entry's
// command line. Every signed part is the tree's, as the image's packages
// installed it, never the host's: stamp checks each carries a signature
// before the disk is written, and the firmware, shim and GRUB check that
// the signatures are good.

// Where Debian's shim-signed, shim-helpers-amd64-signed and
// grub-efi-amd64-signed put the signed binaries.
const (
	ShimSigned       = "/usr/lib/shim/shimx64.efi.signed"
	MokManagerSigned = "/usr/lib/shim/mmx64.efi.signed"
	GrubEFISigned    = "/usr/lib/grub/x86_64-efi-signed/grubx64.efi.signed"
)

// Where they go on the ESP. Signed GRUB's prefix is /EFI/debian on the
// device it was loaded from: it reads /EFI/debian/grub.cfg whichever
// directory shim started it from.
const (
	espShim       = "/EFI/BOOT/BOOTX64.EFI"
	espGrub       = "/EFI/BOOT/grubx64.efi"
	espMokManager = "/EFI/BOOT/mmx64.efi"
	espGrubConfig = "/EFI/debian/grub.cfg"
)

// shimESPFiles is what Secure Boot needs on the ESP: shim, signed GRUB,
// MokManager when the tree has it, GRUB's configuration, and the tree's
// newest kernel, which must be signed, with its initramfs.
func shimESPFiles(ctx context.Context, src *Source, rootPartUUID, cmdline string) ([]espFile, error) {
	if src.Arch != "amd64" {
		return nil, fmt.Errorf("boot.loader: shim is Debian's signed shim for amd64, not %s", src.Arch)
	}
	t := src.Tree
	signed := func(p, pkg string) (*rootfs.Entry, error) {
		e, err := treeFile(t, p)
		if err != nil {
			return nil, fmt.Errorf("boot.loader: Secure Boot with shim needs %s in the tree (Debian's %s package): %w", p, pkg, err)
		}
		if err := treeSigned(t, e); err != nil {
			return nil, fmt.Errorf("boot.loader: Secure Boot with shim needs a signed %s (Debian's %s package): %w", p, pkg, err)
		}
		return e, nil
	}
	shim, err := signed(ShimSigned, "shim-signed")
	if err != nil {
		return nil, err
	}
	grub, err := signed(GrubEFISigned, "grub-efi-amd64-signed")
	if err != nil {
		return nil, err
	}
	kpath, _, err := KernelOf(t)
	if err != nil {
		return nil, fmt.Errorf("boot.loader: shim needs a kernel in /boot: %w", err)
	}
	if err := treeSigned(t, t.Get(kpath)); err != nil {
		return nil, fmt.Errorf("boot.loader: Secure Boot with shim needs a kernel signed by Debian (linux-image-*-amd64), but %s is not: %w", kpath, err)
	}
	kernel, initrd, err := espKernelFiles(ctx, src, "shim")
	if err != nil {
		return nil, err
	}
	// GRUB's parser would escape a quote or a backslash with a backslash,
	// which the kernel does not read.
	options := kernelOptions(rootPartUUID, cmdline)
	if strings.ContainsAny(options, `'"\`) {
		return nil, fmt.Errorf("boot.cmdline: %q: signed GRUB cannot pass quotes or backslashes to the kernel unchanged", cmdline)
	}
	cfg, err := grubBIOSConfig(options)
	if err != nil {
		return nil, err
	}
	files := []espFile{
		treeFATFile(espShim, t, shim),
		treeFATFile(espGrub, t, grub),
	}
	// MokManager is what shim starts to enroll a key; shim-signed brings
	// it, but shim boots a signed GRUB without it.
	if _, err := t.Lookup(MokManagerSigned, true); err == nil {
		e, err := signed(MokManagerSigned, "shim-helpers-amd64-signed")
		if err != nil {
			return nil, err
		}
		files = append(files, treeFATFile(espMokManager, t, e))
	}
	return append(files,
		bytesFATFile(espGrubConfig, []byte("# Written by stamp: boot the ESP's kernel and initramfs.\n"+cfg)),
		kernel, initrd), nil
}

// treeSigned is peSigned of a file of the tree.
func treeSigned(t *rootfs.Sealed, e *rootfs.Entry) error {
	f, err := t.Open(e.Path)
	if err != nil {
		return err
	}
	defer f.Close()
	return peSigned(f, e.Size)
}

// Offsets and values of the PE/COFF format (Microsoft's PE Format,
// "Optional Header Data Directories" and "The Attribute Certificate
// Table").
const (
	peHeaderOffset   = 0x3c // the DOS header's e_lfanew
	peOptionalHeader = 24   // after "PE\0\0" and the COFF header
	peCertTable32    = 128  // the certificate table's data directory, PE32
	peCertTable64    = 144  // and PE32+
	certPKCSSigned   = 0x2  // WIN_CERT_TYPE_PKCS_SIGNED_DATA: Authenticode
	maxPEHeader      = 1 << 20
)

// peSigned says whether r holds a PE/COFF image (an EFI binary, or a Linux
// kernel with its EFI stub) that carries an Authenticode signature: a
// certificate table, inside the file, whose first certificate is PKCS#7
// signed data. It does not check the signature; the firmware and shim do.
func peSigned(r io.ReaderAt, size int64) error {
	h := make([]byte, 64)
	if _, err := r.ReadAt(h, 0); err != nil || h[0] != 'M' || h[1] != 'Z' {
		return errors.New("not a PE/COFF image (no MZ header)")
	}
	pe := int64(binary.LittleEndian.Uint32(h[peHeaderOffset:]))
	if pe <= 0 || pe > maxPEHeader {
		return errors.New("not a PE/COFF image (no PE header)")
	}
	opt := make([]byte, peOptionalHeader+peCertTable64+8)
	if _, err := r.ReadAt(opt, pe); err != nil || string(opt[:4]) != "PE\x00\x00" {
		return errors.New("not a PE/COFF image (no PE header)")
	}
	dir := peOptionalHeader + peCertTable64
	switch binary.LittleEndian.Uint16(opt[peOptionalHeader:]) {
	case 0x10b:
		dir = peOptionalHeader + peCertTable32
	case 0x20b:
	default:
		return errors.New("not a PE32 or PE32+ image")
	}
	off, n := int64(binary.LittleEndian.Uint32(opt[dir:])), int64(binary.LittleEndian.Uint32(opt[dir+4:]))
	if off == 0 || n == 0 {
		return errors.New("it carries no signature (an empty certificate table)")
	}
	if off+n > size || n < 8 {
		return fmt.Errorf("its certificate table (%d bytes at %d) lies outside the file's %d bytes", n, off, size)
	}
	cert := make([]byte, 8)
	if _, err := r.ReadAt(cert, off); err != nil {
		return err
	}
	if typ := binary.LittleEndian.Uint16(cert[6:]); typ != certPKCSSigned {
		return fmt.Errorf("its certificate is of type %#x, not an Authenticode signature", typ)
	}
	return nil
}

// secureBootFacts says, for inspect, that an ESP is laid out as loader shim
// lays it out, and whether shim, GRUB and the kernel each carry a
// signature; nothing for another ESP.
func secureBootFacts(esp fs.FS) []Fact {
	if _, err := fs.Stat(esp, espGrubConfig[1:]); err != nil {
		return nil
	}
	var parts []string
	for _, p := range []string{espShim, espGrub, espKernel} {
		state := "signed"
		if b, err := fs.ReadFile(esp, p[1:]); err != nil {
			state = "missing"
		} else if peSigned(bytes.NewReader(b), int64(len(b))) != nil {
			state = "unsigned"
		}
		parts = append(parts, p+" "+state)
	}
	return []Fact{{"secure-boot", "shim: " + strings.Join(parts, ", ")}}
}
