package authenticode

import (
	"bytes"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/asn1"
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"

	"golang.org/x/crypto/cryptobyte"
	cbasn1 "golang.org/x/crypto/cryptobyte/asn1"
)

// Signature is an Authenticode signature read back from a PE image's
// certificate table.
type Signature struct {
	// Digest is the image digest the signature covers.
	Digest []byte
	// Signer is the certificate whose key made the signature.
	Signer *x509.Certificate
	// Certificates are all the certificates the signature carries.
	Certificates []*x509.Certificate

	content   []byte // the SpcIndirectDataContent's contents, which the message digest covers
	attrs     []byte // the authenticated attributes as a DER SET OF, which the signature covers
	md        []byte // the messageDigest attribute
	signature []byte
}

// ParsePE reads the first entry of a PE attribute certificate table, which
// must be an Authenticode signature with one SHA-256 RSA signer.
func ParsePE(table []byte) (*Signature, error) {
	if len(table) < certHeaderSize {
		return nil, errors.New("the certificate table is shorter than its header")
	}
	n := int(binary.LittleEndian.Uint32(table))
	rev, typ := binary.LittleEndian.Uint16(table[4:]), binary.LittleEndian.Uint16(table[6:])
	if n < certHeaderSize || n > len(table) {
		return nil, fmt.Errorf("the certificate entry's length %d does not fit the %d-byte table", n, len(table))
	}
	if rev != certRevision || typ != certTypePKCS7 {
		return nil, fmt.Errorf("the certificate entry is revision %#x type %#x, not an Authenticode signature", rev, typ)
	}
	return parseSignedData(table[certHeaderSize:n])
}

var errMalformed = errors.New("malformed PKCS#7 signed data")

func parseSignedData(der []byte) (*Signature, error) {
	in := cryptobyte.String(der)
	var ci, sd cryptobyte.String
	var ct asn1.ObjectIdentifier
	if !in.ReadASN1(&ci, cbasn1.SEQUENCE) || !ci.ReadASN1ObjectIdentifier(&ct) || !ct.Equal(oidSignedData) ||
		!ci.ReadASN1(&sd, cbasn1.Tag(0).ContextSpecific().Constructed()) || !sd.ReadASN1(&sd, cbasn1.SEQUENCE) {
		return nil, errMalformed
	}
	s, err := readIndirectData(&sd)
	if err != nil {
		return nil, err
	}
	if err := s.readCertificates(&sd); err != nil {
		return nil, err
	}
	if sd.PeekASN1Tag(cbasn1.Tag(1).ContextSpecific().Constructed()) && !sd.SkipASN1(cbasn1.Tag(1).ContextSpecific().Constructed()) {
		return nil, errMalformed
	}
	var signers cryptobyte.String
	if !sd.ReadASN1(&signers, cbasn1.SET) {
		return nil, errMalformed
	}
	if err := s.readSigner(signers); err != nil {
		return nil, err
	}
	return s, nil
}

// readIndirectData reads the signed data's version, digest algorithms and
// content, which must be an SpcIndirectDataContent, into a Signature with
// its content and the image digest it holds.
func readIndirectData(sd *cryptobyte.String) (*Signature, error) {
	var version int64
	var algs, content, contentType cryptobyte.String
	var ctype asn1.ObjectIdentifier
	if !sd.ReadASN1Integer(&version) || !sd.ReadASN1(&algs, cbasn1.SET) || !sd.ReadASN1(&content, cbasn1.SEQUENCE) ||
		!content.ReadASN1ObjectIdentifier(&ctype) {
		return nil, errMalformed
	}
	if !ctype.Equal(oidSpcIndirectData) {
		return nil, fmt.Errorf("the signed content is %v, not Authenticode's SpcIndirectDataContent", ctype)
	}
	var indirect cryptobyte.String
	if !content.ReadASN1(&contentType, cbasn1.Tag(0).ContextSpecific().Constructed()) || !contentType.ReadASN1(&indirect, cbasn1.SEQUENCE) {
		return nil, errMalformed
	}
	s := &Signature{content: append([]byte(nil), indirect...)}
	var attrValue, digestInfo, digest cryptobyte.String
	if !indirect.ReadASN1(&attrValue, cbasn1.SEQUENCE) || !indirect.ReadASN1(&digestInfo, cbasn1.SEQUENCE) ||
		!digestInfo.SkipASN1(cbasn1.SEQUENCE) || !digestInfo.ReadASN1(&digest, cbasn1.OCTET_STRING) {
		return nil, errMalformed
	}
	s.Digest = append([]byte(nil), digest...)
	return s, nil
}

// readCertificates reads the signed data's optional certificates.
func (s *Signature) readCertificates(sd *cryptobyte.String) error {
	if !sd.PeekASN1Tag(cbasn1.Tag(0).ContextSpecific().Constructed()) {
		return nil
	}
	var certs cryptobyte.String
	if !sd.ReadASN1(&certs, cbasn1.Tag(0).ContextSpecific().Constructed()) {
		return errMalformed
	}
	for !certs.Empty() {
		var c cryptobyte.String
		if !certs.ReadASN1Element(&c, cbasn1.SEQUENCE) {
			return errMalformed
		}
		cert, err := x509.ParseCertificate(c)
		if err != nil {
			return err
		}
		s.Certificates = append(s.Certificates, cert)
	}
	return nil
}

// readSigner reads the one SignerInfo of signers: its authenticated
// attributes, its signature, and which certificate is the signer's.
func (s *Signature) readSigner(signers cryptobyte.String) error {
	var si, issuerSerial, issuer, attrs, sig cryptobyte.String
	var siVersion int64
	serial := new(big.Int)
	var digestAlg, sigAlg asn1.ObjectIdentifier
	var alg cryptobyte.String
	if !signers.ReadASN1(&si, cbasn1.SEQUENCE) || !signers.Empty() {
		return errors.New("the signature does not have exactly one signer")
	}
	if !si.ReadASN1Integer(&siVersion) || !si.ReadASN1(&issuerSerial, cbasn1.SEQUENCE) ||
		!issuerSerial.ReadASN1Element(&issuer, cbasn1.SEQUENCE) || !issuerSerial.ReadASN1Integer(serial) ||
		!si.ReadASN1(&alg, cbasn1.SEQUENCE) || !alg.ReadASN1ObjectIdentifier(&digestAlg) {
		return errMalformed
	}
	if !digestAlg.Equal(oidSHA256) {
		return fmt.Errorf("the signer's digest algorithm is %v, not SHA-256", digestAlg)
	}
	var attrsTag cbasn1.Tag
	if !si.PeekASN1Tag(cbasn1.Tag(0).ContextSpecific().Constructed()) || !si.ReadAnyASN1(&attrs, &attrsTag) {
		return errors.New("the signer has no authenticated attributes")
	}
	if err := s.readAttributes(attrs); err != nil {
		return err
	}
	if !si.ReadASN1(&alg, cbasn1.SEQUENCE) || !alg.ReadASN1ObjectIdentifier(&sigAlg) || !si.ReadASN1(&sig, cbasn1.OCTET_STRING) {
		return errMalformed
	}
	if !sigAlg.Equal(oidRSAEncryption) {
		return fmt.Errorf("the signature algorithm is %v, not RSA", sigAlg)
	}
	s.signature = append([]byte(nil), sig...)
	for _, c := range s.Certificates {
		if bytes.Equal(c.RawIssuer, issuer) && c.SerialNumber.Cmp(serial) == 0 {
			s.Signer = c
		}
	}
	if s.Signer == nil {
		return errors.New("the signature does not carry its signer's certificate")
	}
	return nil
}

// readAttributes keeps the signer's authenticated attributes as the
// signature covers them, and the message digest among them.
func (s *Signature) readAttributes(attrs cryptobyte.String) error {
	// The signature covers the attributes as a SET OF, not under their
	// [0] tag.
	var set cryptobyte.Builder
	set.AddASN1(cbasn1.SET, func(b *cryptobyte.Builder) { b.AddBytes(attrs) })
	s.attrs = set.BytesOrPanic()
	for rest := attrs; !rest.Empty(); {
		var a, vals cryptobyte.String
		var oid asn1.ObjectIdentifier
		if !rest.ReadASN1(&a, cbasn1.SEQUENCE) || !a.ReadASN1ObjectIdentifier(&oid) || !a.ReadASN1(&vals, cbasn1.SET) {
			return errMalformed
		}
		if oid.Equal(oidMessageDigest) {
			var md cryptobyte.String
			if !vals.ReadASN1(&md, cbasn1.OCTET_STRING) {
				return errMalformed
			}
			s.md = append([]byte(nil), md...)
		}
	}
	return nil
}

// Verify checks the signature itself: that the message digest attribute is
// the digest of the signed content, and that the signer's key signed the
// attributes. Whether the signer is trusted, and whether Digest is the
// image's, are the caller's to judge.
func (s *Signature) Verify() error {
	md := sha256.Sum256(s.content)
	if !bytes.Equal(md[:], s.md) {
		return errors.New("the message digest attribute does not match the signed content")
	}
	pub, ok := s.Signer.PublicKey.(*rsa.PublicKey)
	if !ok {
		return fmt.Errorf("the signer's key is %T, not RSA", s.Signer.PublicKey)
	}
	h := sha256.Sum256(s.attrs)
	if err := rsa.VerifyPKCS1v15(pub, crypto.SHA256, h[:], s.signature); err != nil {
		return fmt.Errorf("the signature does not verify with the signer's key: %w", err)
	}
	return nil
}
