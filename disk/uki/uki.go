// Package uki assembles unified kernel images (the UAPI Group's "Unified
// Kernel Image" specification) on the systemd-stub of the image being
// built, and predicts what that stub measures into TPM PCR 11.
//
// What a stub reads and measures depends on its version, so the package
// knows stubs by version (stubVersions) and refuses one it does not know
// rather than guess. For each it knows the sections the stub reads, the
// order ukify lays them out in for that stub, and the order the stub
// measures them in. The sections are added after the stub's own with
// disk/pe, as ukify adds them.
package uki

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/stamp-dev/stamp/disk/pe"
)

// StubPaths are where Debian's systemd-boot-efi installs the stub, by
// architecture.
var StubPaths = map[string]string{
	"amd64": "/usr/lib/systemd/boot/efi/linuxx64.efi.stub",
	"arm64": "/usr/lib/systemd/boot/efi/linuxaa64.efi.stub",
}

var machines = map[uint16]string{pe.MachineAMD64: "amd64", pe.MachineARM64: "arm64"}

// stubVersion is what one major version of systemd-stub does with a UKI,
// read from its source (src/boot/efi/stub.c and src/fundamental/tpm-pcr.c
// of that release).
type stubVersion struct {
	// measured are the sections the stub reads, in the order it measures
	// them into PCR 11: for each present with a non-zero size, its name
	// with the terminating NUL, then its contents (VirtualSize bytes).
	measured []string
	// layout is the order the sections stamp can fill are added in, as
	// ukify for that stub adds them; a section the stub does not read is
	// left out.
	layout []string
}

// stubVersions are the stubs stamp knows, by systemd's major version.
var stubVersions = map[int]stubVersion{
	// systemd 252 (Debian bookworm): .pcrsig is read but not measured;
	// .uname and .sbat are not known to it (its own .sbat section stays).
	252: {
		measured: []string{".linux", ".osrel", ".cmdline", ".initrd", ".splash", ".dtb", ".pcrpkey"},
		layout:   []string{".osrel", ".cmdline", ".initrd", ".linux"},
	},
}

// KnownVersions lists the stub versions stamp knows, for errors.
func KnownVersions() string {
	var vs []string
	for v := range stubVersions {
		vs = append(vs, strconv.Itoa(v))
	}
	sort.Strings(vs)
	return strings.Join(vs, ", ")
}

// Stub is a systemd-stub read from the tree.
type Stub struct {
	// Version is the stub's own, as in its .sdmagic section
	// ("252.39-1~deb12u2"), and Major its systemd release.
	Version string
	Major   int
	// Arch is the Debian architecture of its machine type.
	Arch string
	b    []byte
	v    stubVersion
}

var sdmagicRE = regexp.MustCompile(`^#### LoaderInfo: systemd-stub (([0-9]+)[^ ]*) ####`)

// ParseStub reads a stub: its machine type, and its version from its
// .sdmagic section. A version stamp does not know is an error naming it.
func ParseStub(b []byte) (*Stub, error) {
	f, err := pe.Parse(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return nil, err
	}
	s := &Stub{b: b, Arch: machines[f.Machine]}
	if s.Arch == "" {
		return nil, fmt.Errorf("machine type %#x is no architecture stamp builds for", f.Machine)
	}
	sec := f.Section(".sdmagic")
	if sec == nil {
		return nil, errors.New("no .sdmagic section: not a systemd-stub")
	}
	magic, err := pe.SectionData(bytes.NewReader(b), sec)
	if err != nil {
		return nil, err
	}
	m := sdmagicRE.FindSubmatch(magic)
	if m == nil {
		return nil, fmt.Errorf("its .sdmagic section %q does not name a systemd-stub version", bytes.TrimRight(magic, "\x00"))
	}
	s.Version = string(m[1])
	s.Major, _ = strconv.Atoi(string(m[2]))
	v, ok := stubVersions[s.Major]
	if !ok {
		return nil, fmt.Errorf("systemd-stub %s is a version stamp does not know (it knows %s): what a stub reads and measures changes between versions", s.Version, KnownVersions())
	}
	s.v = v
	return s, nil
}

// Knows says whether the stub reads the section name.
func (s *Stub) Knows(name string) bool {
	for _, n := range s.v.measured {
		if n == name {
			return true
		}
	}
	return false
}

// Section is one section of a UKI: its name and contents.
type Section struct {
	Name    string
	Content pe.Content
}

// Parts are what stamp puts into a UKI. OSRelease and Cmdline are small
// and held in memory; the kernel and initrd are streamed.
type Parts struct {
	OSRelease []byte
	Cmdline   []byte
	Linux     pe.Content
	Initrd    pe.Content
}

// Build lays out the UKI of parts on the stub: the sections the stub's
// version reads, in the order ukify adds them for it. The image is not
// sealed: the caller signs it or not.
func Build(s *Stub, p Parts) (*pe.Image, []Section, error) {
	if p.Linux.Size == 0 {
		return nil, nil, errors.New("a UKI needs a kernel")
	}
	im, err := pe.Open(s.b)
	if err != nil {
		return nil, nil, fmt.Errorf("systemd-stub: %w", err)
	}
	content := map[string]pe.Content{
		".osrel":   pe.Bytes(p.OSRelease),
		".cmdline": pe.Bytes(p.Cmdline),
		".initrd":  p.Initrd,
		".linux":   p.Linux,
	}
	var secs []Section
	for _, name := range s.v.layout {
		c := content[name]
		if c.Size == 0 {
			continue
		}
		if err := im.AddSection(name, c, name == ".linux"); err != nil {
			return nil, nil, fmt.Errorf("systemd-stub %s: %w", s.Version, err)
		}
		secs = append(secs, Section{Name: name, Content: c})
	}
	return im, secs, nil
}

// Measurement is one extension of a PCR: what it measures and the digest
// extended.
type Measurement struct {
	What   string // ".linux (name)", ".linux", ...
	Digest []byte
}

// PCR11 predicts the SHA-256 bank of PCR 11 after the stub has measured
// secs (the sections of a UKI, as Build returns them): PCR 11 starts at
// zero, and each measurement extends it with SHA-256(PCR || digest). It
// returns the value and the measurements in order.
func (s *Stub) PCR11(secs []Section) ([]byte, []Measurement, error) {
	byName := map[string]pe.Content{}
	for _, sec := range secs {
		byName[sec.Name] = sec.Content
	}
	var ms []Measurement
	for _, name := range s.v.measured {
		c, ok := byName[name]
		if !ok || c.Size == 0 {
			continue
		}
		n := sha256.Sum256(append([]byte(name), 0))
		ms = append(ms, Measurement{What: name + " (name)", Digest: n[:]})
		d, err := digestOf(c)
		if err != nil {
			return nil, nil, fmt.Errorf("section %s: %w", name, err)
		}
		ms = append(ms, Measurement{What: name, Digest: d})
	}
	return Extend(make([]byte, sha256.Size), ms), ms, nil
}

// Phases are the measurements systemd-pcrphase makes of boot phases into
// PCR 11 (enter-initrd, leave-initrd, sysinit, ready, ...): the SHA-256 of
// each word, without a terminator.
func Phases(words ...string) []Measurement {
	var ms []Measurement
	for _, w := range words {
		d := sha256.Sum256([]byte(w))
		ms = append(ms, Measurement{What: "phase " + w, Digest: d[:]})
	}
	return ms
}

// Extend is pcr after each of ms in turn.
func Extend(pcr []byte, ms []Measurement) []byte {
	v := append([]byte(nil), pcr...)
	for _, m := range ms {
		h := sha256.New()
		h.Write(v)
		h.Write(m.Digest)
		v = h.Sum(nil)
	}
	return v
}

func digestOf(c pe.Content) ([]byte, error) {
	r, err := c.Open()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(r, c.Size))
	if err != nil {
		return nil, err
	}
	if n != c.Size {
		return nil, fmt.Errorf("%d bytes, not %d", n, c.Size)
	}
	return h.Sum(nil), nil
}
