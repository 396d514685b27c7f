package scripts

import (
	"bytes"
	"crypto/sha1"
	"crypto/x509"
	"encoding/asn1"
	"encoding/binary"
	"encoding/pem"
	"fmt"
	"sort"
	"strings"
	"unicode/utf16"

	"mvdan.cc/sh/v3/interp"

	"github.com/stamp-dev/stamp/rootfs"
)

// cmdOpenssl is openssl rehash DIR..., which update-ca-certificates runs
// on /etc/ssl/certs: every .pem, .crt, .cer or .crl file holding exactly
// one certificate gets a HASH.N symlink named by OpenSSL's subject-name
// hash (X509_NAME_hash: SHA-1 of the canonical encoding of the subject,
// its first four bytes little-endian), N counting certificates of the
// same hash in file-name order, duplicates skipped. CRLs and other
// openssl commands are unhandled.
func cmdOpenssl(r *run, hc interp.HandlerContext, args []string) error {
	if len(args) < 2 || args[1] != "rehash" && args[1] != "c_rehash" {
		return r.unhandledCommand(args)
	}
	verbose := false
	var dirs []string
	for _, a := range args[2:] {
		switch {
		case a == "-v":
			verbose = true
		case strings.HasPrefix(a, "-"):
			return r.unhandled(fmt.Sprintf("openssl rehash option %s", a))
		default:
			dirs = append(dirs, a)
		}
	}
	if len(dirs) == 0 {
		return r.unhandled("openssl rehash of the default certificate directory")
	}
	for _, d := range dirs {
		if err := r.rehash(hc, r.treePath(hc.Dir, d), verbose); err != nil {
			return err
		}
	}
	return nil
}

var hashLinkName = func(n string) bool {
	if len(n) < 10 || n[8] != '.' {
		return false
	}
	for _, c := range n[:8] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	rest := strings.TrimPrefix(n[9:], "r")
	return rest != "" && isDigits(rest)
}

func (r *run) rehash(hc interp.HandlerContext, dir string, verbose bool) error {
	t := r.env.Tree
	de, err := t.Lookup(dir, true)
	if err != nil || de.Type != rootfs.TypeDir {
		fmt.Fprintf(hc.Stderr, "rehash: %s: No such file or directory\n", dir)
		return exit(1)
	}
	// Old hash links go; they are made anew below.
	for _, n := range t.Children(de.Path) {
		if e := t.Get(de.Path + "/" + n); e != nil && e.Type == rootfs.TypeSymlink && hashLinkName(n) {
			if err := t.Remove(e.Path); err != nil {
				return err
			}
		}
	}
	type entry struct {
		name string
		fp   [20]byte
	}
	buckets := map[uint32][]entry{}
	var order []uint32
	for _, n := range t.Children(de.Path) {
		ext := strings.ToLower(n[strings.LastIndexByte(n, '.')+1:])
		if !strings.Contains(n, ".") || ext != "pem" && ext != "crt" && ext != "cer" && ext != "crl" {
			continue
		}
		e, err := t.Lookup(de.Path+"/"+n, true)
		if err != nil || e.Type != rootfs.TypeRegular {
			continue
		}
		b, err := r.readFile(e.Path)
		if err != nil {
			continue
		}
		var certs, crls [][]byte
		for rest := b; ; {
			var blk *pem.Block
			blk, rest = pem.Decode(rest)
			if blk == nil {
				break
			}
			switch blk.Type {
			case "CERTIFICATE", "TRUSTED CERTIFICATE", "X509 CERTIFICATE":
				certs = append(certs, blk.Bytes)
			case "X509 CRL":
				crls = append(crls, blk.Bytes)
			}
		}
		if len(crls) > 0 && len(certs) == 0 {
			return r.unhandled("openssl rehash of a CRL")
		}
		if len(certs) != 1 {
			fmt.Fprintf(hc.Stderr, "rehash: warning: skipping %s,it does not contain exactly one certificate or CRL\n", n)
			continue
		}
		c, err := x509.ParseCertificate(certs[0])
		if err != nil {
			fmt.Fprintf(hc.Stderr, "rehash: warning: skipping %s, %v\n", n, err)
			continue
		}
		h, err := NameHash(c.RawSubject)
		if err != nil {
			return fmt.Errorf("rehash: %s: %w", n, err)
		}
		fp := sha1.Sum(certs[0])
		dup := false
		for _, x := range buckets[h] {
			dup = dup || x.fp == fp
		}
		if dup {
			fmt.Fprintf(hc.Stderr, "rehash: warning: skipping duplicate certificate in %s\n", n)
			continue
		}
		if buckets[h] == nil {
			order = append(order, h)
		}
		buckets[h] = append(buckets[h], entry{n, fp})
	}
	for _, h := range order {
		for i, x := range buckets[h] {
			link := fmt.Sprintf("%08x.%d", h, i)
			if verbose {
				fmt.Fprintf(hc.Stdout, "link %s -> %s\n", x.name, link)
			}
			if err := r.symlink(x.name, de.Path+"/"+link); err != nil {
				return err
			}
		}
	}
	return nil
}

// NameHash is OpenSSL's X509_NAME_hash_ex of a DER-encoded name.
func NameHash(raw []byte) (uint32, error) {
	canon, err := canonicalName(raw)
	if err != nil {
		return 0, err
	}
	sum := sha1.Sum(canon)
	return binary.LittleEndian.Uint32(sum[:4]), nil
}

// canonicalName is x509_name_canon: each RDN as a DER SET of its
// attributes, string values turned into lower-cased, space-collapsed
// UTF8Strings, with no outer SEQUENCE.
func canonicalName(raw []byte) ([]byte, error) {
	var rdns []asn1.RawValue
	if rest, err := asn1.Unmarshal(raw, &rdns); err != nil || len(rest) > 0 {
		return nil, fmt.Errorf("bad name: %v", err)
	}
	var out []byte
	for _, rdn := range rdns {
		var atvs []asn1.RawValue
		if _, err := asn1.UnmarshalWithParams(rdn.FullBytes, &atvs, "set"); err != nil {
			return nil, err
		}
		var encs [][]byte
		for _, atv := range atvs {
			var pair struct {
				Type  asn1.ObjectIdentifier
				Value asn1.RawValue
			}
			if _, err := asn1.Unmarshal(atv.FullBytes, &pair); err != nil {
				return nil, err
			}
			var typ []byte
			if b, err := asn1.Marshal(pair.Type); err == nil {
				typ = b
			}
			val := pair.Value.FullBytes
			if s, ok := stringValue(pair.Value); ok {
				v, err := asn1.Marshal(asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagUTF8String, Bytes: canonString(s)})
				if err != nil {
					return nil, err
				}
				val = v
			}
			seq, err := asn1.Marshal(asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagSequence, IsCompound: true, Bytes: append(append([]byte{}, typ...), val...)})
			if err != nil {
				return nil, err
			}
			encs = append(encs, seq)
		}
		// DER orders a SET OF by the encodings, a shorter one first
		// where one is a prefix of the other.
		sort.SliceStable(encs, func(i, j int) bool {
			a, b := encs[i], encs[j]
			if c := bytes.Compare(a[:min(len(a), len(b))], b[:min(len(a), len(b))]); c != 0 {
				return c < 0
			}
			return len(a) < len(b)
		})
		set, err := asn1.Marshal(asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagSet, IsCompound: true, Bytes: bytes.Join(encs, nil)})
		if err != nil {
			return nil, err
		}
		out = append(out, set...)
	}
	return out, nil
}

// stringValue decodes the string types OpenSSL canonicalises into UTF-8;
// the one-byte types are read as Latin-1, as ASN1_STRING_to_UTF8 does.
func stringValue(v asn1.RawValue) ([]byte, bool) {
	if v.Class != asn1.ClassUniversal {
		return nil, false
	}
	switch v.Tag {
	case asn1.TagUTF8String:
		return v.Bytes, true
	case asn1.TagPrintableString, asn1.TagT61String, asn1.TagIA5String, 26: // VisibleString
		var b []byte
		for _, c := range v.Bytes {
			b = append(b, string(rune(c))...)
		}
		return b, true
	case asn1.TagBMPString:
		if len(v.Bytes)%2 != 0 {
			return nil, false
		}
		u := make([]uint16, len(v.Bytes)/2)
		for i := range u {
			u[i] = binary.BigEndian.Uint16(v.Bytes[2*i:])
		}
		return []byte(string(utf16.Decode(u))), true
	case 28: // UniversalString
		if len(v.Bytes)%4 != 0 {
			return nil, false
		}
		var b []byte
		for i := 0; i < len(v.Bytes); i += 4 {
			b = append(b, string(rune(binary.BigEndian.Uint32(v.Bytes[i:])))...)
		}
		return b, true
	}
	return nil, false
}

// canonString is asn1_string_canon on UTF-8 bytes.
func canonString(s []byte) []byte {
	isSpace := func(c byte) bool { return c == ' ' || c >= '\t' && c <= '\r' }
	for len(s) > 0 && isSpace(s[0]) {
		s = s[1:]
	}
	for len(s) > 0 && isSpace(s[len(s)-1]) {
		s = s[:len(s)-1]
	}
	out := []byte{}
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c >= 0x80:
			out = append(out, c)
			i++
		case isSpace(c):
			out = append(out, ' ')
			for i < len(s) && isSpace(s[i]) {
				i++
			}
		default:
			if c >= 'A' && c <= 'Z' {
				c += 'a' - 'A'
			}
			out = append(out, c)
			i++
		}
	}
	return out
}
