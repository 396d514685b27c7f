package harness

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// MinbaseRequest is what the bootstrap test repository is built for: every
// Essential and Priority: required package and apt (mmdebstrap's minbase),
// and usr-is-merged, which mmdebstrap's merged-/usr hook installs.
var MinbaseRequest = []string{"?essential", "?priority(required)", "apt", "usr-is-merged"}

// MinbaseRepoFor returns a signed repository of exactly what MinbaseRequest
// brings onto an empty system, built once per machine like DebRepoFor's.
// It is shared: copy it (CopyDebRepo) before changing it.
func MinbaseRepoFor(t testing.TB) *DebRepo {
	t.Helper()
	return debRepoOf(t, [][]string{MinbaseRequest})
}

// MmdebstrapOptions say what mmdebstrap bootstraps for MmdebstrapFor.
type MmdebstrapOptions struct {
	Variant string
	Include []string
	Epoch   time.Time
}

// MmdebstrapFor returns a tarball mmdebstrap made in root mode from repo,
// the oracle a bootstrap is compared with; cached per machine by the
// repository, the options and mmdebstrap's version. It needs root.
func MmdebstrapFor(t testing.TB, repo *DebRepo, o MmdebstrapOptions) string {
	t.Helper()
	mm := Tool(t, "mmdebstrap")
	if os.Geteuid() != 0 {
		t.Fatal("mmdebstrap's oracle needs root: it runs in --mode=root")
	}
	ver, err := exec.Command(mm, "--version").Output()
	if err != nil {
		t.Fatalf("mmdebstrap --version: %v", err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\x00%d", ver, repo.Dir, o.Variant, strings.Join(o.Include, ","), o.Epoch.Unix())
	out := filepath.Join(cacheRoot(), "base", "mmdebstrap-"+hex.EncodeToString(h.Sum(nil)[:8])+".tar")
	if _, err := os.Stat(out); err == nil {
		return out
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	err = writeAtomic(out, func(w io.Writer) error {
		tmp, err := os.MkdirTemp("", "stamp-mmdebstrap-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		tarball := filepath.Join(tmp, "out.tar")
		// The merged-/usr hook lays out /bin and the rest as links into
		// /usr before anything is unpacked, as bookworm's debootstrap does
		// and as mmdebstrap's manual says to for bookworm.
		args := []string{"--mode=root", "--variant=" + o.Variant, "--quiet", "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr"}
		if len(o.Include) > 0 {
			args = append(args, "--include="+strings.Join(o.Include, ","))
		}
		// copy://, not file://: mmdebstrap's apt runs chrooted, where the
		// repository's path does not exist.
		args = append(args, repo.Suite, tarball,
			fmt.Sprintf("deb [signed-by=%s] copy://%s %s %s", repo.Keyring, repo.Dir, repo.Suite, repo.Component))
		cmd := exec.CommandContext(ctx, mm, args...)
		cmd.Env = append(os.Environ(), fmt.Sprintf("SOURCE_DATE_EPOCH=%d", o.Epoch.Unix()))
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("mmdebstrap %s: %w\n%s", strings.Join(args, " "), err, b)
		}
		f, err := os.Open(tarball)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(w, f)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// MinbaseNodeRepoFor returns a signed repository of what MinbaseRequest and
// the node's packages (NodeDebPackages) bring onto an empty system, and
// what the sealed node adds (NodeSealedPackages), built once per machine.
// It is shared: copy it (CopyDebRepo) before changing it.
func MinbaseNodeRepoFor(t testing.TB) *DebRepo {
	t.Helper()
	return debRepoOf(t, [][]string{MinbaseRequest, append([]string{"?essential", "?priority(required)", "usr-is-merged"}, NodeDebPackages...),
		NodeSealedPackages})
}

// NodeSealedPackages are what recipes/k8s-node.yaml adds from the Debian
// mirror with disk=sealed: dmsetup, which opens the verified /usr, and the
// TPM libraries systemd-pcrphase loads.
var NodeSealedPackages = []string{"dmsetup", "libtss2-esys-3.0.2-0", "libtss2-mu0", "libtss2-rc0"}

// ScriptDeb builds, under dir, a package name (Priority: optional, no
// dependencies) holding the program /usr/bin/name-tool and the postinst
// given, for tests of how maintainer scripts are handled.
func ScriptDeb(t testing.TB, dir, name, postinst string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := debSpec{name: name, version: "1.0", section: "misc", summary: "a test package",
		files:   []debFile{{path: "/usr/bin/" + name + "-tool", mode: 0o755, content: "#!/bin/sh\nexit 0\n"}},
		scripts: map[string]string{"postinst": postinst}}
	deb, err := buildDeb(ctx, s, dir)
	if err != nil {
		t.Fatal(err)
	}
	return deb
}

// StampImagePackages are what recipes/stamp-image.yaml asks for beside the
// Essential set.
var StampImagePackages = []string{"ca-certificates", "grub-common", "grub-pc-bin"}

// StampImageRepoFor returns a signed repository of what stamp's own image
// installs (the Essential set, usr-is-merged and StampImagePackages), built
// once per machine like DebRepoFor's. It is shared: copy it before changing
// it.
func StampImageRepoFor(t testing.TB) *DebRepo {
	t.Helper()
	return debRepoOf(t, [][]string{append([]string{"?essential", "usr-is-merged"}, StampImagePackages...)})
}
