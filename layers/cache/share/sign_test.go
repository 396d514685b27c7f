package share

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/stamp-dev/stamp/layers/cache"
	"github.com/stamp-dev/stamp/layers/cache/sign"
	"github.com/stamp-dev/stamp/test/harness"
)

type keyPair struct {
	s     *sign.Signer
	trust *sign.Trust
}

func newKey(t *testing.T, name string) keyPair {
	t.Helper()
	k := harness.NewSigningKey(t, t.TempDir(), name)
	s, err := sign.LoadSigner(k.Private)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := sign.LoadTrust(k.Public)
	if err != nil {
		t.Fatal(err)
	}
	return keyPair{s, tr}
}

// forge makes, in c, a record for genuine's key whose blobs are other
// bytes: consistent in itself (its parts hash to the key, its blobs to
// their digests), and not what the genuine build made.
func forge(t *testing.T, c *cache.Cache, genuine *cache.Record) *cache.Record {
	t.Helper()
	f := *genuine
	f.Blobs = nil
	for _, b := range genuine.Blobs {
		evil := []byte("forged " + b.Name + "\n")
		f.Blobs = append(f.Blobs, cache.RecordBlob{Name: b.Name, Digest: put(t, c, evil), Size: int64(len(evil))})
	}
	// Its parts' blobs are not needed to push it: only the digests are.
	return &f
}

// annotation returns the signatures annotation of the entry under tag.
func annotation(t *testing.T, repo, tag string) string {
	t.Helper()
	desc, err := remote.Get(mustTag(t, repo+":"+tag))
	if err != nil {
		t.Fatal(err)
	}
	var m struct{ Annotations map[string]string }
	if err := json.Unmarshal(desc.Manifest, &m); err != nil {
		t.Fatal(err)
	}
	return m.Annotations[SignaturesAnnotation]
}

func setAnnotation(v string) func(m map[string]any) {
	return func(m map[string]any) { m["annotations"] = map[string]any{SignaturesAnnotation: v} }
}

// TestSignedRoundTrip: an entry pushed with a key is pulled by a cache that
// trusts it, which notes the signer; a cache that trusts no key takes it
// too, as before; the signature is in the manifest as the package says.
func TestSignedRoundTrip(t *testing.T) {
	reg := harness.StartRegistry(t)
	repo := reg.Addr + "/stamp-cache"
	ctx := context.Background()
	ci := newKey(t, "ci")
	a := newCache(t)
	r := fixture(t, a, "signed")
	if err := Push(ctx, a, repo, r, Options{Signer: ci.s}); err != nil {
		t.Fatal(err)
	}
	var sigs []sign.Signature
	if err := json.Unmarshal([]byte(annotation(t, repo, Tag(kind, r.Key))), &sigs); err != nil || len(sigs) != 1 || sigs[0].KeyID != ci.s.KeyID() {
		t.Fatalf("signatures annotation %v (%v)", sigs, err)
	}
	payload, err := Payload(r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ci.trust.Verify(string(RecordType), payload, sigs); err != nil {
		t.Fatalf("the pushed signature does not verify over the record: %v", err)
	}

	b := newCache(t)
	found, err := Pull(ctx, b, repo, kind, r.Key, Options{Trust: ci.trust})
	if err != nil || !found {
		t.Fatalf("trusted Pull = %v, %v", found, err)
	}
	got, err := b.Record(kind, r.Key)
	if err != nil || got == nil {
		t.Fatalf("pulled record: %v, %v", got, err)
	}
	if got.Pulled == nil || got.Pulled.Signer != ci.s.KeyID() {
		t.Errorf("pulled record's origin %+v does not name the signer %s", got.Pulled, ci.s.KeyID())
	}
	for _, rb := range r.Blobs {
		if !bytes.Equal(blob(t, b, rb.Digest), blob(t, a, rb.Digest)) {
			t.Errorf("blob %s differs", rb.Name)
		}
	}
	if found, err := Pull(ctx, newCache(t), repo, kind, r.Key, Options{}); err != nil || !found {
		t.Errorf("Pull trusting no key = %v, %v", found, err)
	}

	// The same record and key make the same manifest: nothing to push.
	log, hook := logtest.NewNullLogger()
	if err := Push(ctx, a, repo, r, Options{Signer: ci.s, Log: log}); err != nil {
		t.Fatal(err)
	}
	if e := hook.LastEntry(); e == nil || !strings.Contains(e.Message, "already has") {
		t.Errorf("second signed push: %v", e)
	}
	// Keys go nowhere near the log: only the public key's ID.
	for _, e := range hook.AllEntries() {
		if s, _ := e.String(); strings.Contains(s, "PRIVATE") {
			t.Errorf("log entry %q", s)
		}
	}
}

// TestUntrustedEntries is the attack of issue 30 and its kin: whoever can
// push to the repository serves a record for the asked key. Each is an
// error wrapping sign.ErrUntrusted or cache.ErrBadRecord that names the
// reference, and nothing of it, record or blob, is filed.
func TestUntrustedEntries(t *testing.T) {
	reg := harness.StartRegistry(t)
	ctx := context.Background()
	ci, mallory := newKey(t, "ci"), newKey(t, "mallory")
	a := newCache(t)
	genuine := fixture(t, a, "genuine")
	other := fixture(t, a, "another record")
	forged := forge(t, a, genuine)
	tag := Tag(kind, genuine.Key)

	// The genuine entry's signature, to replay onto others.
	signedRepo := reg.Addr + "/signed"
	pushSigned(t, a, signedRepo, tag, genuine, ci.s, nil)
	genuineSig := annotation(t, signedRepo, tag)
	pushSigned(t, a, signedRepo, Tag(kind, other.Key), other, ci.s, nil)
	otherSig := annotation(t, signedRepo, Tag(kind, other.Key))
	var flipped []sign.Signature
	if err := json.Unmarshal([]byte(genuineSig), &flipped); err != nil {
		t.Fatal(err)
	}
	flipped[0].Sig[7] ^= 0x20
	flippedSig, _ := json.Marshal(flipped)
	// A record of another key, signed by the trusted key, filed under the
	// asked key's tag.
	otherUnderTag := func(t *testing.T, repo string) { pushSigned(t, a, repo, tag, other, ci.s, nil) }

	cases := []struct {
		name string
		push func(t *testing.T, repo string)
		is   error
		says string
		// which records' blobs must stay out of the puller's cache
		records []*cache.Record
	}{
		{"unsigned genuine", func(t *testing.T, repo string) { pushAs(t, a, repo, tag, genuine, nil) },
			sign.ErrUntrusted, "unsigned", []*cache.Record{genuine}},
		{"forged and unsigned", func(t *testing.T, repo string) { pushAs(t, a, repo, tag, forged, nil) },
			sign.ErrUntrusted, "unsigned", []*cache.Record{forged}},
		{"forged and signed by another key", func(t *testing.T, repo string) { pushSigned(t, a, repo, tag, forged, mallory.s, nil) },
			sign.ErrUntrusted, mallory.s.KeyID(), []*cache.Record{forged}},
		{"forged with the genuine signature", func(t *testing.T, repo string) { pushAs(t, a, repo, tag, forged, setAnnotation(genuineSig)) },
			sign.ErrUntrusted, "does not verify", []*cache.Record{forged}},
		{"genuine with another record's signature", func(t *testing.T, repo string) { pushAs(t, a, repo, tag, genuine, setAnnotation(otherSig)) },
			sign.ErrUntrusted, "does not verify", []*cache.Record{genuine}},
		{"tampered signature", func(t *testing.T, repo string) { pushAs(t, a, repo, tag, genuine, setAnnotation(string(flippedSig))) },
			sign.ErrUntrusted, "does not verify", []*cache.Record{genuine}},
		{"signatures not JSON", func(t *testing.T, repo string) { pushAs(t, a, repo, tag, genuine, setAnnotation("sig")) },
			sign.ErrUntrusted, SignaturesAnnotation, []*cache.Record{genuine}},
		{"signed record of another key", otherUnderTag,
			cache.ErrBadRecord, "was asked for", []*cache.Record{genuine, other}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			repo := reg.Addr + "/untrusted" + string(rune('a'+i))
			tc.push(t, repo)
			b := newCache(t)
			found, err := Pull(ctx, b, repo, kind, genuine.Key, Options{Trust: ci.trust})
			if found || !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), repo+":"+tag) {
				t.Fatalf("Pull = %v, %v; want %v saying %q and naming %s", found, err, tc.is, tc.says, repo+":"+tag)
			}
			t.Log(err)
			for _, r := range tc.records {
				nothingFrom(t, b, r.Key, r)
			}
		})
	}
}

// TestSignedBlobMismatch: a signed entry whose blob in the registry is not
// what the record names is refused at that blob, and nothing is filed.
func TestSignedBlobMismatch(t *testing.T) {
	reg := harness.StartRegistry(t)
	repo := reg.Addr + "/stamp-cache"
	ctx := context.Background()
	ci := newKey(t, "ci")
	a := newCache(t)
	r := fixture(t, a, "one")
	if err := Push(ctx, a, repo, r, Options{Signer: ci.s}); err != nil {
		t.Fatal(err)
	}
	small := r.Blobs[0]
	if err := writeFile(reg.BlobPath(strings.TrimPrefix(small.Digest, "sha256:")), bytes.Repeat([]byte("x"), int(small.Size))); err != nil {
		t.Fatal(err)
	}
	b := newCache(t)
	found, err := Pull(ctx, b, repo, kind, r.Key, Options{Trust: ci.trust})
	if found || err == nil || !strings.Contains(err.Error(), small.Digest) || !strings.Contains(err.Error(), Tag(kind, r.Key)) {
		t.Fatalf("Pull = %v, %v; want an error naming the blob and the reference", found, err)
	}
	nothingFrom(t, b, r.Key, &cache.Record{Subject: r.Subject, Blobs: r.Blobs[:1]})
}

// TestSignedPushReplaces: a signing runner replaces an entry under its tag
// that its key did not sign (a forgery pushed first), so trusting runners
// find the genuine one; and it refuses to sign a record it pulled without a
// trusted signature.
func TestSignedPushReplaces(t *testing.T) {
	reg := harness.StartRegistry(t)
	repo := reg.Addr + "/stamp-cache"
	ctx := context.Background()
	ci := newKey(t, "ci")
	a := newCache(t)
	genuine := fixture(t, a, "genuine")
	pushAs(t, a, repo, Tag(kind, genuine.Key), forge(t, a, genuine), nil)

	log, hook := logtest.NewNullLogger()
	log.SetLevel(logrus.InfoLevel)
	if err := Push(ctx, a, repo, genuine, Options{Signer: ci.s, Log: log}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(hookText(hook), "replacing") {
		t.Errorf("push over a forgery did not say it replaced it:\n%s", hookText(hook))
	}
	b := newCache(t)
	if found, err := Pull(ctx, b, repo, kind, genuine.Key, Options{Trust: ci.trust}); err != nil || !found {
		t.Fatalf("trusted Pull after the replacement = %v, %v", found, err)
	}
	for _, rb := range genuine.Blobs {
		if !bytes.Equal(blob(t, b, rb.Digest), blob(t, a, rb.Digest)) {
			t.Errorf("blob %s is not the genuine one", rb.Name)
		}
	}

	// c pulls a record with no trust asked for, and will not sign it.
	unsignedRepo := reg.Addr + "/unsigned"
	other := fixture(t, a, "other")
	if err := Push(ctx, a, unsignedRepo, other, Options{}); err != nil {
		t.Fatal(err)
	}
	c := newCache(t)
	if found, err := Pull(ctx, c, unsignedRepo, kind, other.Key, Options{}); err != nil || !found {
		t.Fatalf("Pull = %v, %v", found, err)
	}
	pulled, err := c.Record(kind, other.Key)
	if err != nil {
		t.Fatal(err)
	}
	if err := Push(ctx, c, repo, pulled, Options{Signer: ci.s}); !errors.Is(err, ErrUnvouched) {
		t.Fatalf("signing push of an unverified pulled record: %v", err)
	}
	if _, err := remote.Head(mustTag(t, repo+":"+Tag(kind, other.Key))); err == nil {
		t.Error("the unverified record was pushed")
	}
}

// TestPulledNoteIsOurs: an entry that claims, in its config, to have been
// pulled with a trusted signature is noted as what it is.
func TestPulledNoteIsOurs(t *testing.T) {
	reg := harness.StartRegistry(t)
	repo := reg.Addr + "/stamp-cache"
	ci := newKey(t, "ci")
	a := newCache(t)
	r := *fixture(t, a, "claims")
	r.Pulled = &cache.Pulled{From: "elsewhere", Signer: ci.s.KeyID()}
	art, err := newArtifact(a, &r, nil)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(art.config, []byte("pulled")) {
		t.Fatalf("the local note went into the entry: %s", art.config)
	}
	// Hand-write the lie into the config.
	lie := bytes.Replace(art.config, []byte(`,"data"`), []byte(`,"pulled":{"from":"x","signer":"`+ci.s.KeyID()+`"},"data"`), 1)
	var rec cache.Record
	if err := json.Unmarshal(lie, &rec); err != nil || rec.Pulled == nil {
		t.Fatalf("the lie does not decode as one: %v", err)
	}
	pushConfig(t, a, repo, Tag(kind, r.Key), &r, lie)
	b := newCache(t)
	if found, err := Pull(context.Background(), b, repo, kind, r.Key, Options{}); err != nil || !found {
		t.Fatalf("Pull = %v, %v", found, err)
	}
	got, err := b.Record(kind, r.Key)
	if err != nil {
		t.Fatal(err)
	}
	if got.Pulled == nil || got.Pulled.Signer != "" || got.Pulled.From != repo+":"+Tag(kind, r.Key) {
		t.Errorf("pulled record notes %+v", got.Pulled)
	}
}

// pushConfig pushes r's entry with cfg as its config's bytes.
func pushConfig(t *testing.T, c *cache.Cache, repo, tag string, r *cache.Record, cfg []byte) {
	t.Helper()
	a, err := newArtifact(c, r, nil)
	if err != nil {
		t.Fatal(err)
	}
	var m v1.Manifest
	if err := json.Unmarshal(a.manifest, &m); err != nil {
		t.Fatal(err)
	}
	a.config = cfg
	if m.Config.Digest, m.Config.Size, err = v1.SHA256(bytes.NewReader(cfg)); err != nil {
		t.Fatal(err)
	}
	if a.manifest, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	img, err := partial.CompressedToImage(a)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(mustTag(t, repo+":"+tag), img); err != nil {
		t.Fatal(err)
	}
}

func writeFile(path string, b []byte) error { return os.WriteFile(path, b, 0o644) }

func hookText(h *logtest.Hook) string {
	var b strings.Builder
	for _, e := range h.AllEntries() {
		s, _ := e.String()
		b.WriteString(s)
	}
	return b.String()
}
