package repo

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/clearsign"
	pgperrors "github.com/ProtonMail/go-crypto/openpgp/errors"
	"github.com/ProtonMail/go-crypto/openpgp/packet"

	"github.com/stamp-dev/stamp/packages/deb"
)

// FileSum is one line of a Release file's SHA256 section.
type FileSum struct {
	SHA256 string // lowercase hex
	Size   int64
}

// Release is a suite's Release file.
type Release struct {
	Paragraph *deb.Paragraph
	// Files maps a path relative to dists/SUITE (e.g.
	// "main/binary-amd64/Packages.xz") to its SHA256 and size.
	Files map[string]FileSum
	// Signer is the fingerprint of the key that signed it; "" when the
	// repository was trusted without a signature.
	Signer string
}

// ErrSignature wraps every failure to verify a signed Release.
var ErrSignature = errors.New("signature check failed")

// ParseRelease reads an unsigned Release file.
func ParseRelease(data []byte) (*Release, error) {
	if bytes.HasPrefix(data, []byte("-----BEGIN PGP SIGNED MESSAGE-----")) {
		b, _ := clearsign.Decode(data)
		if b == nil {
			return nil, errors.New("malformed clearsigned Release")
		}
		data = b.Plaintext
	}
	ps, err := deb.ParseControl(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("Release: %w", err)
	}
	if len(ps) != 1 {
		return nil, fmt.Errorf("Release: %d paragraphs, want 1", len(ps))
	}
	r := &Release{Paragraph: ps[0], Files: map[string]FileSum{}}
	sums, ok := ps[0].Lookup("SHA256")
	if !ok {
		return nil, errors.New("Release has no SHA256 section (MD5Sum and SHA1 are not trusted)")
	}
	for _, l := range strings.Split(sums, "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		if len(f) != 3 {
			return nil, fmt.Errorf("Release SHA256 line %q: want \"hash size path\"", strings.TrimSpace(l))
		}
		if _, err := hex.DecodeString(f[0]); err != nil || len(f[0]) != 64 {
			return nil, fmt.Errorf("Release SHA256 line %q: bad hash", strings.TrimSpace(l))
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("Release SHA256 line %q: bad size", strings.TrimSpace(l))
		}
		r.Files[f[2]] = FileSum{SHA256: strings.ToLower(f[0]), Size: n}
	}
	return r, nil
}

// ReadKeyring reads OpenPGP public keys, binary (.gpg, as in
// /usr/share/keyrings) or ASCII-armored (.asc).
func ReadKeyring(data []byte) (openpgp.EntityList, error) {
	var (
		el  openpgp.EntityList
		err error
	)
	trimmed := bytes.TrimSpace(data)
	if bytes.HasPrefix(trimmed, []byte("-----BEGIN PGP")) {
		// An .asc file may hold several armored blocks; read them all.
		for len(bytes.TrimSpace(trimmed)) > 0 {
			end := bytes.Index(trimmed, []byte("-----END PGP PUBLIC KEY BLOCK-----"))
			if end < 0 {
				return nil, errors.New("keyring: unterminated armored block")
			}
			end += len("-----END PGP PUBLIC KEY BLOCK-----")
			part, perr := openpgp.ReadArmoredKeyRing(bytes.NewReader(trimmed[:end]))
			if perr != nil {
				return nil, fmt.Errorf("keyring: %w", perr)
			}
			el = append(el, part...)
			trimmed = bytes.TrimSpace(trimmed[end:])
		}
	} else if len(data) >= 8 && string(data[4:8]) == "KBXf" {
		return nil, errors.New("keyring is a GnuPG keybox (.kbx); export it with gpg --export > keyring.gpg")
	} else if el, err = openpgp.ReadKeyRing(bytes.NewReader(data)); err != nil {
		return nil, fmt.Errorf("keyring: %w", err)
	}
	if len(el) == 0 {
		return nil, errors.New("keyring holds no keys")
	}
	return el, nil
}

// VerifyInRelease checks the clearsigned InRelease data against keyring and
// returns the Release it signs. Only the signed text is parsed; anything
// outside the signed block is ignored.
//
// Key validity (expiry, revocation) is judged at the time the signature
// says it was made, not at the wall clock: the question is whether the key
// was good when the archive was signed, and the answer must not change from
// one build to the next. (So an old, replayed Release still verifies; the
// lock pins which Release a recipe uses.)
func VerifyInRelease(data []byte, keyring openpgp.EntityList) (*Release, error) {
	b, _ := clearsign.Decode(data)
	if b == nil {
		return nil, fmt.Errorf("%w: InRelease is not a clearsigned message", ErrSignature)
	}
	r, err := ParseRelease(b.Plaintext)
	if err != nil {
		return nil, err
	}
	sig, err := io.ReadAll(b.ArmoredSignature.Body)
	if err != nil {
		return nil, fmt.Errorf("%w: InRelease signature: %v", ErrSignature, err)
	}
	when, err := signatureTime(sig)
	if err != nil {
		return nil, fmt.Errorf("%w: InRelease signature: %v", ErrSignature, err)
	}
	cfg := &packet.Config{Time: func() time.Time { return when }}
	_, signer, err := openpgp.VerifyDetachedSignature(keyring, bytes.NewReader(b.Bytes), bytes.NewReader(sig), cfg)
	if err != nil {
		if errors.Is(err, pgperrors.ErrUnknownIssuer) {
			return nil, fmt.Errorf("%w: InRelease is not signed by any key in the keyring", ErrSignature)
		}
		return nil, fmt.Errorf("%w: InRelease: %v", ErrSignature, err)
	}
	r.Signer = strings.ToUpper(hex.EncodeToString(signer.PrimaryKey.Fingerprint))
	return r, nil
}

// signatureTime is the latest creation time of the signature packets.
func signatureTime(sig []byte) (time.Time, error) {
	var when time.Time
	pr := packet.NewReader(bytes.NewReader(sig))
	for {
		p, err := pr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return when, err
		}
		if s, ok := p.(*packet.Signature); ok && s.CreationTime.After(when) {
			when = s.CreationTime
		}
	}
	if when.IsZero() {
		return when, errors.New("no signature packet")
	}
	return when, nil
}
