package uki

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/disk/authenticode"
	"github.com/stamp-dev/stamp/disk/pe"
	"github.com/stamp-dev/stamp/test/harness"
)

// TestPCR11MatchesSystemdMeasure builds a UKI on Debian's systemd-stub 252
// and holds the predicted PCR 11 to systemd-measure calculate (systemd 252,
// the stub's own release) given the same sections: after the stub's
// measurements, and after the boot phases a systemd root measures. It also
// checks the sections land in ukify's order and read back as given.
func TestPCR11MatchesSystemdMeasure(t *testing.T) {
	measure := harness.Tool(t, "/usr/lib/systemd/systemd-measure")
	kit := harness.BootParts(t)
	stubBytes, err := os.ReadFile(kit.LinuxStub)
	if err != nil {
		t.Fatal(err)
	}
	stub, err := ParseStub(stubBytes)
	if err != nil {
		t.Fatal(err)
	}
	if stub.Major != 252 || stub.Arch != "amd64" || !strings.HasPrefix(stub.Version, "252.") {
		t.Fatalf("stub %+v", stub)
	}
	kernel, err := os.ReadFile(kit.Vmlinuz)
	if err != nil {
		t.Fatal(err)
	}
	parts := Parts{OSRelease: []byte("ID=stamp-test\n"), Cmdline: []byte("console=ttyS0 usrhash=00ff"),
		Linux: pe.Bytes(kernel), Initrd: pe.Bytes(bytes.Repeat([]byte{7}, 12345))}
	im, secs, err := Build(stub, parts)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range im.Sections() {
		names = append(names, s.Name)
	}
	if got := strings.Join(names, " "); got != ".text .reloc .data .dynamic .rela .dynsym .sbat .sdmagic .osrel .cmdline .initrd .linux" {
		t.Errorf("sections %s", got)
	}
	pcr, ms, err := stub.PCR11(secs)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 8 {
		t.Errorf("%d measurements, want a name and contents for each of 4 sections", len(ms))
	}
	dir := t.TempDir()
	files := map[string][]byte{"linux": kernel, "osrel": parts.OSRelease, "cmdline": parts.Cmdline, "initrd": bytes.Repeat([]byte{7}, 12345)}
	args := []string{"calculate", "--bank=sha256", "--json=short", "--phase=:", "--phase=sysinit:ready"}
	for n, b := range files {
		p := filepath.Join(dir, n)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--"+n+"="+p)
	}
	out, err := exec.Command(measure, args...).Output()
	if err != nil {
		t.Fatalf("systemd-measure: %v\n%s", err, out)
	}
	t.Logf("systemd-measure %s:\n%s", strings.Join(args, " "), out)
	var calc map[string][]struct {
		Phase string `json:"phase"`
		PCR   int    `json:"pcr"`
		Hash  string `json:"hash"`
	}
	if err := json.Unmarshal(out, &calc); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{"": hex.EncodeToString(pcr)}
	withPhases := Extend(pcr, Phases("sysinit", "ready"))
	got["sysinit:ready"] = hex.EncodeToString(withPhases)
	want := map[string]string{}
	for _, e := range calc["sha256"] {
		want[e.Phase] = e.Hash
	}
	for _, phase := range []string{"", "sysinit:ready"} {
		if got[phase] != want[phase] || want[phase] == "" {
			t.Errorf("PCR 11 after the phases %q: %s, systemd-measure says %s", phase, got[phase], want[phase])
		}
	}

	// Read back, signed: the same sections, PCR 11 and the signer.
	key := harness.NewSecureBootKey(t, "uki test", 0)
	signer, err := authenticode.LoadPEM(key.KeyPEM, key.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	b, err := im.SealBytes(signer.PE)
	if err != nil {
		t.Fatal(err)
	}
	info, err := Read(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(info.PCR11, pcr) || info.Cmdline != string(parts.Cmdline) || info.StubVersion != stub.Version || len(info.Sections) != 12 {
		t.Errorf("read back: %+v", info)
	}
	if info.Signer == nil || info.Signer.Subject.CommonName != "uki test" || info.SignatureErr != nil {
		t.Errorf("read back: signer %v, %v", info.Signer, info.SignatureErr)
	}
	changed := append([]byte(nil), b...)
	changed[0x11400+3] ^= 0x20 // in .osrel
	if info, err := Read(bytes.NewReader(changed), int64(len(changed))); err != nil || info.SignatureErr == nil || bytes.Equal(info.PCR11, pcr) {
		t.Errorf("a changed byte: %v, signature %v", err, info.SignatureErr)
	}

	// Another command line gives another PCR 11.
	parts.Cmdline = []byte("console=ttyS0 usrhash=00fe")
	_, secs2, err := Build(stub, parts)
	if err != nil {
		t.Fatal(err)
	}
	pcr2, _, err := stub.PCR11(secs2)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(pcr, pcr2) {
		t.Error("a changed .cmdline left PCR 11 as it was")
	}
}

// TestParseStubRefusals: a stub of a version stamp does not know, and a
// file that is no stub, are refused, naming why.
func TestParseStubRefusals(t *testing.T) {
	kit := harness.BootParts(t)
	stubBytes, err := os.ReadFile(kit.LinuxStub)
	if err != nil {
		t.Fatal(err)
	}
	future := bytes.Replace(stubBytes, []byte("systemd-stub 252."), []byte("systemd-stub 999."), 1)
	if _, err := ParseStub(future); err == nil || !strings.Contains(err.Error(), "systemd-stub 999.") || !strings.Contains(err.Error(), "does not know (it knows 252)") {
		t.Errorf("a stub 999: %v", err)
	}
	sdboot, err := os.ReadFile(kit.SystemdBoot)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseStub(sdboot); err == nil || !strings.Contains(err.Error(), "does not name a systemd-stub version") {
		t.Errorf("systemd-boot as a stub: %v", err)
	}
}
