// Package sign signs what stamp hands to other machines (the build cache's
// records in a registry) and checks what it takes from them, with ed25519
// keys in the PEM files OpenSSL writes:
//
//	openssl genpkey -algorithm ed25519 -out cache.key   # PKCS#8 "PRIVATE KEY"
//	openssl pkey -in cache.key -pubout -out cache.pub  # PKIX "PUBLIC KEY"
//
// A signature is made over DSSE's pre-authentication encoding of a payload
// type and the payload (PAE), as in-toto and sigstore sign their envelopes,
// so a signature made for one kind of payload can never be taken for
// another, and the payload's length is bound. It is carried as a DSSE
// signature object: a key ID and the signature's bytes.
//
// A key ID is "sha256:" and the hex sha256 of the public key's PKIX DER
// encoding, which `openssl pkey -pubin -in cache.pub -outform DER | sha256sum`
// prints too. It is a hint for picking the key; it proves nothing alone.
//
// Nothing here logs, and no error carries a key's bytes.
package sign

import (
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
)

// ErrUntrusted is content that no trusted key signed: unsigned, signed by a
// key not trusted, or with a signature that does not verify over it.
var ErrUntrusted = errors.New("not signed by a trusted key")

// maxSignatures bounds the signatures tried on one payload, so a hostile
// entry cannot make a pull verify without end.
const maxSignatures = 16

// maxKeyFile bounds a key file read: a PEM ed25519 key is under 200 bytes.
const maxKeyFile = 64 << 10

// Signature is one DSSE signature object. Sig marshals as standard base64,
// as DSSE writes it.
type Signature struct {
	KeyID string `json:"keyid"`
	Sig   []byte `json:"sig"`
}

// PAE is DSSE v1's pre-authentication encoding of a payload of the given
// type: the bytes a signature covers.
func PAE(payloadType string, payload []byte) []byte {
	b := make([]byte, 0, len("DSSEv1")+len(payloadType)+len(payload)+48)
	b = append(b, "DSSEv1 "...)
	b = strconv.AppendInt(b, int64(len(payloadType)), 10)
	b = append(b, ' ')
	b = append(b, payloadType...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(len(payload)), 10)
	b = append(b, ' ')
	return append(b, payload...)
}

// KeyID names a public key: the sha256 of its PKIX DER encoding.
func KeyID(pub ed25519.PublicKey) string {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		panic(err) // an ed25519.PublicKey always marshals
	}
	sum := sha256.Sum256(der)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Signer signs with one private key.
type Signer struct {
	key ed25519.PrivateKey
	id  string
}

// LoadSigner reads an ed25519 private key from a PEM file (PKCS#8,
// unencrypted).
func LoadSigner(path string) (*Signer, error) {
	b, err := readKeyFile(path)
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %w", path, err)
	}
	s, err := ParseSigner(b)
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %w", path, err)
	}
	return s, nil
}

// ParseSigner reads an ed25519 private key from PEM (PKCS#8, unencrypted).
func ParseSigner(b []byte) (*Signer, error) {
	block, err := onePEM(b)
	if err != nil {
		return nil, err
	}
	switch block.Type {
	case "PRIVATE KEY":
	case "ENCRYPTED PRIVATE KEY":
		return nil, errors.New("the key is encrypted; stamp reads unencrypted PKCS#8 keys (keep it in a secret store instead)")
	case "PUBLIC KEY":
		return nil, errors.New("this is a public key; signing needs the private one")
	default:
		return nil, fmt.Errorf("PEM block %q is not a PKCS#8 private key (openssl genpkey -algorithm ed25519 writes one)", block.Type)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("PKCS#8 private key: %w", err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("a %T, not an ed25519 key", k)
	}
	return &Signer{key: priv, id: KeyID(priv.Public().(ed25519.PublicKey))}, nil
}

// KeyID is the ID of the signer's public key.
func (s *Signer) KeyID() string { return s.id }

// Public is the signer's public key.
func (s *Signer) Public() ed25519.PublicKey { return s.key.Public().(ed25519.PublicKey) }

// Sign signs payload as payloadType. ed25519 signatures are deterministic:
// the same key, type and payload give the same bytes.
func (s *Signer) Sign(payloadType string, payload []byte) Signature {
	return Signature{KeyID: s.id, Sig: ed25519.Sign(s.key, PAE(payloadType, payload))}
}

// Trust is a set of public keys whose signatures are believed. The zero
// value trusts no key.
type Trust struct {
	keys map[string]ed25519.PublicKey
}

// LoadTrust reads ed25519 public keys from PEM files (PKIX "PUBLIC KEY").
func LoadTrust(paths ...string) (*Trust, error) {
	t := &Trust{}
	for _, p := range paths {
		b, err := readKeyFile(p)
		if err != nil {
			return nil, fmt.Errorf("trusted key %s: %w", p, err)
		}
		pub, err := ParsePublicKey(b)
		if err != nil {
			return nil, fmt.Errorf("trusted key %s: %w", p, err)
		}
		t.Add(pub)
	}
	return t, nil
}

// ParsePublicKey reads an ed25519 public key from PEM (PKIX).
func ParsePublicKey(b []byte) (ed25519.PublicKey, error) {
	block, err := onePEM(b)
	if err != nil {
		return nil, err
	}
	switch block.Type {
	case "PUBLIC KEY":
	case "PRIVATE KEY", "ENCRYPTED PRIVATE KEY":
		// A private key handed to every verifier would let each of them sign.
		return nil, errors.New("this is a private key; give its public key (openssl pkey -in KEY -pubout)")
	default:
		return nil, fmt.Errorf("PEM block %q is not a PKIX public key (openssl pkey -pubout writes one)", block.Type)
	}
	k, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("PKIX public key: %w", err)
	}
	pub, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("a %T, not an ed25519 key", k)
	}
	return pub, nil
}

// Add trusts pub and returns its key ID.
func (t *Trust) Add(pub ed25519.PublicKey) string {
	if t.keys == nil {
		t.keys = map[string]ed25519.PublicKey{}
	}
	id := KeyID(pub)
	t.keys[id] = slices.Clone(pub)
	return id
}

// Len is the number of keys trusted.
func (t *Trust) Len() int {
	if t == nil {
		return 0
	}
	return len(t.keys)
}

// Trusts tells whether the key with this ID is trusted.
func (t *Trust) Trusts(keyID string) bool {
	if t == nil {
		return false
	}
	_, ok := t.keys[keyID]
	return ok
}

// Verify finds a signature among sigs that a trusted key made over
// payload as payloadType, and returns that key's ID. Without one the error
// wraps ErrUntrusted and says what the signatures were.
func (t *Trust) Verify(payloadType string, payload []byte, sigs []Signature) (string, error) {
	if len(sigs) == 0 {
		return "", fmt.Errorf("%w: it is unsigned", ErrUntrusted)
	}
	if len(sigs) > maxSignatures {
		return "", fmt.Errorf("%w: %d signatures, more than the %d stamp tries", ErrUntrusted, len(sigs), maxSignatures)
	}
	var msg []byte
	var unknown, bad []string
	for _, s := range sigs {
		pub, ok := t.key(s.KeyID)
		if !ok {
			unknown = append(unknown, printable(s.KeyID))
			continue
		}
		if msg == nil {
			msg = PAE(payloadType, payload)
		}
		if len(s.Sig) == ed25519.SignatureSize && ed25519.Verify(pub, msg, s.Sig) {
			return s.KeyID, nil
		}
		bad = append(bad, s.KeyID)
	}
	switch {
	case len(bad) > 0:
		return "", fmt.Errorf("%w: the signature by %s does not verify over it", ErrUntrusted, bad[0])
	default:
		return "", fmt.Errorf("%w: signed only by %s, which is not a trusted key", ErrUntrusted, unknown[0])
	}
}

func (t *Trust) key(id string) (ed25519.PublicKey, bool) {
	if t == nil {
		return nil, false
	}
	k, ok := t.keys[id]
	return k, ok
}

// printable keeps a key ID from a hostile source short and plain in a
// message.
func printable(s string) string {
	const max = 80
	if len(s) > max {
		s = s[:max] + "…"
	}
	return strconv.Quote(s)
}

func readKeyFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	if fi.Size() > maxKeyFile {
		return nil, fmt.Errorf("%d bytes; a PEM key is far smaller", fi.Size())
	}
	b := make([]byte, fi.Size())
	if _, err := f.ReadAt(b, 0); err != nil {
		return nil, err
	}
	return b, nil
}

// onePEM decodes the only PEM block in b.
func onePEM(b []byte) (*pem.Block, error) {
	block, rest := pem.Decode(b)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	if more, _ := pem.Decode(rest); more != nil {
		return nil, errors.New("more than one PEM block; give one key per file")
	}
	return block, nil
}
