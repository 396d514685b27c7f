package layers

import (
	"context"
	"fmt"
	"io"
	"os"
	"path"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/compress"
)

// Tarball unpacks a tar archive (plain, gzip, xz or zstd, told apart by
// magic) from the cache into the tree.
type Tarball struct {
	Input Input
	// Dest is where the archive's root lands in the tree; "" is "/".
	Dest string
	// KeepDirSymlinks keeps symlinked directories as dpkg does.
	KeepDirSymlinks bool
}

func (l *Tarball) Kind() string     { return "tarball" }
func (l *Tarball) Inputs() []*Input { return []*Input{&l.Input} }

// PhaseKeeping implements PhaseKeeper: the files point into the archive,
// which the cache keeps.
func (*Tarball) PhaseKeeping() Keeping { return KeepingReferenced }

func (l *Tarball) Apply(ctx context.Context, env *Env) error {
	if l.Input.Digest == "" {
		return fmt.Errorf("%s: input %s was not resolved", env.Label, l.Input.URI)
	}
	r, err := env.Cache.Open(l.Input.Digest)
	if err != nil {
		return fmt.Errorf("%s: %w", env.Label, err)
	}
	defer r.Close()
	var total int64
	if p, err := env.Cache.Path(l.Input.Digest); err == nil {
		total = fileSize(p)
	}
	add, done := env.progress("unpack "+path.Base(l.Input.URI), total)
	defer done()
	cr := rootfs.CountReader(r, add)
	dr, _, err := compress.NewReaderAuto(cr)
	if err != nil {
		return fmt.Errorf("%s: %s: %w", env.Label, l.Input.URI, err)
	}
	defer dr.Close()
	opts := rootfs.ExtractOptions{
		Origin:          env.Origin(l.Input.Digest, ""),
		KeepDirSymlinks: l.KeepDirSymlinks,
		// A base is read by the output writers, seldom by a host
		// process: its files need not be written one by one.
		ByReference: true,
	}
	if dest := path.Clean("/" + l.Dest); dest != "/" {
		opts.Map = func(p string) (string, bool) { return path.Join(dest, p), true }
	}
	n, err := rootfs.Extract(ctx, env.Tree, dr, opts)
	if err != nil {
		return fmt.Errorf("%s: %s: %w", env.Label, l.Input.URI, err)
	}
	// Read to the end so the cache's verifying reader checks the digest of
	// every byte, padding included.
	if _, err := io.Copy(io.Discard, cr); err != nil {
		return fmt.Errorf("%s: %s: %w", env.Label, l.Input.URI, err)
	}
	env.Log.WithField("entries", n).Debugf("%s: unpacked %s", env.Label, l.Input.URI)
	return nil
}

func fileSize(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}
