// Package authenticode signs with a user's RSA key and certificate what
// UEFI Secure Boot checks: PE images (Microsoft's "Windows Authenticode
// Portable Executable Signature Format": PKCS#7 signed data over an
// SpcIndirectDataContent that holds the image's digest) and authenticated
// variable updates (PKCS#7 signed data over the variable, detached, as the
// UEFI specification's EFI_VARIABLE_AUTHENTICATION_2 wants it).
//
// Signatures are deterministic: SHA-256, RSA PKCS#1 v1.5, which has no
// randomness, and no signing-time attribute, so the same key, certificate
// and image always give the same bytes.
package authenticode

import (
	"bytes"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/asn1"
	"encoding/binary"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/crypto/cryptobyte"
	cbasn1 "golang.org/x/crypto/cryptobyte/asn1"
)

// Object identifiers.
var (
	oidData             = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 7, 1}
	oidSignedData       = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 7, 2}
	oidContentType      = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 3}
	oidMessageDigest    = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 4}
	oidRSAEncryption    = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 1}
	oidSHA256           = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 2, 1}
	oidSpcIndirectData  = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 311, 2, 1, 4}
	oidSpcSpOpusInfo    = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 311, 2, 1, 12}
	oidSpcPEImageDataOb = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 311, 2, 1, 15}
)

// WIN_CERTIFICATE of a PE attribute certificate table.
const (
	certRevision   = 0x0200
	certTypePKCS7  = 0x0002
	certHeaderSize = 8
	certAlign      = 8
)

// Signer is an RSA key with the X.509 certificate of its public key.
type Signer struct {
	key  *rsa.PrivateKey
	Cert *x509.Certificate
}

// LoadPEM reads a PEM private key (PKCS#1 "RSA PRIVATE KEY" or PKCS#8
// "PRIVATE KEY", unencrypted) and a PEM certificate, and checks that the
// certificate is the key's. Only RSA is taken: it is what UEFI firmware
// verifies.
func LoadPEM(keyPEM, certPEM []byte) (*Signer, error) {
	cert, err := ParseCertificatePEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("cert: %w", err)
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("key: %w", err)
	}
	pub, ok := cert.PublicKey.(*rsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf("cert: the certificate's key is %T; Secure Boot takes RSA", cert.PublicKey)
	}
	if !key.PublicKey.Equal(pub) {
		return nil, fmt.Errorf("key: the key does not match the certificate (%s)", cert.Subject)
	}
	return &Signer{key: key, Cert: cert}, nil
}

// ParseCertificatePEM reads the one certificate of a PEM file.
func ParseCertificatePEM(b []byte) (*x509.Certificate, error) {
	var found *x509.Certificate
	for rest := b; ; {
		blk, r := pem.Decode(rest)
		if blk == nil {
			break
		}
		rest = r
		if blk.Type != "CERTIFICATE" {
			continue
		}
		if found != nil {
			return nil, errors.New("more than one certificate; give the signer's alone")
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, err
		}
		found = c
	}
	if found == nil {
		return nil, errors.New("no PEM CERTIFICATE block")
	}
	return found, nil
}

func parseKey(b []byte) (*rsa.PrivateKey, error) {
	for rest := b; ; {
		blk, r := pem.Decode(rest)
		if blk == nil {
			return nil, errors.New("no PEM private key block (RSA PRIVATE KEY or PRIVATE KEY)")
		}
		rest = r
		if strings.Contains(blk.Headers["Proc-Type"], "ENCRYPTED") {
			return nil, errors.New("the key is encrypted; give it unencrypted")
		}
		switch blk.Type {
		case "RSA PRIVATE KEY":
			return x509.ParsePKCS1PrivateKey(blk.Bytes)
		case "PRIVATE KEY":
			k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
			if err != nil {
				return nil, err
			}
			rk, ok := k.(*rsa.PrivateKey)
			if !ok {
				return nil, fmt.Errorf("the key is %T; Secure Boot takes RSA", k)
			}
			return rk, nil
		case "ENCRYPTED PRIVATE KEY":
			return nil, errors.New("the key is encrypted; give it unencrypted")
		case "EC PRIVATE KEY":
			return nil, errors.New("the key is an EC key; Secure Boot takes RSA")
		}
	}
}

// Fingerprint is the hex SHA-256 of the certificate's DER, which names the
// signer in records: the key itself never leaves the signer.
func (s *Signer) Fingerprint() string { return Fingerprint(s.Cert) }

// Fingerprint is the hex SHA-256 of c's DER.
func Fingerprint(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return hex.EncodeToString(sum[:])
}

// PE signs an Authenticode digest (SHA-256) of a PE image and returns the
// image's attribute certificate table entry: a WIN_CERTIFICATE of type
// PKCS_SIGNED_DATA, padded to a quadword. Its size depends on the signer
// alone, never on the digest.
func (s *Signer) PE(digest []byte) ([]byte, error) {
	if len(digest) != sha256.Size {
		return nil, fmt.Errorf("an Authenticode digest of %d bytes, not SHA-256", len(digest))
	}
	indirect := spcIndirectDataContent(digest)
	// The message digest covers the SpcIndirectDataContent's contents,
	// without its own tag and length.
	inner, err := contents(indirect)
	if err != nil {
		return nil, err
	}
	md := sha256.Sum256(inner)
	p7, err := s.signedData(oidSpcIndirectData, indirect, md[:], true, true)
	if err != nil {
		return nil, err
	}
	n := certHeaderSize + len(p7)
	padded := (n + certAlign - 1) / certAlign * certAlign
	out := make([]byte, padded)
	binary.LittleEndian.PutUint32(out[0:], uint32(padded))
	binary.LittleEndian.PutUint16(out[4:], certRevision)
	binary.LittleEndian.PutUint16(out[6:], certTypePKCS7)
	copy(out[certHeaderSize:], p7)
	return out, nil
}

// Detached signs data as an authenticated variable update is signed: a
// PKCS#7 SignedData (without the ContentInfo around it) whose content is
// left out and whose signer has no attributes, its signature over the
// SHA-256 of data.
func (s *Signer) Detached(data []byte) ([]byte, error) {
	md := sha256.Sum256(data)
	return s.signedData(oidData, nil, md[:], false, false)
}

// spcIndirectDataContent is the Authenticode content: the image kind
// (SPC_PE_IMAGE_DATAOBJ, with no flags and the customary "<<<Obsolete>>>"
// file link) and the digest.
func spcIndirectDataContent(digest []byte) []byte {
	var b cryptobyte.Builder
	b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) {
		b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) { // SpcAttributeTypeAndOptionalValue
			b.AddASN1ObjectIdentifier(oidSpcPEImageDataOb)
			b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) { // SpcPeImageData
				b.AddASN1BitString(nil)
				b.AddASN1(cbasn1.Tag(0).ContextSpecific().Constructed(), func(b *cryptobyte.Builder) { // file SpcLink
					b.AddASN1(cbasn1.Tag(2).ContextSpecific().Constructed(), func(b *cryptobyte.Builder) { // file SpcString
						b.AddASN1(cbasn1.Tag(0).ContextSpecific(), func(b *cryptobyte.Builder) { // unicode BMPString
							for _, r := range "<<<Obsolete>>>" {
								b.AddUint16(uint16(r))
							}
						})
					})
				})
			})
		})
		b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) { // DigestInfo
			addAlgorithm(b, oidSHA256)
			b.AddASN1OctetString(digest)
		})
	})
	return b.BytesOrPanic()
}

// contents strips the outer tag and length of a DER element.
func contents(der []byte) ([]byte, error) {
	s := cryptobyte.String(der)
	var inner cryptobyte.String
	var tag cbasn1.Tag
	if !s.ReadAnyASN1(&inner, &tag) || !s.Empty() {
		return nil, errors.New("malformed DER")
	}
	return inner, nil
}

func addAlgorithm(b *cryptobyte.Builder, oid asn1.ObjectIdentifier) {
	b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) {
		b.AddASN1ObjectIdentifier(oid)
		b.AddASN1NULL()
	})
}

// signedData builds a PKCS#7 SignedData with one signer. content (DER, or
// nil for detached data) is of type contentType and md is the SHA-256 of
// what is signed: with attrs, of the content, put in the authenticated
// attributes that are then signed; without, md itself is signed. wrap puts
// the SignedData in its ContentInfo.
func (s *Signer) signedData(contentType asn1.ObjectIdentifier, content, md []byte, attrs, wrap bool) ([]byte, error) {
	var attrSet []byte
	toSign := md
	if attrs {
		var err error
		if attrSet, err = authenticatedAttributes(contentType, md); err != nil {
			return nil, err
		}
		h := sha256.Sum256(attrSet)
		toSign = h[:]
	}
	sig, err := rsa.SignPKCS1v15(nil, s.key, crypto.SHA256, toSign)
	if err != nil {
		return nil, err
	}
	var b cryptobyte.Builder
	signed := func(b *cryptobyte.Builder) {
		b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) {
			b.AddASN1Int64(1)
			b.AddASN1(cbasn1.SET, func(b *cryptobyte.Builder) { addAlgorithm(b, oidSHA256) })
			b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) { // contentInfo
				b.AddASN1ObjectIdentifier(contentType)
				if content != nil {
					b.AddASN1(cbasn1.Tag(0).ContextSpecific().Constructed(), func(b *cryptobyte.Builder) { b.AddBytes(content) })
				}
			})
			b.AddASN1(cbasn1.Tag(0).ContextSpecific().Constructed(), func(b *cryptobyte.Builder) { b.AddBytes(s.Cert.Raw) })
			b.AddASN1(cbasn1.SET, func(b *cryptobyte.Builder) {
				b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) { // SignerInfo
					b.AddASN1Int64(1)
					b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) { // issuerAndSerialNumber
						b.AddBytes(s.Cert.RawIssuer)
						b.AddASN1BigInt(s.Cert.SerialNumber)
					})
					addAlgorithm(b, oidSHA256)
					if attrs {
						// [0] IMPLICIT: the SET OF's contents under a new tag.
						inner, _ := contents(attrSet)
						b.AddASN1(cbasn1.Tag(0).ContextSpecific().Constructed(), func(b *cryptobyte.Builder) { b.AddBytes(inner) })
					}
					addAlgorithm(b, oidRSAEncryption)
					b.AddASN1OctetString(sig)
				})
			})
		})
	}
	if !wrap {
		signed(&b)
		return b.Bytes()
	}
	b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) {
		b.AddASN1ObjectIdentifier(oidSignedData)
		b.AddASN1(cbasn1.Tag(0).ContextSpecific().Constructed(), signed)
	})
	return b.Bytes()
}

// authenticatedAttributes is the DER SET OF the signer's attributes: the
// content type, the message digest and an empty SpcSpOpusInfo, as signing
// tools write them, and no signing time. DER orders a SET OF by the
// encodings of its members.
func authenticatedAttributes(contentType asn1.ObjectIdentifier, md []byte) ([]byte, error) {
	attr := func(oid asn1.ObjectIdentifier, value func(*cryptobyte.Builder)) []byte {
		var b cryptobyte.Builder
		b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) {
			b.AddASN1ObjectIdentifier(oid)
			b.AddASN1(cbasn1.SET, value)
		})
		return b.BytesOrPanic()
	}
	members := [][]byte{
		attr(oidContentType, func(b *cryptobyte.Builder) { b.AddASN1ObjectIdentifier(contentType) }),
		attr(oidMessageDigest, func(b *cryptobyte.Builder) { b.AddASN1OctetString(md) }),
		attr(oidSpcSpOpusInfo, func(b *cryptobyte.Builder) { b.AddASN1(cbasn1.SEQUENCE, func(*cryptobyte.Builder) {}) }),
	}
	sortDER(members)
	var b cryptobyte.Builder
	b.AddASN1(cbasn1.SET, func(b *cryptobyte.Builder) {
		for _, m := range members {
			b.AddBytes(m)
		}
	})
	return b.Bytes()
}

func sortDER(m [][]byte) {
	for i := 1; i < len(m); i++ {
		for j := i; j > 0 && bytes.Compare(m[j], m[j-1]) < 0; j-- {
			m[j], m[j-1] = m[j-1], m[j]
		}
	}
}
