package harness

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// NodeBaseTarball returns NodeBaseFor's base and its dpkg database merged
// into one tarball, as a node recipe's base.tarball takes it (what
// mmdebstrap --variant=minbase makes), built once per machine.
func NodeBaseTarball(t testing.TB) string {
	t.Helper()
	base := NodeBaseFor(t)
	out := strings.TrimSuffix(base.DB, ".tar") + ".merged.tar.zst"
	if _, err := os.Stat(out); err == nil {
		return out
	}
	unlock, err := lockFile(filepath.Join(cacheRoot(), "base", ".lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	if _, err := os.Stat(out); err == nil {
		return out
	}
	err = writeAtomic(out, func(w io.Writer) error {
		zw, err := compressWriter(w, out)
		if err != nil {
			return err
		}
		tw := tar.NewWriter(zw)
		for _, src := range []string{base.Tarball, base.DB} {
			if err := copyTarEntries(tw, src); err != nil {
				return fmt.Errorf("%s: %w", src, err)
			}
		}
		if err := tw.Close(); err != nil {
			return err
		}
		return zw.Close()
	})
	if err != nil {
		t.Fatalf("node base: %v", err)
	}
	return out
}

// copyTarEntries copies every entry of the (possibly compressed) tarball
// src into tw; a later entry for the same path wins when it is unpacked.
func copyTarEntries(tw *tar.Writer, src string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := decompressReader(f)
	if err != nil {
		return err
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
}

// KubeadmImageNames asks kubeadm which images it wants when the cluster's
// imageRepository is repo: every control-plane image as repo/NAME:TAG,
// coredns included (kubeadm keeps coredns/coredns only for its default
// repository).
func KubeadmImageNames(ctx context.Context, bins *K8sBinaries, repo string) ([]string, error) {
	home, err := os.MkdirTemp("", "stamp-kubeadm-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(home)
	cmd := exec.CommandContext(ctx, bins.Path("kubeadm"), "config", "images", "list",
		"--kubernetes-version", K8sVersion, "--image-repository", repo)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + home}
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("kubeadm config images list --image-repository %s: %w", repo, err)
	}
	return strings.Fields(string(out)), nil
}

// PushK8sMirror pushes every image to reg under the name kubeadm asks for
// when its imageRepository is reg.Addr (a mirror, as air-gapped sites
// keep one), and returns the pushed references by that name, each
// "NAME@sha256:…".
func PushK8sMirror(ctx context.Context, stampBin string, bins *K8sBinaries, images []K8sImage, reg *Registry) (map[string]string, error) {
	names, err := KubeadmImageNames(ctx, bins, reg.Addr)
	if err != nil {
		return nil, err
	}
	refs := map[string]string{}
	for _, name := range names {
		var im *K8sImage
		for i := range images {
			// coredns/coredns:v1.11.3 is mirrored as coredns:v1.11.3.
			if strings.HasSuffix(name, "/"+filepath.Base(images[i].Repository)+":"+images[i].Tag) {
				im = &images[i]
			}
		}
		if im == nil {
			return nil, fmt.Errorf("kubeadm asks for %s, which no test image is", name)
		}
		cmd := exec.CommandContext(ctx, stampBin, "push", im.Layout, name, "--insecure")
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("stamp push %s %s: %w\n%s", im.Layout, name, err, out)
		}
		refs[name] = name + "@" + im.Digest
	}
	return refs, nil
}

// CIDATASeed writes a NoCloud seed, a FAT image labelled CIDATA holding
// user-data and meta-data, as cloud-init finds it on a second disk. The
// host's mkfs.vfat and mcopy make it: it is the test's input, not an
// output of stamp.
func CIDATASeed(t testing.TB, dir, userData, metaData string) string {
	t.Helper()
	return CIDATASeedFiles(t, dir, map[string]string{"user-data": userData, "meta-data": metaData})
}

// CIDATASeedFiles is CIDATASeed with any NoCloud files (network-config,
// vendor-data, ...) by name.
func CIDATASeedFiles(t testing.TB, dir string, files map[string]string) string {
	t.Helper()
	tools := RequireTools(t, "mkfs.vfat", "mcopy")
	img := filepath.Join(dir, "seed.img")
	if out, err := exec.Command(tools[0], "-n", "CIDATA", "-C", img, "2048").CombinedOutput(); err != nil {
		t.Fatalf("mkfs.vfat: %v\n%s", err, out)
	}
	for _, name := range sortedKeys(files) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(files[name]), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(tools[1], "-i", img, filepath.Join(dir, name), "::"+name).CombinedOutput(); err != nil {
			t.Fatalf("mcopy %s: %v\n%s", name, err, out)
		}
	}
	return img
}
