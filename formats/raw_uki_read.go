package formats

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"sort"
	"strings"

	"github.com/stamp-dev/stamp/disk/authenticode"
	"github.com/stamp-dev/stamp/disk/efivar"
	"github.com/stamp-dev/stamp/disk/pe"
	"github.com/stamp-dev/stamp/disk/uki"
	"github.com/stamp-dev/stamp/disk/verity"
)

// ukiFacts says, for inspect, what an ESP's unified kernel images are: the
// stub they are built on, their sections, their command line, the PCR 11
// their stub will measure, and who signed them; whether systemd-boot is
// signed; and which keys the ESP offers for enrolment.
func ukiFacts(esp fs.FS) []Fact {
	var candidates []string
	if names, err := fs.Glob(esp, "EFI/Linux/*.efi"); err == nil {
		candidates = append(candidates, names...)
	}
	if names, err := fs.Glob(esp, "EFI/BOOT/BOOT*.EFI"); err == nil {
		candidates = append(candidates, names...)
	}
	sort.Strings(candidates)
	var facts []Fact
	for _, p := range candidates {
		b, err := fs.ReadFile(esp, p)
		if err != nil {
			continue
		}
		f, err := pe.Parse(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			continue
		}
		if f.Section(".linux") == nil || f.Section(".sdmagic") == nil {
			// Not a UKI: a boot loader, whose signature is told.
			if off, _ := f.CertTable(); off != 0 && strings.HasPrefix(p, "EFI/BOOT/") {
				facts = append(facts, Fact{"secure-boot.boot-loader", "/" + p + " " + signerText(b)})
			}
			continue
		}
		info, err := uki.Read(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			facts = append(facts, Fact{"uki", fmt.Sprintf("/%s: %v", p, err)})
			continue
		}
		facts = append(facts, Fact{"uki", "/" + p}, Fact{"uki.stub", "systemd-stub " + info.StubVersion})
		for _, s := range info.Sections {
			if strings.HasPrefix(s.Name, ".") && isUKISection(s.Name) {
				facts = append(facts, Fact{"uki.section" + s.Name, fmt.Sprintf("%d bytes sha256:%x", s.Size, s.SHA256)})
			}
		}
		facts = append(facts, Fact{"uki.cmdline", info.Cmdline}, Fact{"uki.pcr11.sha256", hex.EncodeToString(info.PCR11)})
		facts = append(facts, Fact{"uki.signer", signerText(b)})
	}
	if auth, err := fs.ReadFile(esp, strings.TrimPrefix(espKeys, "/")+"/db.esl"); err == nil {
		facts = append(facts, Fact{"secure-boot.enroll", espKeys + ": " + eslText(auth)})
	}
	return facts
}

// isUKISection says whether a section is one stamp puts into a UKI (the
// stub's own are left out of the facts).
func isUKISection(name string) bool {
	switch name {
	case ".osrel", ".cmdline", ".initrd", ".linux", ".uname", ".splash", ".dtb", ".pcrpkey", ".pcrsig":
		return true
	}
	return false
}

// signerText names who signed the PE image b and whether the signature
// holds for its bytes.
func signerText(b []byte) string {
	digest, table, err := pe.Digest(bytes.NewReader(b), int64(len(b)))
	switch {
	case err != nil:
		return err.Error()
	case table == nil:
		return "unsigned"
	}
	sig, err := authenticode.ParsePE(table)
	if err != nil {
		return "signature unreadable: " + err.Error()
	}
	who := fmt.Sprintf("%s sha256:%s", sig.Signer.Subject, authenticode.Fingerprint(sig.Signer))
	if !bytes.Equal(sig.Digest, digest) {
		return who + ", NOT of these bytes (the image changed after signing)"
	}
	if err := sig.Verify(); err != nil {
		return who + ", does not verify: " + err.Error()
	}
	return who + ", verifies"
}

// eslText names the certificates of an EFI signature list.
func eslText(b []byte) string {
	certs, err := efivar.ParseSignatureList(b)
	if err != nil {
		return err.Error()
	}
	var names []string
	for _, c := range certs {
		names = append(names, fmt.Sprintf("%s sha256:%s", c.Subject, authenticode.Fingerprint(c)))
	}
	return strings.Join(names, "; ")
}

// verityFacts reads a dm-verity hash partition's superblock.
func verityFacts(r io.ReaderAt) []Fact {
	sb, err := verity.ReadSuperblock(r)
	if err != nil {
		return []Fact{{"superblock", err.Error()}}
	}
	return []Fact{{"algorithm", sb.Algorithm}, {"block-size", fmt.Sprint(sb.BlockSize)},
		{"data-blocks", fmt.Sprint(sb.DataBlocks)}, {"salt", hex.EncodeToString(sb.Salt)}}
}

// checkVerity recomputes /usr's hash tree from its partition and compares
// it, block by block, with the hash partition and its root hash with the
// usrhash= of the UKI's command line: inspect says whether the three agree.
func checkVerity(ctx context.Context, data io.ReaderAt, dataSize int64, hash io.ReaderAt, hashSize int64, cmdline string) Fact {
	sb, err := verity.ReadSuperblock(hash)
	if err != nil {
		return Fact{"verity.usr", err.Error()}
	}
	if sb.BlockSize != verity.BlockSize || sb.Algorithm != "sha256" || int64(sb.DataBlocks)*verity.BlockSize > dataSize {
		return Fact{"verity.usr", fmt.Sprintf("a hash tree stamp does not check (%s, %d-byte blocks, %d blocks)", sb.Algorithm, sb.BlockSize, sb.DataBlocks)}
	}
	cmp := &compareWriter{r: hash, size: hashSize, diff: -1}
	res, err := verity.Format(ctx, data, int64(sb.DataBlocks)*verity.BlockSize, cmp, verity.Options{Salt: sb.Salt, UUID: sb.UUID})
	if err != nil {
		return Fact{"verity.usr", err.Error()}
	}
	root := res.RootHashHex()
	var usrhash string
	for _, f := range strings.Fields(cmdline) {
		if v, ok := strings.CutPrefix(f, "usrhash="); ok {
			usrhash = strings.ToLower(v)
		}
	}
	switch {
	case cmp.diff >= 0:
		return Fact{"verity.usr", fmt.Sprintf("root hash %s of /usr's data; the hash partition differs from it at byte %d", root, cmp.diff)}
	case usrhash == "":
		return Fact{"verity.usr", "root hash " + root + ", matching the hash partition; no UKI names it (usrhash=)"}
	case usrhash != root:
		return Fact{"verity.usr", fmt.Sprintf("root hash %s, matching the hash partition, but the UKI says usrhash=%s", root, usrhash)}
	}
	return Fact{"verity.usr", "root hash " + root + ": /usr's data, its hash partition and the UKI's usrhash= agree"}
}

// compareWriter is an io.WriterAt that compares what is written with r and
// keeps the first offset that differs (-1 while none has).
type compareWriter struct {
	r    io.ReaderAt
	size int64
	diff int64
}

func (c *compareWriter) WriteAt(b []byte, off int64) (int, error) {
	have := make([]byte, len(b))
	if off+int64(len(b)) > c.size {
		c.note(min(off, c.size))
		return len(b), nil
	}
	if _, err := c.r.ReadAt(have, off); err != nil {
		c.note(off)
		return len(b), nil
	}
	for i := range b {
		if b[i] != have[i] {
			c.note(off + int64(i))
			break
		}
	}
	return len(b), nil
}

func (c *compareWriter) note(at int64) {
	if c.diff < 0 || at < c.diff {
		c.diff = at
	}
}
