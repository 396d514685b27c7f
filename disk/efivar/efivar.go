// Package efivar writes the UEFI Secure Boot variables a machine in setup
// mode is given to trust a user's own key: EFI signature lists holding the
// key's X.509 certificate, and each wrapped as a time-based authenticated
// update of PK, KEK or db (the UEFI specification's
// EFI_VARIABLE_AUTHENTICATION_2), signed with the key. systemd-boot's
// secure-boot-enroll writes such files into the firmware as they are; so
// does efi-updatevar, and so do the firmware's own setup screens.
//
// The one key is platform key, key exchange key and signature database
// entry at once: PK signs its own update and KEK's, KEK signs db's. The
// timestamp is the build's epoch and the signatures are deterministic, so
// the files are the same bytes on every build.
package efivar

import (
	"crypto/x509"
	"encoding/binary"
	"errors"
	"time"
	"unicode/utf16"

	"github.com/stamp-dev/stamp/disk"
	"github.com/stamp-dev/stamp/disk/authenticode"
)

// GUIDs of the UEFI specification, in the order they are printed.
var (
	// GlobalVariable is the vendor of PK and KEK.
	GlobalVariable = uuid(0x8be4df61, 0x93ca, 0x11d2, 0xaa0d, 0x00e098032b8c)
	// ImageSecurityDatabase is the vendor of db and dbx.
	ImageSecurityDatabase = uuid(0xd719b2cb, 0x3d3a, 0x4596, 0xa3bc, 0xdad00e67656f)
	certX509              = uuid(0xa5c059a1, 0x94e4, 0x4aa7, 0x87b5, 0xab155c2bf072)
	certTypePKCS7         = uuid(0x4aafd29d, 0x68df, 0x49ee, 0x8aa9, 0x347d375665a7)
)

func uuid(a uint32, b, c, d uint16, e uint64) [16]byte {
	var u [16]byte
	binary.BigEndian.PutUint32(u[0:], a)
	binary.BigEndian.PutUint16(u[4:], b)
	binary.BigEndian.PutUint16(u[6:], c)
	binary.BigEndian.PutUint16(u[8:], d)
	for i := 0; i < 6; i++ {
		u[10+i] = byte(e >> (8 * (5 - i)))
	}
	return u
}

// Attributes of the Secure Boot variables: non-volatile, boot and runtime
// access, time-based authenticated writes.
const (
	attrNonVolatile        = 0x01
	attrBootService        = 0x02
	attrRuntime            = 0x04
	attrTimeAuthenticated  = 0x20
	SecureBootAttributes   = attrNonVolatile | attrBootService | attrRuntime | attrTimeAuthenticated
	winCertTypeEFIGUID     = 0x0ef1
	winCertRevision        = 0x0200
	signatureListHeader    = 16 + 4 + 4 + 4
	signatureDataOwnerSize = 16
	efiTimeSize            = 16
)

// SignatureList is an EFI_SIGNATURE_LIST of one X.509 certificate, owned by
// owner (a GUID in printed order).
func SignatureList(cert *x509.Certificate, owner [16]byte) []byte {
	sigSize := signatureDataOwnerSize + len(cert.Raw)
	b := make([]byte, signatureListHeader+sigSize)
	g := disk.GUIDBytes(certX509)
	copy(b, g[:])
	binary.LittleEndian.PutUint32(b[16:], uint32(len(b)))
	binary.LittleEndian.PutUint32(b[20:], 0) // SignatureHeaderSize
	binary.LittleEndian.PutUint32(b[24:], uint32(sigSize))
	o := disk.GUIDBytes(owner)
	copy(b[signatureListHeader:], o[:])
	copy(b[signatureListHeader+signatureDataOwnerSize:], cert.Raw)
	return b
}

// efiTime is an EFI_TIME of t in UTC, to the second, its other fields zero
// as an authenticated update's timestamp must have them.
func efiTime(t time.Time) ([]byte, error) {
	t = t.UTC()
	if t.Year() < 1900 || t.Year() > 9999 {
		return nil, errors.New("the timestamp's year is outside EFI_TIME's 1900 to 9999")
	}
	b := make([]byte, efiTimeSize)
	binary.LittleEndian.PutUint16(b[0:], uint16(t.Year()))
	b[2], b[3], b[4], b[5], b[6] = byte(t.Month()), byte(t.Day()), byte(t.Hour()), byte(t.Minute()), byte(t.Second())
	return b, nil
}

// SignedUpdate is the file that sets variable name of vendor to data (an
// authenticated variable update: EFI_VARIABLE_AUTHENTICATION_2, then the
// data), signed by s, with timestamp t.
func SignedUpdate(name string, vendor [16]byte, data []byte, t time.Time, s *authenticode.Signer) ([]byte, error) {
	ts, err := efiTime(t)
	if err != nil {
		return nil, err
	}
	// What is signed: the name (UCS-2, no terminator), the vendor GUID,
	// the attributes, the timestamp and the data.
	var signed []byte
	for _, u := range utf16.Encode([]rune(name)) {
		signed = binary.LittleEndian.AppendUint16(signed, u)
	}
	v := disk.GUIDBytes(vendor)
	signed = append(signed, v[:]...)
	signed = binary.LittleEndian.AppendUint32(signed, SecureBootAttributes)
	signed = append(signed, ts...)
	signed = append(signed, data...)
	p7, err := s.Detached(signed)
	if err != nil {
		return nil, err
	}
	out := append([]byte(nil), ts...)
	// WIN_CERTIFICATE_UEFI_GUID: the header, the certificate type, the
	// PKCS#7 signed data.
	out = binary.LittleEndian.AppendUint32(out, uint32(8+16+len(p7)))
	out = binary.LittleEndian.AppendUint16(out, winCertRevision)
	out = binary.LittleEndian.AppendUint16(out, winCertTypeEFIGUID)
	ct := disk.GUIDBytes(certTypePKCS7)
	out = append(out, ct[:]...)
	out = append(out, p7...)
	return append(out, data...), nil
}

// Enrollment is what a machine in setup mode needs to trust one key: the
// signed updates of db, KEK and PK, each holding the key's certificate.
type Enrollment struct {
	PK, KEK, DB []byte
}

// Enroll makes the updates for s's certificate, owned by owner, timestamped
// t. Enrolling them in the order db, KEK, PK leaves setup mode last.
func Enroll(s *authenticode.Signer, owner [16]byte, t time.Time) (*Enrollment, error) {
	esl := SignatureList(s.Cert, owner)
	var e Enrollment
	var err error
	if e.PK, err = SignedUpdate("PK", GlobalVariable, esl, t, s); err != nil {
		return nil, err
	}
	if e.KEK, err = SignedUpdate("KEK", GlobalVariable, esl, t, s); err != nil {
		return nil, err
	}
	if e.DB, err = SignedUpdate("db", ImageSecurityDatabase, esl, t, s); err != nil {
		return nil, err
	}
	return &e, nil
}

// ParseSignatureList reads the X.509 certificates of EFI signature lists
// (one after another, as db holds them); lists of other types are skipped.
func ParseSignatureList(b []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	x509GUID := disk.GUIDBytes(certX509)
	for len(b) > 0 {
		if len(b) < signatureListHeader {
			return nil, errors.New("a signature list shorter than its header")
		}
		size := binary.LittleEndian.Uint32(b[16:])
		hdr := binary.LittleEndian.Uint32(b[20:])
		sig := binary.LittleEndian.Uint32(b[24:])
		if size < signatureListHeader || uint64(size) > uint64(len(b)) || sig <= signatureDataOwnerSize ||
			uint64(signatureListHeader)+uint64(hdr) > uint64(size) {
			return nil, errors.New("a signature list whose sizes do not fit")
		}
		list := b[signatureListHeader+hdr : size]
		if [16]byte(b[:16]) == x509GUID {
			for len(list) >= int(sig) {
				c, err := x509.ParseCertificate(list[signatureDataOwnerSize:sig])
				if err != nil {
					return nil, err
				}
				out = append(out, c)
				list = list[sig:]
			}
		}
		b = b[size:]
	}
	return out, nil
}
