package formats

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/stamp-dev/stamp/disk"
	"github.com/stamp-dev/stamp/disk/fat"
	"github.com/stamp-dev/stamp/disk/iso9660"
	"github.com/stamp-dev/stamp/rootfs"
)

// isoImageReader reads an iso output: the tree is the root image inside
// the EFI system image El Torito names; the loaders, kernel and initramfs
// are the image's own.
type isoImageReader struct{}

func (isoImageReader) Format() string { return "iso" }

// isoMagicAt is where the first volume descriptor's "CD001" lies.
const isoMagicAt = 16*iso9660.SectorSize + 1

func (isoImageReader) Match(h *Head) bool {
	return !h.IsDir && len(h.Raw) >= isoMagicAt+5 && string(h.Raw[isoMagicAt:isoMagicAt+5]) == "CD001"
}

func (isoImageReader) Read(ctx context.Context, h *Head) (*Image, error) {
	f, err := os.Open(h.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	v, err := iso9660.Open(f, h.Size)
	if err != nil {
		return nil, err
	}
	facts := []Fact{{"iso.volume", v.ID}, {"iso.size", fmt.Sprint(v.Size)}}
	var esp *iso9660.FileInfo
	for _, b := range v.Boot {
		name := "(no file)"
		for i := range v.Files {
			if v.Files[i].Offset == b.Offset {
				name = v.Files[i].Name
				if b.Platform == iso9660.EFI && esp == nil {
					esp = &v.Files[i]
				}
			}
		}
		facts = append(facts, Fact{"iso.boot." + b.Platform.String(), fmt.Sprintf("%s, %d sectors loaded, bootable %t, emulation %d", name, b.Sectors, b.Bootable, b.Media)})
	}
	if esp == nil {
		return nil, errors.New("iso: no El Torito EFI entry names a file of the root directory")
	}
	ffs, err := fat.Open(io.NewSectionReader(f, esp.Offset, esp.Size), esp.Size)
	if err != nil {
		return nil, fmt.Errorf("iso: %s: %w", esp.Name, err)
	}
	rf, err := ffs.Open(strings.TrimPrefix(isoRoot, "/"))
	if err != nil {
		return nil, fmt.Errorf("iso: %s: %w", esp.Name, err)
	}
	defer rf.Close()
	st, err := rf.Stat()
	if err != nil {
		return nil, err
	}
	off, size, err := newcSingle(rf.(io.ReaderAt), st.Size(), strings.TrimPrefix(LiveRootInInitrd, "/"))
	if err != nil {
		return nil, fmt.Errorf("iso: %s:%s: %w", esp.Name, isoRoot, err)
	}
	im, err := readErofsImage(ctx, io.NewSectionReader(rf.(io.ReaderAt), off, size), size)
	if err != nil {
		return nil, fmt.Errorf("iso: the root image: %w", err)
	}
	im.Path, im.Format, im.Size, im.Regions = h.Path, "iso", h.Size, nil
	g := ffs.Geometry()
	volID := fmt.Sprintf("%04X-%04X", ffs.VolumeID>>16, ffs.VolumeID&0xffff)
	espFS := Filesystem{Type: "vfat", Label: ffs.Label, UUID: volID, Size: esp.Size,
		Facts: []Fact{{"type", fmt.Sprint(g.Type)}, {"clusters", fmt.Sprint(g.Clusters)}, {"iso.file", esp.Name}}}
	entries, err := readFAT(ctx, ffs)
	if err != nil {
		return nil, fmt.Errorf("iso: %s: %w", esp.Name, err)
	}
	for _, e := range entries {
		if e.Path == "/" {
			continue
		}
		espFS.Files++
		im.Extra = append(im.Extra, &rootfs.Entry{Path: "esp:" + e.Path, Inode: e.Inode, Origin: e.Origin})
	}
	// The GPT of a hybrid image: the same EFI image as an ESP, and GRUB's
	// core.img in a BIOS boot partition.
	if guid, parts, err := disk.ReadGPT(f, h.Size); err == nil {
		facts = append(facts, Fact{"gpt.disk-guid", guid})
		for i, p := range parts {
			fsys := ""
			if p.Type == disk.TypeESP {
				fsys = "vfat"
				espFS.Partition = i + 1
			}
			im.Partitions = append(im.Partitions, Partition{Index: i + 1, Name: p.Name, Type: p.Type,
				GUID: strings.ToLower(disk.FormatUUID(p.GUID)), Start: p.Start, Size: p.Size, Filesystem: fsys})
			if p.Type == disk.TypeESP && (p.Start != esp.Offset || p.Size != esp.Size) {
				return nil, fmt.Errorf("iso: the GPT's ESP (%d bytes at %d) is not El Torito's EFI image (%d at %d)", p.Size, p.Start, esp.Size, esp.Offset)
			}
		}
		facts = append(facts, biosFacts(f, h.Size)...)
	}
	im.Filesystems = append([]Filesystem{espFS}, im.Filesystems...)
	im.Facts = append(facts, im.Facts...)
	return im, nil
}

// newcSingle finds the one file named name of a newc archive of size bytes
// in r, as newcWrap writes it, and returns where its data lies.
func newcSingle(r io.ReaderAt, size int64, name string) (off, n int64, err error) {
	h := make([]byte, 110+len(name)+1)
	if _, err := r.ReadAt(h, 0); err != nil {
		return 0, 0, fmt.Errorf("newc header: %w", err)
	}
	field := func(i int) int64 {
		v, err2 := strconv.ParseUint(string(h[6+8*i:14+8*i]), 16, 32)
		if err2 != nil && err == nil {
			err = fmt.Errorf("newc header: field %d is not hexadecimal", i)
		}
		return int64(v)
	}
	mode, fsize, namesize := field(1), field(6), field(11)
	switch {
	case err != nil:
		return 0, 0, err
	case string(h[:6]) != "070701":
		return 0, 0, errors.New("not a newc archive")
	case namesize != int64(len(name))+1 || string(h[110:110+len(name)]) != name || h[110+len(name)] != 0:
		return 0, 0, fmt.Errorf("the archive's first file is not %s", name)
	case mode&0o170000 != 0o100000:
		return 0, 0, fmt.Errorf("%s is not a regular file", name)
	}
	off = (110 + namesize + 3) &^ 3
	if off+fsize > size {
		return 0, 0, fmt.Errorf("%s: %d bytes at %d in an archive of %d", name, fsize, off, size)
	}
	return off, fsize, nil
}
