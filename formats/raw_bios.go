package formats

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"github.com/stamp-dev/stamp/disk"
	"github.com/stamp-dev/stamp/rootfs"
)

// Legacy BIOS boot of a raw disk, beside its UEFI loader: GRUB for i386-pc,
// laid out as grub-install lays it out on a GPT disk. The protective MBR's
// boot code is GRUB's boot.img, which loads core.img from the first sectors
// of a BIOS boot partition; core.img carries the modules that read the ESP
// and a configuration that boots the kernel and initramfs systemd-boot boots,
// with the same command line. So one disk boots under UEFI (systemd-boot) and
// under BIOS (GRUB), and the ESP holds one kernel for both.
//
// grub-mkimage (Debian's grub-common) makes core.img from the modules of
// Debian's grub-pc-bin: the tree's, when the image has them, else the
// host's. The rest is written here, as grub-bios-setup would write it, so
// no device, loop mount or root is needed: boot.img patched with the first
// sector of core.img, and core.img's block list patched with the rest.

// GrubPCDir is where Debian's grub-pc-bin keeps GRUB's i386-pc modules and
// images, in the tree and on the host.
const GrubPCDir = "/usr/lib/grub/i386-pc"

// grubBIOSModules are what core.img needs to boot from the ESP: the BIOS
// disk driver, the GPT, FAT and the Linux loader (grub-mkimage adds what
// they depend on). The configuration is run by GRUB's rescue parser, so no
// normal.mod is needed.
var grubBIOSModules = []string{"biosdisk", "part_gpt", "fat", "linux"}

// Offsets in GRUB's boot.img and diskboot.img (GRUB's
// include/grub/i386/pc/boot.h and grub-bios-setup).
const (
	mbrBootCode       = 440   // boot code ends where the disk signature begins
	bootKernelSector  = 0x5c  // boot.img: LBA of core.img's first sector
	bootDrive         = 0x64  // boot.img: 0xff is "the drive the BIOS booted"
	bootDriveCheck    = 0x66  // boot.img: a jump a hard disk's setup turns into nops
	blocklistStart    = 0x1f4 // diskboot.img: the first block list entry
	blocklistSegment  = 0x1fe
	coreLoadSegment   = 0x820 // where diskboot.img loads the rest of core.img
	maxCoreImageBytes = 0xffff * disk.SectorSize
)

// biosBoot is GRUB for i386-pc planned for a disk: its two images, made,
// and the partition core.img goes in.
type biosBoot struct {
	part    *plannedPart
	bootImg []byte // boot.img, 512 bytes
	core    []byte // core.img, padded to whole sectors
	// mbr and coreImg are the patched images, once the partition is placed.
	mbr     []byte
	coreImg []byte
}

// planBIOS checks a disk can boot by BIOS and makes core.img. esp is the
// partition the loader fills, options the kernel command line its entry
// gives.
func planBIOS(ctx context.Context, src *Source, parts []*plannedPart, esp *plannedPart, options string) (*biosBoot, error) {
	if src.Arch != "amd64" {
		return nil, fmt.Errorf("boot.bios: legacy BIOS boot is for amd64, not %s", src.Arch)
	}
	b := &biosBoot{}
	espIndex := 0
	for i, pp := range parts {
		switch {
		case pp.spec.Type == "bios" && b.part == nil:
			b.part = pp
		case pp == esp:
			espIndex = i + 1
		}
	}
	if b.part == nil {
		return nil, errors.New("boot.bios: BIOS boot needs a partition of type bios (1MiB) to hold GRUB's core.img")
	}
	if b.part.spec.Filesystem != "none" {
		return nil, fmt.Errorf("%s.filesystem: a BIOS boot partition holds GRUB's core.img, not a file system", b.part.field)
	}
	cfg, err := grubBIOSConfig(options)
	if err != nil {
		return nil, err
	}
	// The prefix names the ESP on the drive the BIOS booted; GRUB sets its
	// root from it, so the configuration's paths are the ESP's.
	core, bootImg, from, err := grubImage(ctx, src, "i386-pc", fmt.Sprintf("(,gpt%d)/grub", espIndex), cfg, grubBIOSModules)
	if err != nil {
		return nil, err
	}
	b.bootImg = bootImg
	if b.core, err = diskCore(core, from); err != nil {
		return nil, err
	}
	return b, nil
}

// diskCore checks core.img begins with GRUB's diskboot.img, which loads the
// rest by one block list entry, and pads it to whole sectors.
func diskCore(core []byte, from string) ([]byte, error) {
	if len(core) < 2*disk.SectorSize || binary.LittleEndian.Uint64(core[blocklistStart:]) != 2 ||
		binary.LittleEndian.Uint16(core[blocklistSegment:]) != coreLoadSegment {
		return nil, fmt.Errorf("boot.bios: grub-mkimage made a core.img whose first sector is not GRUB's diskboot.img (modules from %s)", from)
	}
	if len(core) > maxCoreImageBytes {
		return nil, fmt.Errorf("boot.bios: core.img is %s; GRUB's block list loads at most %s", human(int64(len(core))), human(maxCoreImageBytes))
	}
	pad := (disk.SectorSize - len(core)%disk.SectorSize) % disk.SectorSize
	return append(core, make([]byte, pad)...), nil
}

// grubImage makes a GRUB image of format (i386-pc, i386-pc-eltorito) with
// grub-mkimage from GRUB's i386-pc modules (the tree's, else the host's),
// with prefix and the early configuration cfg, and returns it with the
// modules' boot.img and where the modules came from.
func grubImage(ctx context.Context, src *Source, format, prefix, cfg string, modules []string) (img, bootImg []byte, from string, err error) {
	mkimage, err := exec.LookPath("grub-mkimage")
	if err != nil {
		return nil, nil, "", fmt.Errorf("boot.bios: BIOS boot needs grub-mkimage on the host (Debian's grub-common): %w", err)
	}
	work, err := os.MkdirTemp(src.WorkDir, "grub-pc-")
	if err != nil {
		return nil, nil, "", err
	}
	defer os.RemoveAll(work)
	modDir, from, err := grubModules(src.Tree, work)
	if err != nil {
		return nil, nil, "", err
	}
	if bootImg, err = os.ReadFile(filepath.Join(modDir, "boot.img")); err != nil {
		return nil, nil, "", fmt.Errorf("boot.bios: GRUB's modules from %s: %w", from, err)
	}
	if len(bootImg) != disk.SectorSize || bootImg[510] != 0x55 || bootImg[511] != 0xaa {
		return nil, nil, "", fmt.Errorf("boot.bios: %s/boot.img from %s is not a 512-byte boot sector", GrubPCDir, from)
	}
	cfgPath, imgPath := filepath.Join(work, "early.cfg"), filepath.Join(work, "core.img")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, nil, "", err
	}
	args := append([]string{"-O", format, "-d", modDir, "-o", imgPath, "-c", cfgPath, "-p", prefix}, modules...)
	cmd := exec.CommandContext(ctx, mkimage, args...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, nil, "", fmt.Errorf("boot.bios: grub-mkimage with the modules from %s (-O %s): %v\n%s", from, format, err, out)
	}
	img, err = os.ReadFile(imgPath)
	return img, bootImg, from, err
}

// grubBIOSConfig is core.img's own configuration: the kernel and initramfs
// of the ESP with the loader entry's options. Each word is quoted for
// GRUB's parser; GRUB joins them with spaces, and would escape a quote or a
// backslash with a backslash, which the kernel does not read, so a command
// line holding either cannot be passed on unchanged and is refused.
func grubBIOSConfig(options string) (string, error) {
	words, err := grubWords(options)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("linux %s %s\ninitrd %s\nboot\n", espKernel, words, espInitrd), nil
}

// grubWords quotes each word of a kernel command line for GRUB's parser.
func grubWords(options string) (string, error) {
	var words []string
	for _, w := range strings.Fields(options) {
		if strings.ContainsAny(w, `'"\`) {
			return "", fmt.Errorf("boot.cmdline: %q: GRUB, which boots BIOS machines, cannot pass quotes or backslashes to the kernel unchanged", w)
		}
		words = append(words, "'"+w+"'")
	}
	return strings.Join(words, " "), nil
}

// HostFiles implements HostReader: a BIOS disk's core.img is made by the
// host's grub-mkimage, from the host's modules when the tree has none.
func (s *RawSpec) HostFiles() []string {
	if s.Boot == nil || !s.Boot.BIOS {
		return nil
	}
	var out []string
	if p, err := exec.LookPath("grub-mkimage"); err == nil {
		out = append(out, p)
	}
	return append(out, GrubPCDir)
}

// grubModules finds GRUB's i386-pc modules: the tree's, copied into work
// (grub-mkimage reads a host directory), or else the host's.
func grubModules(t *rootfs.Sealed, work string) (dir, from string, err error) {
	real, err := t.Resolve(GrubPCDir, true)
	if err == nil && t.Get(path.Join(real, "moddep.lst")) != nil {
		dir = filepath.Join(work, "i386-pc")
		if err := os.Mkdir(dir, 0o755); err != nil {
			return "", "", err
		}
		for _, name := range t.Children(real) {
			e, err := treeFile(t, path.Join(real, name))
			if err != nil {
				continue // a subdirectory or a dangling link: not a module
			}
			if err := copyTreeFile(t, e, filepath.Join(dir, name)); err != nil {
				return "", "", fmt.Errorf("boot.bios: %w", err)
			}
		}
		return dir, "the tree", nil
	}
	if _, err := os.Stat(filepath.Join(GrubPCDir, "moddep.lst")); err != nil {
		return "", "", fmt.Errorf("boot.bios: BIOS boot needs GRUB's i386-pc modules (Debian's grub-pc-bin) at %s in the tree or on the host: %w", GrubPCDir, err)
	}
	return GrubPCDir, "the host", nil
}

func copyTreeFile(t *rootfs.Sealed, e *rootfs.Entry, dst string) error {
	in, err := t.Open(e.Path)
	if err != nil {
		return err
	}
	defer in.Close()
	return rootfs.CopyToNewFile(dst, 0o644, in)
}

// place patches both images for where core.img lies, as grub-bios-setup
// does for a core.img embedded in a BIOS boot partition: boot.img gets
// core.img's first sector and reads the boot drive from the BIOS, its drive
// check is made nops (a hard disk); core.img's first block list entry
// names the rest of it, in one run of sectors.
func (b *biosBoot) place() error {
	p := b.part.gpt
	if int64(len(b.core)) > p.Size {
		return fmt.Errorf("%s.size: %s is too small for GRUB's core.img (%s)", b.part.field, human(p.Size), human(int64(len(b.core))))
	}
	b.mbr, b.coreImg = patchGrubDisk(b.bootImg, b.core, p.Start)
	return nil
}

// patchGrubDisk patches boot.img (its first 440 bytes, the MBR's boot
// code) and core.img for core.img lying at byte start of the disk.
func patchGrubDisk(bootImg, core []byte, start int64) (mbr, coreImg []byte) {
	first := uint64(start / disk.SectorSize)
	mbr = bytes.Clone(bootImg[:mbrBootCode])
	binary.LittleEndian.PutUint64(mbr[bootKernelSector:], first)
	mbr[bootDrive] = 0xff
	mbr[bootDriveCheck], mbr[bootDriveCheck+1] = 0x90, 0x90
	coreImg = bytes.Clone(core)
	binary.LittleEndian.PutUint64(coreImg[blocklistStart:], first+1)
	binary.LittleEndian.PutUint16(coreImg[blocklistStart+8:], uint16(len(core)/disk.SectorSize-1))
	return mbr, coreImg
}

// write puts the boot code into the protective MBR (its partition table and
// signature stay) and core.img at the start of the BIOS boot partition.
func (b *biosBoot) write(w io.WriterAt) error {
	if _, err := w.WriteAt(b.mbr, 0); err != nil {
		return fmt.Errorf("boot.bios: MBR boot code: %w", err)
	}
	if _, err := w.WriteAt(b.coreImg, b.part.gpt.Start); err != nil {
		return fmt.Errorf("%s (%s): core.img: %w", b.part.field, b.part.spec.Name, err)
	}
	return nil
}

// kernelOptions is the kernel command line a raw disk's loaders give: the
// root by its partition UUID, read-only, then the recipe's words, last so
// they win where the kernel takes the last of several (rw, root=).
func kernelOptions(rootPartUUID, cmdline string) string {
	options := "root=PARTUUID=" + rootPartUUID + " ro"
	if c := strings.TrimSpace(cmdline); c != "" {
		options += " " + c
	}
	return options
}

// BIOSBoot reports whether the raw disk in r boots by legacy BIOS as this
// package lays it out: boot code in the protective MBR that loads a
// core.img from a BIOS boot partition. nil means it does.
func BIOSBoot(r io.ReaderAt, size int64) error {
	_, parts, err := disk.ReadGPT(r, size)
	if err != nil {
		return err
	}
	mbr := make([]byte, disk.SectorSize)
	if _, err := r.ReadAt(mbr, 0); err != nil {
		return err
	}
	if bytes.Count(mbr[:mbrBootCode], []byte{0}) == mbrBootCode {
		return errors.New("the protective MBR has no boot code")
	}
	first := int64(binary.LittleEndian.Uint64(mbr[bootKernelSector:])) * disk.SectorSize
	for _, p := range parts {
		if p.Type == disk.TypeBIOSBoot && p.Start == first {
			core := make([]byte, disk.SectorSize)
			if _, err := r.ReadAt(core, first); err != nil {
				return err
			}
			if binary.LittleEndian.Uint16(core[blocklistSegment:]) != coreLoadSegment ||
				int64(binary.LittleEndian.Uint64(core[blocklistStart:]))*disk.SectorSize != first+disk.SectorSize {
				return fmt.Errorf("partition %q holds no core.img that loads itself", p.Name)
			}
			return nil
		}
	}
	return errors.New("the MBR's boot code loads from no BIOS boot partition")
}

// rawBootsBIOS is BIOSBoot of the raw disk file at p.
func rawBootsBIOS(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	return BIOSBoot(f, fi.Size())
}

// biosFacts says how a disk boots by BIOS, for inspect; nothing when it
// does not.
func biosFacts(r io.ReaderAt, size int64) []Fact {
	if BIOSBoot(r, size) != nil {
		return nil
	}
	b := make([]byte, disk.SectorSize)
	if _, err := r.ReadAt(b, 0); err != nil {
		return nil
	}
	first := binary.LittleEndian.Uint64(b[bootKernelSector:])
	if _, err := r.ReadAt(b, int64(first)*disk.SectorSize); err != nil {
		return nil
	}
	n := 1 + int(binary.LittleEndian.Uint16(b[blocklistStart+8:]))
	return []Fact{{"bios.loader", fmt.Sprintf("GRUB i386-pc: boot.img in the MBR, core.img of %d sectors at sector %d", n, first)}}
}
