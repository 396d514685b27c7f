package formats

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/stamp-dev/stamp/disk"
	"github.com/stamp-dev/stamp/disk/fat"
	"github.com/stamp-dev/stamp/disk/iso9660"
	"github.com/stamp-dev/stamp/rootfs/compress"
	"github.com/stamp-dev/stamp/rootfs/hashio"
)

// ISOSpec is an iso output's options.
type ISOSpec struct {
	// Compression is the initramfs's when the output makes its own live
	// system (no from); "" is zstd.
	Compression compress.Algorithm
	// Cmdline is the kernel command line both loaders pass; "" is
	// PXEDefaultCmdline (the arm64 one for arm64).
	Cmdline string
	// BIOS adds legacy BIOS boot (GRUB for i386-pc) beside UEFI's.
	BIOS bool
}

// The files of an iso output's ISO 9660 root directory, and what its EFI
// system image holds beyond systemd-boot's own files.
const (
	ISOEFIImage  = "EFIBOOT.IMG" // the ESP: El Torito's EFI image and the GPT's ESP
	ISOBIOSImage = "BIOS.IMG"    // GRUB for El Torito (i386-pc-eltorito)
	ISOCoreImage = "CORE.IMG"    // GRUB's core.img for a disk (the GPT's BIOS boot partition)
	isoRoot      = "/root.img"   // the root image, in an archive of LiveRootInInitrd
	isoEntry     = "/loader/entries/live.conf"
	isoFATLabel  = "STAMPLIVE"
)

// isoFormat is "format: iso": the live system on a hybrid ISO 9660 image,
// to boot with no network from a CD (or a virtual one: a BMC's virtual
// media, Metal3's live-iso) or from a disk or USB stick it is copied to.
//
// Everything that boots is on one FAT image, the EFI system image: the
// tree's systemd-boot as the removable-media loader, the live bundle's
// kernel and initramfs, and the root image wrapped in a newc archive of
// LiveRootInInitrd, which the loader hands to the kernel as a second
// initramfs, where the live init finds it as it finds what iPXE appends.
// El Torito's EFI entry names that image for a CD; a GPT in the ISO's
// system area names the same bytes as an ESP for a disk. With BIOS, GRUB
// boots the same kernel, initramfs and root image: from a CD through El
// Torito (cdboot.img finding the EFI image in the ISO 9660 directory and
// reading it as a loop device), from a disk through the MBR's boot code and
// a core.img in a BIOS boot partition, as a raw disk boots by BIOS.
type isoFormat struct{}

func (isoFormat) Write(ctx context.Context, src *Source, spec *Spec, dir, base string) (*Result, error) {
	so, err := optionsOf[ISOSpec](spec)
	if err != nil {
		return nil, err
	}
	name := base + ".iso"
	adds, err := writeISO(ctx, src, spec, so, filepath.Join(dir, name))
	if err != nil {
		os.Remove(filepath.Join(dir, name))
		return nil, fmt.Errorf("iso: %w", err)
	}
	return &Result{Files: []string{name}, Adds: adds}, nil
}

func writeISO(ctx context.Context, src *Source, spec *Spec, so *ISOSpec, out string) ([]string, error) {
	arch, ok := efiArch[src.Arch]
	if !ok {
		return nil, fmt.Errorf("UEFI boot on architecture %q is not supported (amd64 or arm64)", src.Arch)
	}
	if so.BIOS && src.Arch != "amd64" {
		return nil, fmt.Errorf("boot.bios: legacy BIOS boot is for amd64, not %s", src.Arch)
	}
	sdboot := "/usr/lib/systemd/boot/efi/" + arch.systemdBoot
	loader, err := treeFile(src.Tree, sdboot)
	if err != nil {
		return nil, fmt.Errorf("an iso boots by systemd-boot, which needs %s in the tree (Debian's systemd-boot-efi package): %w", sdboot, err)
	}
	cmdline, err := bundleCmdline(so.Cmdline, src.Arch)
	if err != nil {
		return nil, err
	}

	// The live system: the live output's bundle, or one made here.
	bundle := src.From
	if bundle == "" {
		tmp, err := os.MkdirTemp(src.WorkDir, "iso-live-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		if _, err := writeLive(ctx, src, spec, &LiveSpec{Compression: so.Compression, Cmdline: cmdline}, tmp); err != nil {
			return nil, err
		}
		bundle = tmp
	}
	files, err := isoESPFiles(src, treeFATFile("/EFI/BOOT/"+arch.bootFile, src.Tree, loader), bundle, cmdline)
	if err != nil {
		return nil, err
	}
	var fatFiles []fat.File
	for _, f := range files {
		fatFiles = append(fatFiles, f.File)
	}
	espSize, err := fat.MinSize(fatFiles, isoFATLabel)
	if err != nil {
		return nil, fmt.Errorf("EFI system image: %w", err)
	}
	espSize = disk.AlignUp(espSize)

	seed := "iso/" + spec.Name
	isoFiles := []iso9660.File{}
	boot := []iso9660.BootEntry{{Platform: iso9660.EFI, File: ISOEFIImage}}
	var bootImg, core []byte
	if so.BIOS {
		var eltorito []byte
		if eltorito, bootImg, core, err = isoGRUB(ctx, src, cmdline); err != nil {
			return nil, err
		}
		isoFiles = append(isoFiles, iso9660.File{Name: ISOBIOSImage, Size: int64(len(eltorito)), Data: eltorito})
		boot = append([]iso9660.BootEntry{{Platform: iso9660.BIOS, File: ISOBIOSImage, LoadSectors: 4, InfoTable: true}}, boot...)
	}
	var espAt int64
	isoFiles = append(isoFiles, iso9660.File{Name: ISOEFIImage, Size: espSize, Align: disk.Alignment,
		Fill: func(ctx context.Context, w io.WriterAt) error {
			_, err := fat.Write(ctx, fatFiles, w, fat.Options{Size: espSize, VolumeID: disk.VolumeID(src.Seed, seed), Label: isoFATLabel,
				Epoch: src.Epoch, HiddenSectors: uint32(espAt / disk.SectorSize)})
			return err
		}})
	if so.BIOS {
		isoFiles = append(isoFiles, iso9660.File{Name: ISOCoreImage, Size: int64(len(core)), Align: disk.Alignment, Data: core})
	}
	opts := iso9660.Options{VolumeID: iso9660.VolumeID(src.Name + "_LIVE"), Epoch: src.Epoch, Boot: boot,
		Reserve: -disk.LastUsable(0), SizeAlign: disk.Alignment} // Reserve: the backup GPT
	l, err := iso9660.Plan(isoFiles, opts)
	if err != nil {
		return nil, err
	}
	espAt = l.Extents[ISOEFIImage].Offset
	parts := []disk.Partition{{Name: "esp", Type: disk.TypeESP, GUID: disk.PartitionGUID(src.Seed, seed+"/esp"), Start: espAt, Size: espSize}}
	var mbr []byte
	if so.BIOS {
		at := l.Extents[ISOCoreImage].Offset
		mbr, core = patchGrubDisk(bootImg, core, at)
		isoFiles[len(isoFiles)-1].Data = core
		parts = append(parts, disk.Partition{Name: "bios", Type: disk.TypeBIOSBoot, GUID: disk.PartitionGUID(src.Seed, seed+"/bios"),
			Start: at, Size: int64(len(core))})
	}
	err = writeFile(out, func(f *os.File) error {
		return writeHybrid(ctx, f, l.Size, isoFiles, opts, disk.DiskGUID(src.Seed+"/"+seed), parts, mbr)
	})
	if err != nil {
		return nil, err
	}
	return isoAdds(files), nil
}

// isoESPFiles are the files of an iso's EFI system image: the loader, its
// configuration, and the live bundle's kernel, initramfs and root image.
func isoESPFiles(src *Source, loader espFile, bundle, cmdline string) ([]espFile, error) {
	kernel, err := hostFATFile("/vmlinuz", filepath.Join(bundle, LiveKernel), 1)
	if err != nil {
		return nil, err
	}
	// systemd-boot hands the kernel its initrds back to back, where the
	// kernel's unpacker looks for an uncompressed archive only at a
	// multiple of 4 bytes (it skips zeros to get there): the initramfs is
	// padded to one, so the root archive after it starts on one.
	initrd, err := hostFATFile("/initrd.img", filepath.Join(bundle, LiveInitrd), 4)
	if err != nil {
		return nil, err
	}
	root, err := rootArchiveFile(filepath.Join(bundle, LiveRoot), src)
	if err != nil {
		return nil, err
	}
	entry := fmt.Sprintf("title %s (live)\nlinux /vmlinuz\ninitrd /initrd.img\ninitrd %s\noptions %s\n", src.Name, isoRoot, cmdline)
	return []espFile{
		loader,
		bytesFATFile(loaderConf, []byte("default live.conf\ntimeout 0\nconsole-mode keep\n")),
		bytesFATFile(isoEntry, []byte(entry)),
		kernel, initrd, root,
	}, nil
}

// isoGRUB makes GRUB's images for booting the iso by BIOS: the El Torito
// image a CD boots, and the boot sector and core image a disk boots.
func isoGRUB(ctx context.Context, src *Source, cmdline string) (eltorito, bootImg, core []byte, err error) {
	words, err := grubWords(cmdline)
	if err != nil {
		return nil, nil, nil, err
	}
	// On a CD GRUB's root is the CD: the EFI image is a file of its
	// ISO 9660 directory, read as a loop device. On a disk its root is
	// the ESP, which the GPT names.
	cd := fmt.Sprintf("loopback esp /%s\nlinux (esp)/vmlinuz %s\ninitrd (esp)/initrd.img (esp)%s\nboot\n", ISOEFIImage, words, isoRoot)
	eltorito, _, _, err = grubImage(ctx, src, "i386-pc-eltorito", "/", cd, []string{"biosdisk", "iso9660", "loopback", "fat", "linux"})
	if err != nil {
		return nil, nil, nil, err
	}
	hd := fmt.Sprintf("linux /vmlinuz %s\ninitrd /initrd.img %s\nboot\n", words, isoRoot)
	c, b, from, err := grubImage(ctx, src, "i386-pc", "(,gpt1)/", hd, grubBIOSModules)
	if err != nil {
		return nil, nil, nil, err
	}
	if core, err = diskCore(c, from); err != nil {
		return nil, nil, nil, err
	}
	return eltorito, b, core, nil
}

// writeHybrid writes into f an ISO 9660 image of size bytes that is a
// GPT disk as well, with mbr (if any) as its first sector.
func writeHybrid(ctx context.Context, f *os.File, size int64, files []iso9660.File, opts iso9660.Options, diskGUID [16]byte, parts []disk.Partition, mbr []byte) error {
	if err := f.Truncate(size); err != nil {
		return err
	}
	if _, err := iso9660.Write(ctx, f, files, opts); err != nil {
		return err
	}
	if err := disk.WriteGPT(f, size, diskGUID, parts); err != nil {
		return err
	}
	if mbr != nil {
		if _, err := f.WriteAt(mbr, 0); err != nil {
			return err
		}
	}
	return nil
}

// isoAdds is what the image holds beside the tree (in its root image): its
// structure, as comments, as a live bundle's files are.
func isoAdds(files []espFile) []string {
	var adds []string
	for _, f := range files {
		what := fmt.Sprintf("sha256:%s %d bytes", f.digest, f.Size)
		if f.Path == isoRoot {
			what = "the root image, sha256:" + f.digest + ", in a newc archive of " + LiveRootInInitrd
		}
		adds = append(adds, fmt.Sprintf("# iso file %s:%s %s", ISOEFIImage, f.Path, what))
	}
	return adds
}

// hostFATFile is a host file for the EFI system image, padded with zeros
// to a multiple of align bytes.
func hostFATFile(p, host string, align int64) (espFile, error) {
	f, err := os.Open(host)
	if err != nil {
		return espFile{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return espFile{}, err
	}
	pad := make([]byte, (align-fi.Size()%align)%align)
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return espFile{}, err
	}
	h.Write(pad)
	size := fi.Size()
	open := func() (io.ReadCloser, error) {
		f, err := os.Open(host)
		if err != nil {
			return nil, err
		}
		return readCloser{io.MultiReader(io.LimitReader(f, size), bytes.NewReader(pad)), f.Close}, nil
	}
	return espFile{fat.File{Path: p, Size: size + int64(len(pad)), Open: open}, hex.EncodeToString(h.Sum(nil))}, nil
}

// rootArchiveFile is the root image at host wrapped in a newc archive of
// one file, LiveRootInInitrd, as iPXE wraps it: the loader concatenates it
// to the initramfs and the kernel unpacks it there. Its digest is the root
// image's own.
func rootArchiveFile(host string, src *Source) (espFile, error) {
	sum, size, err := hashio.File(host, false)
	if err != nil {
		return espFile{}, err
	}
	head, tail := newcWrap(strings.TrimPrefix(LiveRootInInitrd, "/"), size, src.Epoch.Unix())
	open := func() (io.ReadCloser, error) {
		f, err := os.Open(host)
		if err != nil {
			return nil, err
		}
		return readCloser{io.MultiReader(bytes.NewReader(head), io.LimitReader(f, size), bytes.NewReader(tail)), f.Close}, nil
	}
	return espFile{fat.File{Path: isoRoot, Size: int64(len(head)) + size + int64(len(tail)), Open: open}, sum}, nil
}

// newcWrap is the header of a newc archive holding one regular file of
// size bytes named name (mode 0400, owned by root), and what follows the
// file's data: its padding and the trailer.
func newcWrap(name string, size, mtime int64) (head, tail []byte) {
	rec := func(name string, mode, nlink, size int64) []byte {
		h := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x", 1, mode, 0, 0, nlink, mtime, size, 0, 0, 0, 0, len(name)+1, 0)
		b := append([]byte(h), name...)
		b = append(b, 0)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
		return b
	}
	if size < 0 || size > 0xffffffff {
		size = 0xffffffff
	}
	head = rec(name, 0o100400, 1, size)
	tail = make([]byte, (4-size%4)%4)
	trailer := rec("TRAILER!!!", 0, 1, 0)
	copy(trailer[6:14], "00000000") // the trailer is inode 0
	return head, append(tail, trailer...)
}
