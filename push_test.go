package stamp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/stamp-dev/stamp/formats"
	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/rootfstest"
	"github.com/stamp-dev/stamp/test/harness"
)

var pushEpoch = time.Unix(1700000000, 0).UTC()

// pushLayout writes a small image with the oci format and returns the
// layout's path and manifest digest.
func pushLayout(t *testing.T, spec *formats.Spec, from string) (string, string) {
	t.Helper()
	tree := rootfstest.New(t, pushEpoch)
	for p, content := range map[string]string{"/etc/hostname": "node\n", "/usr/bin/tool": "#!/bin/sh\necho hi\n"} {
		h := rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o755, MTime: pushEpoch}
		if _, err := tree.Create(p, h, strings.NewReader(content)); err != nil {
			t.Fatal(err)
		}
	}
	f, err := formats.Lookup("oci")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	src := &formats.Source{Tree: tree.View(), Epoch: pushEpoch, Name: "node", Arch: "amd64", Seed: "node", From: from}
	res, err := f.Write(context.Background(), src, spec, dir, "node")
	if err != nil {
		t.Fatal(err)
	}
	d, err := os.ReadFile(filepath.Join(dir, res.Files[1]))
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, res.Files[0]), strings.TrimSpace(string(d))
}

func skopeoDigest(t *testing.T, ref string) string {
	t.Helper()
	cmd := exec.Command(harness.Tool(t, "skopeo"), "inspect", "--tls-verify=false", ref)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir(), "TMPDIR=" + t.TempDir()}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("skopeo inspect %s: %v\n%s", ref, err, stderr.String())
	}
	var v struct{ Digest string }
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatal(err)
	}
	return v.Digest
}

func TestPushRoundTrip(t *testing.T) {
	reg := harness.StartRegistry(t)
	disk := filepath.Join(t.TempDir(), "node.raw")
	if err := os.WriteFile(disk, bytes.Repeat([]byte("disk"), 50000), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		spec *formats.Spec
	}{
		{"rootfs-dir", &formats.Spec{Options: &formats.OCISpec{Kind: "rootfs", Layout: "dir", Env: []string{"A=1"}}}},
		{"rootfs-archive", &formats.Spec{Options: &formats.OCISpec{Kind: "rootfs", Layout: "archive"}}},
		{"disk-dir", &formats.Spec{Options: &formats.OCISpec{Kind: "containerdisk", Layout: "dir"}}},
		{"disk-archive", &formats.Spec{Options: &formats.OCISpec{Kind: "containerdisk", Layout: "archive"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			layout, digest := pushLayout(t, c.spec, disk)
			ref := reg.Addr + "/stamp/" + c.name + ":v1"
			var updates int64
			got, err := Push(context.Background(), layout, ref, PushOptions{Keychain: nil,
				Progress: func(string, int64) (func(int64), func()) {
					return func(n int64) { updates += n }, func() {}
				}})
			if err != nil {
				t.Fatal(err)
			}
			if want := reg.Addr + "/stamp/" + c.name + "@" + digest; got != want {
				t.Errorf("Push returned %s, want %s", got, want)
			}
			if updates == 0 {
				t.Error("no progress was shown")
			}
			// Pulled back two ways, the registry serves the layout's digest.
			if d := skopeoDigest(t, "docker://"+ref); d != digest {
				t.Errorf("skopeo sees %s, layout has %s", d, digest)
			}
			r, _ := name.ParseReference(ref)
			img, err := remote.Image(r)
			if err != nil {
				t.Fatal(err)
			}
			if d, _ := img.Digest(); d.String() != digest {
				t.Errorf("remote.Image digest %s, want %s", d, digest)
			}
			// Pushing again, and by digest, changes nothing.
			if _, err := Push(context.Background(), layout, reg.Addr+"/stamp/"+c.name+"@"+digest, PushOptions{}); err != nil {
				t.Errorf("push by digest: %v", err)
			}
		})
	}
}

func TestPushRefusals(t *testing.T) {
	reg := harness.StartRegistry(t)
	layout, digest := pushLayout(t, &formats.Spec{}, "")
	var ue *UsageError
	_, err := Push(context.Background(), layout, "Not A Ref!", PushOptions{})
	if !errors.As(err, &ue) {
		t.Errorf("bad reference: %v, want a usage error", err)
	}
	other := "sha256:" + strings.Repeat("0", 64)
	_, err = Push(context.Background(), layout, reg.Addr+"/x@"+other, PushOptions{})
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), digest) {
		t.Errorf("digest mismatch: %v, want a usage error naming %s", err, digest)
	}
	if _, err := Push(context.Background(), t.TempDir(), reg.Addr+"/x:v1", PushOptions{}); err == nil || !strings.Contains(err.Error(), "not an OCI layout") {
		t.Errorf("empty dir: %v", err)
	}

	// A layer damaged after the build is never published: the blob is
	// checked as it streams, and the registry checks it too.
	im, err := formats.ReadOCI(context.Background(), layout)
	if err != nil {
		t.Fatal(err)
	}
	blob := filepath.Join(layout, "blobs", "sha256", strings.TrimPrefix(im.Layer.Digest, "sha256:"))
	b, err := os.ReadFile(blob)
	if err != nil {
		t.Fatal(err)
	}
	// The layer is gzip: any byte of it will do.
	b[len(b)/2] ^= 0x20
	if err := os.WriteFile(blob, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Push(context.Background(), layout, reg.Addr+"/broken:v1", PushOptions{})
	if err == nil || !strings.Contains(err.Error(), "does not match its digest") {
		t.Fatalf("pushing a corrupt layout: %v, want a digest mismatch", err)
	}
	r, _ := name.ParseReference(reg.Addr + "/broken:v1")
	if _, herr := remote.Head(r); herr == nil {
		t.Errorf("the registry holds broken:v1 after a failed push (push said %v)", err)
	}
}

// proxy forwards connections on a non-loopback-named address (127.0.0.2,
// which go-containerregistry does not treat as local) to target.
func proxy(t *testing.T, target string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		// Linux routes all of 127.0.0.0/8 to lo, so this is a broken host.
		t.Fatalf("listen on 127.0.0.2: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				u, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer u.Close()
				go io.Copy(u, c)
				io.Copy(c, u)
			}()
		}
	}()
	return l.Addr().String()
}

func TestPushInsecure(t *testing.T) {
	reg := harness.StartRegistry(t)
	addr := proxy(t, reg.Addr)
	layout, digest := pushLayout(t, &formats.Spec{}, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Without --insecure a registry that is not on loopback is spoken to
	// in TLS only, which a plain HTTP registry cannot answer.
	if _, err := Push(ctx, layout, addr+"/x:v1", PushOptions{}); err == nil || !strings.Contains(err.Error(), "https://") {
		t.Fatalf("push over plain HTTP to a non-loopback registry without Insecure: %v, want a failed https request", err)
	}
	got, err := Push(ctx, layout, addr+"/x:v1", PushOptions{Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	if got != addr+"/x@"+digest {
		t.Errorf("Push returned %s", got)
	}
	if d := skopeoDigest(t, "docker://"+reg.Addr+"/x:v1"); d != digest {
		t.Errorf("registry serves %s, want %s", d, digest)
	}
}
