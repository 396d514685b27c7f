package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/stamp-dev/stamp/layers/cache"
	"github.com/stamp-dev/stamp/layers/cache/share"
	"github.com/stamp-dev/stamp/layers/cache/sign"
	"github.com/stamp-dev/stamp/test/harness"
)

// stampCachedAs65534 is stampCached as uid 65534: a build that may take
// what its cache holds.
func stampCachedAs65534(t *testing.T, dir string, args ...string) result {
	t.Helper()
	harness.RequireSetpriv(t)
	cmd := exec.Command(stampBin, args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + dir}
	return runCmd(t, harness.Unprivileged(cmd))
}

// records reads every record a runner's cache files, sorted by kind and
// subject.
func records(t *testing.T, cacheDir string) []*cache.Record {
	t.Helper()
	var out []*cache.Record
	kinds, err := os.ReadDir(filepath.Join(cacheDir, "records"))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range kinds {
		files, err := os.ReadDir(filepath.Join(cacheDir, "records", k.Name()))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if f.IsDir() {
				continue // last/
			}
			b, err := os.ReadFile(filepath.Join(cacheDir, "records", k.Name(), f.Name()))
			if err != nil {
				t.Fatal(err)
			}
			var r cache.Record
			if err := json.Unmarshal(b, &r); err != nil {
				t.Fatal(err)
			}
			out = append(out, &r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Kind+out[i].Subject < out[j].Kind+out[j].Subject })
	return out
}

// rawManifest is an entry's manifest put back as edited.
type rawManifest []byte

func (m rawManifest) RawManifest() ([]byte, error)        { return m, nil }
func (m rawManifest) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }

// editSignatures rewrites the signatures annotation of the entry at ref.
func editSignatures(t *testing.T, ref string, edit func(sigs string) string) {
	t.Helper()
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Get(tag)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(desc.Manifest, &m); err != nil {
		t.Fatal(err)
	}
	old, _ := m["annotations"].(map[string]any)[share.SignaturesAnnotation].(string)
	m["annotations"] = map[string]any{share.SignaturesAnnotation: edit(old)}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Put(tag, rawManifest(b)); err != nil {
		t.Fatal(err)
	}
}

func signatures(t *testing.T, ref string) string {
	t.Helper()
	var got string
	editSignatures(t, ref, func(s string) string { got = s; return s })
	return got
}

// TestSignedSharedCache is issue 30's attack on the shared cache, and the
// defence. A runner signs what it shares; whoever else can push to the
// repository serves records for the same keys whose outputs are other bytes
// but consistent in themselves. A runner that trusts no key takes them (the
// attack is real); a runner that trusts the signer's key, as uid 65534,
// takes none: each is a warning naming the reference and a miss, its cache
// holds nothing of them, and it builds the same bytes as the signer. A
// runner whose local cache holds records pulled unverified does not believe
// them under --cache-trust, and does not sign them for others.
func TestSignedSharedCache(t *testing.T) {
	reg := harness.StartRegistry(t)
	ref, forgeries, laundered := reg.Addr+"/stamp-cache", reg.Addr+"/forged", reg.Addr+"/laundered"
	dir := proofDir(t, map[string]string{"recipe.yaml": proofRecipe("e2e-signed", "", nil, "outputs:\n"+rawOutputs+"  - {format: tar, name: rootfs}\n")})
	ci := harness.NewSigningKey(t, dir, "ci")
	mallory := harness.NewSigningKey(t, dir, "mallory")
	runner := func(run func(*testing.T, string, ...string) result, name string, extra ...string) result {
		t.Helper()
		args := append([]string{"build", "recipe.yaml", "-o", filepath.Join(dir, name), "--cache-dir", filepath.Join(dir, name+"-cache"),
			"--work-dir", dir}, extra...)
		r := run(t, dir, args...)
		if r.code != 0 {
			t.Fatalf("runner %s: exit %d\n%s", name, r.code, lastLines(r.stderr, 30))
		}
		return r
	}
	asRoot := func(t *testing.T, dir string, args ...string) result { return stampCached(t, dir, nil, args...) }
	privateKey, err := os.ReadFile(ci.Private)
	if err != nil {
		t.Fatal(err)
	}
	keyLines := strings.Split(strings.TrimSpace(string(privateKey)), "\n")

	first := runner(asRoot, "first", "--cache-to", ref, "--cache-sign", ci.Private)
	if !strings.Contains(first.stderr, "pushed shared cache entry") {
		t.Fatalf("first runner pushed nothing:\n%s", lastLines(first.stderr, 30))
	}
	genuine := records(t, filepath.Join(dir, "first-cache"))

	// Mallory's entries: each record of the first runner, its output files
	// replaced by others, in four ways.
	ctx := context.Background()
	mc, err := cache.Open(filepath.Join(dir, "mallory-cache"), cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	ms, err := sign.LoadSigner(mallory.Private)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := sign.LoadSigner(ci.Private)
	if err != nil {
		t.Fatal(err)
	}
	var forged []string // digests of the forged files
	forge := func(r *cache.Record) *cache.Record {
		f := *r
		f.Blobs = nil
		for _, b := range r.Blobs {
			p := filepath.Join(dir, "first-cache", "blobs", "sha256", strings.TrimPrefix(b.Digest, "sha256:"))
			if _, err := mc.Import(ctx, p); err != nil {
				t.Fatal(err)
			}
			if r.Kind == "output" && strings.HasPrefix(b.Name, "e2e-signed") {
				evil := []byte("a backdoored " + b.Name + "\n")
				d, err := mc.Put(ctx, bytes.NewReader(evil), "")
				if err != nil {
					t.Fatal(err)
				}
				forged = append(forged, d)
				b = cache.RecordBlob{Name: b.Name, Digest: d, Size: int64(len(evil))}
			}
			f.Blobs = append(f.Blobs, b)
		}
		return &f
	}
	pushed := 0
	push := func(r *cache.Record, s *sign.Signer) string {
		pushed++
		if err := share.Push(ctx, mc, forgeries, r, share.Options{Signer: s}); err != nil {
			t.Fatal(err)
		}
		return forgeries + ":" + share.Tag(r.Kind, r.Key)
	}
	var outputs int
	for _, r := range genuine {
		switch {
		case r.Kind == "sealed":
			// The genuine record with a bit of its signature flipped.
			at := push(forge(r), cs)
			editSignatures(t, at, func(s string) string {
				var sigs []sign.Signature
				if err := json.Unmarshal([]byte(s), &sigs); err != nil {
					t.Fatal(err)
				}
				sigs[0].Sig[3] ^= 1
				b, _ := json.Marshal(sigs)
				return string(b)
			})
		case r.Kind == "output":
			switch outputs % 3 {
			case 0: // unsigned
				push(forge(r), nil)
			case 1: // signed by a key nobody trusts
				push(forge(r), ms)
			case 2: // carrying the genuine entry's signature
				genuineSig := signatures(t, ref+":"+share.Tag(r.Kind, r.Key))
				editSignatures(t, push(forge(r), ms), func(string) string { return genuineSig })
			}
			outputs++
		}
	}
	if outputs != 3 || len(forged) < 3 {
		t.Fatalf("%d output records, %d forged files; the recipe makes three outputs", outputs, len(forged))
	}

	// A runner that trusts no key takes the forgeries, and builds nothing;
	// asked to sign for others, it signs none of them.
	gullible := runner(asRoot, "gullible", "--cache-from", forgeries, "--cache-to", laundered, "--cache-sign", ci.Private)
	if phaseWork(gullible.stderr) {
		t.Fatalf("the forged entries were not taken by a runner that trusts no key:\n%s", lastLines(gullible.stderr, 30))
	}
	if got := fileSHA256(t, filepath.Join(dir, "gullible", "e2e-signed.raw")); got == fileSHA256(t, filepath.Join(dir, "first", "e2e-signed.raw")) {
		t.Fatal("the forged raw disk was not what the gullible runner wrote: the attack does not stand")
	}
	if !strings.Contains(gullible.stderr, "not sharing the output record") || strings.Contains(gullible.stderr, "pushed shared cache entry") {
		t.Fatalf("a runner signed records it pulled unverified:\n%s", lastLines(gullible.stderr, 30))
	}

	// The trusting runner, as uid 65534: four warnings, a build, the
	// signer's bytes, nothing of Mallory's in its cache.
	trusting := runner(stampCachedAs65534, "trusting", "--cache-from", forgeries, "--cache-trust", ci.Public)
	if !phaseWork(trusting.stderr) {
		t.Fatalf("the trusting runner built nothing:\n%s", lastLines(trusting.stderr, 30))
	}
	var warned []string
	for _, l := range strings.Split(trusting.stderr, "\n") {
		if strings.Contains(l, "level=warning") && strings.Contains(l, "ignoring the shared") {
			if !strings.Contains(l, forgeries+":") {
				t.Errorf("a warning does not name the reference: %s", l)
			}
			warned = append(warned, l)
		}
	}
	for _, says := range []string{"unsigned", "which is not a trusted key", "does not verify"} {
		if !strings.Contains(strings.Join(warned, "\n"), says) {
			t.Errorf("no warning says %q", says)
		}
	}
	if len(warned) != pushed {
		t.Errorf("%d warnings for %d forged entries:\n%s", len(warned), pushed, strings.Join(warned, "\n"))
	}
	sameOutputDirs(t, filepath.Join(dir, "first"), filepath.Join(dir, "trusting"))
	for _, d := range forged {
		if _, err := os.Stat(filepath.Join(dir, "trusting-cache", "blobs", "sha256", strings.TrimPrefix(d, "sha256:"))); err == nil {
			t.Errorf("the trusting runner's cache holds the forged file %s", d)
		}
	}
	for _, r := range records(t, filepath.Join(dir, "trusting-cache")) {
		if r.Pulled != nil {
			t.Errorf("the trusting runner filed the %s record of %s pulled from %s", r.Kind, r.Subject, r.Pulled.From)
		}
	}

	// The signer's own entries, trusted, are a whole build from the cache.
	signed := runner(stampCachedAs65534, "signed", "--cache-from", ref, "--cache-trust", ci.Public)
	if phaseWork(signed.stderr) || !strings.Contains(signed.stderr, "no phase runs") || !strings.Contains(signed.stderr, `signer="sha256:`) {
		t.Fatalf("the signed entries were not taken:\n%s", lastLines(signed.stderr, 30))
	}
	sameOutputDirs(t, filepath.Join(dir, "first"), filepath.Join(dir, "signed"))

	// The gullible runner's cache, under --cache-trust: what it pulled
	// unverified is not believed, and the signed entries replace it.
	cured := runner(asRoot, "gullible", "--cache-from", ref, "--cache-trust", ci.Public)
	if !strings.Contains(cured.stderr, "pulled from "+forgeries) || !strings.Contains(cured.stderr, "without a signature") || phaseWork(cured.stderr) {
		t.Fatalf("the records pulled unverified were believed, or the signed ones not taken:\n%s", lastLines(cured.stderr, 30))
	}
	sameOutputDirs(t, filepath.Join(dir, "first"), filepath.Join(dir, "gullible"))

	// Nothing of the private key in any log, output or cache.
	for _, r := range []result{first, gullible, trusting, signed, cured} {
		for _, l := range keyLines[1 : len(keyLines)-1] {
			if strings.Contains(r.stderr+r.stdout, l) {
				t.Errorf("a log holds the private key:\n%s", r.stderr)
			}
		}
	}
	out, err := exec.Command("grep", "-rlF", keyLines[1], dir).Output()
	if len(out) > 0 {
		for _, f := range strings.Fields(string(out)) {
			if f != ci.Private {
				t.Errorf("%s holds the private key", f)
			}
		}
	} else if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("grep: %v", err)
	}
}
