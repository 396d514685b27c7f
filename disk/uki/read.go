package uki

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"fmt"
	"io"

	"github.com/stamp-dev/stamp/disk/authenticode"
	"github.com/stamp-dev/stamp/disk/pe"
)

// Info is a UKI read back: its stub, its sections, the PCR 11 its stub
// will measure, and its signature.
type Info struct {
	StubVersion string
	Sections    []SectionInfo
	// Cmdline is the .cmdline section's text.
	Cmdline string
	// PCR11 is the SHA-256 bank of PCR 11 after the stub's measurements.
	PCR11 []byte
	// Signer is the certificate of the Authenticode signature, nil when
	// the image is unsigned; SignatureErr says why a signature does not
	// hold (it does not verify, or it covers another digest).
	Signer       *x509.Certificate
	SignatureErr error
}

// SectionInfo is one section: its name, size (VirtualSize) and SHA-256.
type SectionInfo struct {
	Name   string
	Size   uint32
	SHA256 []byte
}

// Read reads the UKI in r (size bytes). The stub's version must be one
// stamp knows, since the PCR 11 it measures depends on it.
func Read(r io.ReaderAt, size int64) (*Info, error) {
	f, err := pe.Parse(r, size)
	if err != nil {
		return nil, err
	}
	sd := f.Section(".sdmagic")
	if sd == nil {
		return nil, fmt.Errorf("no .sdmagic section: not a systemd-stub UKI")
	}
	magic, err := pe.SectionData(r, sd)
	if err != nil {
		return nil, err
	}
	m := sdmagicRE.FindSubmatch(magic)
	if m == nil {
		return nil, fmt.Errorf("its .sdmagic section does not name a systemd-stub version")
	}
	info := &Info{StubVersion: string(m[1])}
	var major int
	fmt.Sscanf(string(m[2]), "%d", &major)
	v, ok := stubVersions[major]
	if !ok {
		return nil, fmt.Errorf("systemd-stub %s is a version stamp does not know (it knows %s)", info.StubVersion, KnownVersions())
	}
	stub := &Stub{Version: info.StubVersion, Major: major, v: v}
	var secs []Section
	for i := range f.Sections {
		s := &f.Sections[i]
		data, err := pe.SectionData(r, s)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(data)
		info.Sections = append(info.Sections, SectionInfo{Name: s.Name, Size: s.VirtualSize, SHA256: sum[:]})
		if stub.Knows(s.Name) {
			// The stub takes the last section of a name.
			for j := range secs {
				if secs[j].Name == s.Name {
					secs = append(secs[:j], secs[j+1:]...)
					break
				}
			}
			secs = append(secs, Section{Name: s.Name, Content: pe.Bytes(data)})
		}
		if s.Name == ".cmdline" {
			info.Cmdline = string(bytes.TrimRight(data, "\x00"))
		}
	}
	if info.PCR11, _, err = stub.PCR11(secs); err != nil {
		return nil, err
	}
	digest, table, err := pe.Digest(r, size)
	if err != nil {
		return nil, err
	}
	if table != nil {
		sig, err := authenticode.ParsePE(table)
		if err != nil {
			info.SignatureErr = err
			return info, nil
		}
		info.Signer = sig.Signer
		switch {
		case !bytes.Equal(sig.Digest, digest):
			info.SignatureErr = fmt.Errorf("the signature covers digest %x, the image's is %x", sig.Digest, digest)
		default:
			info.SignatureErr = sig.Verify()
		}
	}
	return info, nil
}
