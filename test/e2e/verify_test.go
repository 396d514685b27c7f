package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/stamp-dev/stamp/test/harness"
)

// rawOutputs are a GPT disk with an ESP and an ext4 root, and the same disk
// as qcow2.
const rawOutputs = `  - format: raw
    partitions:
      - {name: esp, type: esp, size: 64MiB, filesystem: vfat}
      - {name: root, type: root, size: auto, filesystem: ext4}
    boot: {loader: none}
  - {format: qcow2, from: raw}
`

// everyFormat lists an output of every format stamp writes, in each of its
// containers: both tar flavours, cpio, a raw disk and its qcow2 (plain and
// compressed), OCI as a layout directory, as an archive and as a
// containerDisk of the qcow2, and a pxe bundle (the proof recipes carry a
// stand-in kernel for it).
const everyFormat = `outputs:
  - {format: pxe}
  - {format: tar, compression: zstd}
  - {format: tar, name: plain}
  - {format: cpio, compression: zstd}
  - {format: cpio, name: initrd, compression: none}
  - {format: oci, kind: rootfs, layout: dir}
  - {format: oci, name: ociarchive, kind: rootfs, layout: archive}
` + rawOutputs + `  - {format: qcow2, name: qz, from: raw, compression: zlib}
  - {format: oci, name: cdisk, kind: containerdisk, from: qcow2}
`

// canary is file content that appears once, verbatim, in every uncompressed
// output, so a test can find its bytes and flip one.
const canary = "stamp-canary-7f3a9c1e5b-content\n"

// dpkgStatus is a small dpkg database: two installed packages and one
// removed whose configuration is left, which the SBOM must leave out.
const dpkgStatus = `Package: libfoo1
Status: install ok installed
Priority: optional
Architecture: amd64
Source: foo (1.2-3)
Version: 1:1.2-3+deb12u1
Description: a library
 with a long description

Package: gone
Status: deinstall ok config-files
Architecture: amd64
Version: 0.9-1

Package: base-files
Status: install ok installed
Architecture: amd64
Version: 12.4+deb12u5
`

// proofRecipe is a recipe named name whose customize phase writes the
// canary, a dpkg database and extra (more files items), runs the post hooks
// and writes outputs.
func proofRecipe(name, extra string, post []string, outputs string) string {
	r := fmt.Sprintf(`apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: %s
arch: amd64
epoch: 1700000000
base:
  tarball: ./base.tar.zst
customize:
  layers:
    - files:
        - {path: /etc/stamp-canary, content: %q}
        - {path: /boot/vmlinuz-6.1.0-stamp, content: "a stand-in kernel\n"}
        - {path: /var/lib/dpkg/status, from: ./dpkg/status}
%s`, name, canary, extra)
	if len(post) > 0 {
		r += "  post: [" + strings.Join(post, ", ") + "]\n"
	}
	return r + outputs
}

// proofDir lays out recipes (name -> content) with the base, the dpkg
// database and hooks in a directory uid 65534 can read.
func proofDir(t *testing.T, recipes map[string]string) string {
	t.Helper()
	dir := harness.TempDirFor65534(t)
	files := map[string]string{
		"dpkg/status": dpkgStatus,
		// The clock, as a build hook that is not reproducible would read it.
		"hooks/clock.sh": "#!/bin/sh\ndate +%s%N > \"$STAMP_ROOT/etc/now\"\n",
		// Modes from $RANDOM; three files, so that all three coming out the
		// same in both builds (1 in 2^21) cannot hide the difference.
		"hooks/mode.sh": "#!/bin/bash\nfor f in a b c; do echo $f > \"$STAMP_ROOT/etc/rnd-$f\"; " +
			"chmod $(printf %o $(( 0600 | (RANDOM & 0177) ))) \"$STAMP_ROOT/etc/rnd-$f\"; done\n",
	}
	for k, v := range recipes {
		files[k] = v
	}
	writeFiles(t, dir, files)
	copyBase(t, dir)
	return dir
}

func readSums(t *testing.T, p string) []string {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(data)), "\n")
}

func TestVerifyPassesForEveryFormat(t *testing.T) {
	dir := proofDir(t, map[string]string{"recipe.yaml": proofRecipe("proof", "", nil, everyFormat)})
	cache := filepath.Join(dir, "cache")
	vdir := filepath.Join(dir, "verify")
	r := stamp(t, dir, nil, "verify", "recipe.yaml", "--cache-dir", cache, "-o", vdir).mustSucceed(t)

	// Every line of SHA256SUMS is printed, and both builds have it.
	sumsA := readSums(t, filepath.Join(vdir, "a", "SHA256SUMS"))
	sumsB := readSums(t, filepath.Join(vdir, "b", "SHA256SUMS"))
	if strings.Join(sumsA, "\n") != strings.Join(sumsB, "\n") {
		t.Fatalf("SHA256SUMS differ although verify passed:\n%s\n--\n%s", strings.Join(sumsA, "\n"), strings.Join(sumsB, "\n"))
	}
	for _, l := range sumsA {
		if !strings.Contains(r.stdout, l+"\n") {
			t.Errorf("verify does not print %q:\n%s", l, r.stdout)
		}
	}
	for _, want := range []string{"proof.tar.zst", "proof-plain.tar", "proof.cpio.zst", "proof-initrd.cpio",
		"proof.oci/index.json", "proof-ociarchive.oci.tar", "proof.raw", "proof.qcow2", "proof-qz.qcow2", "proof-cdisk.oci/index.json", "proof.pxe/initrd.img"} {
		if !strings.Contains(strings.Join(sumsA, "\n"), "  "+want) {
			t.Errorf("SHA256SUMS lacks %s", want)
		}
	}
	for _, f := range []string{"manifest.txt", "provenance.json", "sbom.spdx.json"} {
		a, _ := os.ReadFile(filepath.Join(vdir, "a", f))
		b, _ := os.ReadFile(filepath.Join(vdir, "b", f))
		if len(a) == 0 || !bytes.Equal(a, b) {
			t.Errorf("%s differs between the builds (or is empty)", f)
		}
	}
	if harness.CanSetpriv() && !strings.Contains(r.stdout, "build b: uid 65534, umask 077") {
		t.Errorf("the second build did not run as uid 65534 with umask 077:\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, "readdir reversed") || !strings.Contains(r.stdout, "GOMAXPROCS=1") {
		t.Errorf("the second build's environment is not varied:\n%s", r.stdout)
	}

	// --against: one more build compared with the first one's sums.
	r = stamp(t, dir, nil, "verify", "recipe.yaml", "--cache-dir", cache, "--against", filepath.Join(vdir, "a", "SHA256SUMS"),
		"-o", filepath.Join(dir, "v-against")).mustSucceed(t)
	if strings.Contains(r.stdout, "different stamp build") {
		t.Errorf("the same binary is reported as a different stamp build:\n%s", r.stdout)
	}

	// An earlier build by another stamp build (another Go) whose tar came
	// out differently: verify says both.
	old := filepath.Join(dir, "old")
	if err := os.MkdirAll(old, 0o755); err != nil {
		t.Fatal(err)
	}
	prov, err := os.ReadFile(filepath.Join(vdir, "a", "provenance.json"))
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`"go": "[^"]*"`)
	if !goVersion.Match(prov) {
		t.Fatalf("provenance.json names no Go version:\n%s", prov)
	}
	prov = goVersion.ReplaceAll(prov, []byte(`"go": "go1.0"`))
	writeFiles(t, old, map[string]string{"provenance.json": string(prov)})
	var sums []string
	for _, l := range sumsA {
		if strings.HasSuffix(l, "  proof-plain.tar") {
			l = strings.Repeat("0", 64) + "  proof-plain.tar"
		}
		sums = append(sums, l)
	}
	writeFiles(t, old, map[string]string{"SHA256SUMS": strings.Join(sums, "\n") + "\n"})
	r = stamp(t, dir, nil, "verify", "recipe.yaml", "--cache-dir", cache, "--against", filepath.Join(old, "SHA256SUMS"),
		"-o", filepath.Join(dir, "v-old"))
	if r.code != 1 {
		t.Fatalf("verify --against a different build: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"different stamp build", "go: go1.0 -> go", "DIFFERS proof-plain.tar"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("verify --against does not say %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "DIFFERS proof.tar.zst") {
		t.Errorf("an output that matches is reported:\n%s", r.stdout)
	}
}

func TestVerifyNamesTheNondeterministicPathAndField(t *testing.T) {
	outputs := "outputs:\n  - {format: tar, name: plain}\n  - {format: cpio, compression: zstd}\n  - {format: oci, kind: rootfs, layout: dir}\n" + rawOutputs
	dir := proofDir(t, map[string]string{
		"clock.yaml": proofRecipe("clock", "", []string{"./hooks/clock.sh"}, outputs),
		"mode.yaml":  proofRecipe("mode", "", []string{"./hooks/mode.sh"}, outputs),
	})
	cache := filepath.Join(dir, "cache")

	r := stamp(t, dir, nil, "verify", "clock.yaml", "--cache-dir", cache, "-o", filepath.Join(dir, "v-clock"))
	if r.code != 1 {
		t.Fatalf("verify of a hook writing the clock: exit %d, want 1\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	for _, out := range []string{"clock-plain.tar (tar)", "clock.cpio.zst (cpio, zstd)", "clock.oci (oci)", "clock.raw (raw)", "clock.qcow2 (qcow2)"} {
		section := outputSection(r.stdout, out)
		if section == "" {
			t.Errorf("verify does not report %s:\n%s", out, r.stdout)
			continue
		}
		if !strings.Contains(section, "path /etc/now field content\n") {
			t.Errorf("%s: verify does not name /etc/now and content:\n%s", out, section)
		}
		if n := strings.Count(section, "    path "); n != 1 {
			t.Errorf("%s: %d changed paths named, want only /etc/now:\n%s", out, n, section)
		}
	}
	if !strings.Contains(outputSection(r.stdout, "clock-plain.tar (tar)"), "in tar member ./etc/now (data)") {
		t.Errorf("the first differing byte of the tar is not placed in /etc/now's data:\n%s", r.stdout)
	}
	// On the disks the first difference is inside the root partition, and
	// the qcow2's is placed in its guest disk.
	if !strings.Contains(outputSection(r.stdout, "clock.raw (raw)"), " in ext4 data of /etc/now (inode ") {
		t.Errorf("the first differing byte of the raw disk is not placed in /etc/now's data:\n%s", r.stdout)
	}
	if !regexp.MustCompile(`offset \d+ in the guest disk\) in ext4 data of /etc/now `).MatchString(outputSection(r.stdout, "clock.qcow2 (qcow2)")) {
		t.Errorf("the first differing byte of the qcow2 is not placed in its guest disk:\n%s", r.stdout)
	}
	if !strings.Contains(r.stderr, "outputs differ") {
		t.Errorf("stderr does not say outputs differ:\n%s", r.stderr)
	}

	r = stamp(t, dir, nil, "verify", "mode.yaml", "--cache-dir", cache, "-o", filepath.Join(dir, "v-mode"))
	if r.code != 1 {
		t.Fatalf("verify of a hook chmodding from $RANDOM: exit %d, want 1\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	tarSection := outputSection(r.stdout, "mode-plain.tar (tar)")
	named := regexp.MustCompile(`path /etc/rnd-[abc] field (\S+)\n`).FindAllStringSubmatch(tarSection, -1)
	if len(named) == 0 {
		t.Fatalf("verify names none of /etc/rnd-{a,b,c}:\n%s", r.stdout)
	}
	for _, m := range named {
		if m[1] != "mode" {
			t.Errorf("field %q named, want mode:\n%s", m[1], tarSection)
		}
	}
}

// outputSection is the part of verify's report about one differing output.
func outputSection(report, what string) string {
	i := strings.Index(report, "DIFFERS "+what)
	if i < 0 {
		return ""
	}
	rest := report[i+1:]
	if j := regexp.MustCompile(`\n(DIFFERS|#) `).FindStringIndex(rest); j != nil {
		rest = rest[:j[0]+1]
	}
	return "D" + rest
}

func compileSchema(t *testing.T, name string) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	sch, err := c.Compile(filepath.Join("testdata", "schemas", name))
	if err != nil {
		t.Fatalf("schema %s: %v", name, err)
	}
	return sch
}

func validate(sch *jsonschema.Schema, data []byte) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return err
	}
	return sch.Validate(inst)
}

func TestProvenanceAndSBOM(t *testing.T) {
	dir := proofDir(t, map[string]string{"recipe.yaml": proofRecipe("prov", "", []string{"./hooks/clock.sh"},
		"outputs:\n  - {format: tar, compression: zstd}\n  - {format: oci, kind: rootfs, layout: dir}\n")})
	// The clock hook makes the tree differ between builds; the documents
	// must still be well formed, and identical when the tree is.
	out1, out2 := filepath.Join(dir, "out1"), filepath.Join(dir, "out2")
	stamp(t, dir, nil, "build", "recipe.yaml", "-o", out1, "--cache-dir", filepath.Join(dir, "c1")).mustSucceed(t)
	stamp(t, dir, nil, "build", "recipe.yaml", "-o", out2, "--cache-dir", filepath.Join(dir, "c2")).mustSucceed(t)

	slsa := compileSchema(t, "slsa-provenance-v1.json")
	intoto := compileSchema(t, "in-toto-statement-v1.json")
	spdx := compileSchema(t, "spdx-2.3-subset.json")
	prov, err := os.ReadFile(filepath.Join(out1, "provenance.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := validate(intoto, prov); err != nil {
		t.Errorf("provenance.json is not an in-toto Statement v1: %v", err)
	}
	if err := validate(slsa, prov); err != nil {
		t.Errorf("provenance.json is not SLSA Provenance v1: %v", err)
	}
	// The schemas can fail: a statement without a builder id does not pass.
	broken := bytes.Replace(prov, []byte(`"id": "https://`), []byte(`"notid": "https://`), 1)
	if validate(slsa, broken) == nil {
		t.Error("the SLSA schema accepts provenance without runDetails.builder.id")
	}

	var st struct {
		Subject []struct {
			Name   string
			Digest map[string]string
		}
		Predicate struct {
			BuildDefinition struct {
				ExternalParameters   map[string]any
				ResolvedDependencies []struct {
					Name, URI string
					Digest    map[string]string
				}
			}
			RunDetails struct {
				Builder struct {
					ID      string
					Version map[string]string
				}
				Byproducts []struct {
					Name   string
					Digest map[string]string
				}
			}
		}
	}
	if err := json.Unmarshal(prov, &st); err != nil {
		t.Fatal(err)
	}
	var subjects []string
	for _, s := range st.Subject {
		subjects = append(subjects, s.Digest["sha256"]+"  "+s.Name)
	}
	if got, want := strings.Join(subjects, "\n"), strings.Join(readSums(t, filepath.Join(out1, "SHA256SUMS")), "\n"); got != want {
		t.Errorf("subjects are not SHA256SUMS:\n%s\n--\n%s", got, want)
	}
	deps := map[string]string{}
	for _, d := range st.Predicate.BuildDefinition.ResolvedDependencies {
		deps[d.URI] = d.Digest["sha256"]
	}
	if deps["base.tar.zst"] != fileSHA256(t, filepath.Join(dir, "base.tar.zst")) {
		t.Errorf("resolvedDependencies do not name base.tar.zst with its digest: %v", deps)
	}
	if deps["hooks/clock.sh"] != fileSHA256(t, filepath.Join(dir, "hooks", "clock.sh")) {
		t.Errorf("resolvedDependencies do not name the hook with its digest: %v", deps)
	}
	rec, _ := st.Predicate.BuildDefinition.ExternalParameters["recipe"].(map[string]any)
	if d, _ := rec["digest"].(map[string]any); d["sha256"] != fileSHA256(t, filepath.Join(dir, "recipe.yaml")) {
		t.Errorf("externalParameters.recipe does not carry the recipe's digest: %v", rec)
	}
	if v := st.Predicate.RunDetails.Builder.Version; v["go"] == "" || v["stamp"] == "" || v["module:github.com/klauspost/compress"] == "" {
		t.Errorf("builder.version lacks stamp, Go or dependency versions: %v", v)
	}
	if bytes.Contains(prov, []byte("startedOn")) || bytes.Contains(prov, []byte("finishedOn")) {
		t.Error("provenance.json holds wall-clock times")
	}

	sbom, err := os.ReadFile(filepath.Join(out1, "sbom.spdx.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := validate(spdx, sbom); err != nil {
		t.Errorf("sbom.spdx.json is not SPDX 2.3: %v", err)
	}
	var doc struct {
		DocumentNamespace string
		CreationInfo      struct{ Created string }
		Packages          []struct {
			Name, VersionInfo string
			ExternalRefs      []struct{ ReferenceLocator string }
		}
	}
	if err := json.Unmarshal(sbom, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.CreationInfo.Created != "2023-11-14T22:13:20Z" {
		t.Errorf("created is %q, want the epoch", doc.CreationInfo.Created)
	}
	manifest, err := os.ReadFile(filepath.Join(out1, "manifest.txt"))
	if err != nil {
		t.Fatal(err)
	}
	tree := regexp.MustCompile(`# tree sha256:([0-9a-f]{64})`).FindSubmatch(manifest)
	if tree == nil || doc.DocumentNamespace != "https://stamp.dev/spdx/prov-"+string(tree[1]) {
		t.Errorf("documentNamespace %q does not derive from the tree digest", doc.DocumentNamespace)
	}
	versions := map[string]string{}
	for _, p := range doc.Packages {
		versions[p.Name] = p.VersionInfo
	}
	if versions["libfoo1"] != "1:1.2-3+deb12u1" || versions["base-files"] != "12.4+deb12u5" {
		t.Errorf("installed packages are not listed with their versions: %v", versions)
	}
	if _, ok := versions["gone"]; ok {
		t.Error("a removed package is listed")
	}
	if !bytes.Contains(sbom, []byte(`pkg:deb/debian/libfoo1@1%3A1.2-3+deb12u1?arch=amd64`)) {
		t.Errorf("no package URL for libfoo1:\n%s", sbom)
	}

	// Without the clock hook the tree is the same, and so are the documents.
	writeFiles(t, dir, map[string]string{"same.yaml": proofRecipe("prov", "", nil,
		"outputs:\n  - {format: tar, compression: zstd}\n  - {format: oci, kind: rootfs, layout: dir}\n")})
	out3, out4 := filepath.Join(dir, "out3"), filepath.Join(dir, "out4")
	stamp(t, dir, nil, "build", "same.yaml", "-o", out3, "--cache-dir", filepath.Join(dir, "c1")).mustSucceed(t)
	work := filepath.Join(dir, "another", "work", "directory")
	os.MkdirAll(work, 0o755)
	stamp(t, dir, []string{"TZ=America/St_Johns"}, "build", "same.yaml", "-o", out4, "--cache-dir", filepath.Join(dir, "c2"), "--work-dir", work).mustSucceed(t)
	for _, f := range []string{"provenance.json", "sbom.spdx.json"} {
		a, _ := os.ReadFile(filepath.Join(out3, f))
		b, _ := os.ReadFile(filepath.Join(out4, f))
		if len(a) == 0 || !bytes.Equal(a, b) {
			t.Errorf("%s differs between two builds of the same recipe", f)
		}
	}
	a, _ := os.ReadFile(filepath.Join(out1, "sbom.spdx.json"))
	b, _ := os.ReadFile(filepath.Join(out2, "sbom.spdx.json"))
	if bytes.Equal(a, b) {
		t.Error("the SBOMs of two different trees are identical: the namespace does not follow the tree")
	}
}

func fileSHA256(t *testing.T, p string) string {
	t.Helper()
	out, err := exec.Command("sha256sum", p).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(out))[0]
}

// flipCanary flips one byte of the canary's content inside the file at p,
// with dd, as someone tampering with an image would.
func flipCanary(t *testing.T, p string) {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	// Disk images are large: search them in chunks that overlap by the
	// canary's length.
	var found []int64
	buf := make([]byte, 8<<20)
	var base int64
	for {
		n, err := f.ReadAt(buf, base)
		for i := 0; ; {
			j := bytes.Index(buf[i:n], []byte(canary))
			if j < 0 {
				break
			}
			if at := base + int64(i+j); len(found) == 0 || found[len(found)-1] != at {
				found = append(found, at)
			}
			i += j + 1
		}
		if err != nil || n < len(buf) {
			break
		}
		base += int64(n - len(canary))
	}
	f.Close()
	if len(found) != 1 {
		t.Fatalf("%s: the canary is there %d times, want once", p, len(found))
	}
	off := found[0] + 7 // inside "canary"
	b := make([]byte, 1)
	if f, err = os.Open(p); err != nil {
		t.Fatal(err)
	}
	f.ReadAt(b, off)
	f.Close()
	cmd := exec.Command("dd", "of="+p, "bs=1", fmt.Sprintf("seek=%d", off), "count=1", "conv=notrunc", "status=none")
	cmd.Stdin = bytes.NewReader([]byte{b[0] ^ 0x20})
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("dd: %v\n%s", err, out)
	}
}

// flipMiddle flips one bit of the byte in the middle of the file p.
func flipMiddle(t *testing.T, p string) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, fi.Size()/2); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x20
	if _, err := f.WriteAt(b, fi.Size()/2); err != nil {
		t.Fatal(err)
	}
}

func TestInspectCheck(t *testing.T) {
	harness.RequireTools(t, "dd", "sha256sum")
	dir := proofDir(t, map[string]string{"recipe.yaml": proofRecipe("insp", "", nil, everyFormat)})
	out := filepath.Join(dir, "out")
	stamp(t, dir, nil, "build", "recipe.yaml", "-o", out, "--cache-dir", filepath.Join(dir, "cache")).mustSucceed(t)

	for _, tc := range []struct{ file, format string }{
		{"insp.tar.zst", "tar (zstd)"}, {"insp-plain.tar", "tar"}, {"insp.cpio.zst", "cpio (zstd)"},
		{"insp-initrd.cpio", "cpio"}, {"insp.oci", "oci"}, {"insp-ociarchive.oci.tar", "oci"},
		{"insp.raw", "raw"}, {"insp.qcow2", "qcow2"}, {"insp-cdisk.oci", "oci"}, {"insp.pxe", "pxe (zstd)"},
		{"insp-qz.qcow2", "qcow2"},
	} {
		p := filepath.Join(out, tc.file)
		r := stamp(t, dir, nil, "inspect", p).mustSucceed(t)
		for _, want := range []string{"format:       " + tc.format + ",", "record:       /usr/lib/stamp/manifest.json",
			"(the image's entries give the same digest)", "base.tarball tarball base.tar.zst sha256:"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("inspect %s does not print %q:\n%s", tc.file, want, r.stdout)
			}
		}
		r = stamp(t, dir, nil, "inspect", "--check", p).mustSucceed(t)
		if !strings.Contains(r.stdout, "every file matches the embedded record") {
			t.Errorf("inspect --check %s:\n%s", tc.file, r.stdout)
		}
	}

	// One byte of one file's data flipped in each uncompressed output.
	r := stamp(t, dir, nil, "inspect", filepath.Join(out, "insp.raw")).mustSucceed(t)
	for _, want := range []string{"1 esp ", "2 root ", "filesystem:   ext4 on partition 2", "filesystem:   vfat on partition 1", "hash-seed: "} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("inspect of the raw disk does not show %q:\n%s", want, r.stdout)
		}
	}
	for _, file := range []string{"insp-plain.tar", "insp-initrd.cpio", "insp-ociarchive.oci.tar", "insp.raw", "insp.qcow2"} {
		p := filepath.Join(out, file)
		if file == "insp-ociarchive.oci.tar" {
			// The layer is gzip, so the canary's bytes are not there to
			// find; the layer blob is nearly all of the archive, so its
			// middle byte is the layer's. The layer no longer hashes to
			// its digest: the OCI reader refuses the image before any
			// file is compared.
			flipMiddle(t, p)
			stamp(t, dir, nil, "inspect", "--check", p).mustFail(t, 1, "does not match", "blobs/sha256/")
			continue
		}
		flipCanary(t, p)
		r := stamp(t, dir, nil, "inspect", "--check", p)
		r.mustFail(t, 1, "/etc/stamp-canary: content: sha256 ")
		if n := strings.Count(r.stderr, "mismatch:"); n != 1 {
			t.Errorf("inspect --check %s names %d mismatches, want 1:\n%s", file, n, r.stderr)
		}
	}
}

func TestDiffNamesExactlyTheChangedFile(t *testing.T) {
	outputs := "outputs:\n  - {format: tar, compression: zstd}\n  - {format: tar, name: plain}\n  - {format: cpio, compression: gzip}\n  - {format: oci, kind: rootfs, layout: dir}\n" + rawOutputs
	dir := proofDir(t, map[string]string{
		"one.yaml": proofRecipe("node", "        - {path: /etc/motd, content: \"one\\n\"}\n", nil, outputs),
		"two.yaml": proofRecipe("node", "        - {path: /etc/motd, content: \"two\\n\"}\n", nil, outputs),
	})
	cache := filepath.Join(dir, "cache")
	one, two := filepath.Join(dir, "one"), filepath.Join(dir, "two")
	stamp(t, dir, nil, "build", "one.yaml", "-o", one, "--cache-dir", cache).mustSucceed(t)
	stamp(t, dir, nil, "build", "two.yaml", "-o", two, "--cache-dir", cache).mustSucceed(t)

	for _, pair := range [][2]string{
		{"one/node-plain.tar", "two/node-plain.tar"},
		{"one/node.tar.zst", "two/node.cpio.gz"}, // across formats
		{"one/node.oci", "two/node-plain.tar"},
		{"one/node.raw", "two/node-plain.tar"}, // a disk against a tar of the same tree
		{"one/node.qcow2", "two/node.raw"},
	} {
		r := stamp(t, dir, nil, "diff", pair[0], pair[1])
		if r.code != 1 {
			t.Fatalf("diff %s %s: exit %d, want 1\n%s\n%s", pair[0], pair[1], r.code, r.stdout, r.stderr)
		}
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if len(lines) != 1 || !strings.HasPrefix(lines[0], "changed /etc/motd: content (4 bytes sha256 ") {
			t.Errorf("diff %s %s lists:\n%s\nwant exactly /etc/motd's content", pair[0], pair[1], r.stdout)
		}
	}
	// The record differs too, but only when asked for.
	r := stamp(t, dir, nil, "diff", "--include-record", "one/node-plain.tar", "two/node-plain.tar")
	if r.code != 1 || !strings.Contains(r.stdout, "changed /usr/lib/stamp/manifest.json: content") {
		t.Errorf("diff --include-record does not show the record:\n%s", r.stdout)
	}
	// The same tree in every format reads back the same.
	for _, other := range []string{"one/node-plain.tar", "one/node.cpio.gz", "one/node.oci", "one/node.raw", "one/node.qcow2"} {
		stamp(t, dir, nil, "diff", "one/node.tar.zst", other).mustSucceed(t)
	}
}

// TestVerifyLendsNobodyTheCache: a cache uid 65534 cannot reach (root's,
// under a 0700 directory) is lent to the second build as hard links.
func TestVerifyLendsNobodyTheCache(t *testing.T) {
	harness.RequireSetpriv(t)
	dir := proofDir(t, map[string]string{"recipe.yaml": proofRecipe("lend", "", nil, "outputs:\n  - {format: tar, name: plain}\n")})
	private := filepath.Join(dir, "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	vdir := filepath.Join(dir, "verify")
	r := stamp(t, dir, nil, "verify", "recipe.yaml", "--cache-dir", filepath.Join(private, "cache"), "-o", vdir).mustSucceed(t)
	if !strings.Contains(r.stderr, "cannot read the cache") {
		t.Errorf("verify does not say it lends the cache:\n%s", r.stderr)
	}
	blobs, err := filepath.Glob(filepath.Join(vdir, "cache-b", "blobs", "sha256", "*"))
	if err != nil || len(blobs) == 0 {
		t.Fatalf("no blobs lent to the second build: %v %v", blobs, err)
	}
}

// TestOutputsDoNotDependOnTheRecipeLocation: the same recipe checked out in
// two places, with host files and a hook, gives the same bytes, provenance
// and SBOM: origins and dependencies name host files relative to the recipe.
func TestOutputsDoNotDependOnTheRecipeLocation(t *testing.T) {
	recipe := proofRecipe("where", "        - {path: /etc/where/, from: ./dpkg/}\n", []string{"./hooks/stable.sh"},
		"outputs:\n  - {format: tar, name: plain}\n")
	hook := map[string]string{"recipe.yaml": recipe, "hooks/stable.sh": "#!/bin/sh\necho stable > \"$STAMP_ROOT/etc/stable\"\n"}
	var outs []string
	for i := range 2 {
		dir := proofDir(t, hook)
		out := filepath.Join(dir, "out")
		stamp(t, dir, nil, "build", "recipe.yaml", "-o", out, "--cache-dir", filepath.Join(dir, "cache")).mustSucceed(t)
		outs = append(outs, out)
		if i == 0 {
			rec, err := exec.Command("tar", "-xOf", filepath.Join(out, "where-plain.tar"), "./usr/lib/stamp/manifest.json").Output()
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(rec, []byte(dir)) {
				t.Errorf("the embedded record names the recipe's directory %s", dir)
			}
		}
	}
	for _, f := range []string{"SHA256SUMS", "manifest.txt", "provenance.json", "sbom.spdx.json"} {
		a, _ := os.ReadFile(filepath.Join(outs[0], f))
		b, _ := os.ReadFile(filepath.Join(outs[1], f))
		if len(a) == 0 || !bytes.Equal(a, b) {
			t.Errorf("%s differs between two checkouts of the same recipe", f)
		}
	}
}
