package layers

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/stamp-dev/stamp/rootfs"
)

// File is one item of a files layer: inline content, or a host file or
// directory copied in.
type File struct {
	Path    string
	Content *string
	From    string // absolute host path
	Mode    *uint32
	Owner   Owner
	MTime   *time.Time
}

// Files writes files into the tree. A write through a symlink lands where the
// image would put it.
type Files struct {
	Items []File
}

func (l *Files) Kind() string { return "files" }

// HostSources implements WithHostSources: every item copied from the host.
func (l *Files) HostSources() []HostSource {
	var out []HostSource
	for i, it := range l.Items {
		if it.From != "" {
			out = append(out, HostSource{Field: fmt.Sprintf("[%d].from", i), Path: it.From})
		}
	}
	return out
}

func (l *Files) Apply(ctx context.Context, env *Env) error {
	for i, f := range l.Items {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := l.apply(ctx, env, f); err != nil {
			return fmt.Errorf("%s[%d] %s: %w", env.Label, i, f.Path, err)
		}
	}
	return nil
}

func (l *Files) apply(ctx context.Context, env *Env, f File) error {
	uid, gid, err := ResolveOwner(env.Tree, f.Owner)
	if err != nil {
		return err
	}
	mtime := env.Epoch
	if f.MTime != nil {
		mtime = *f.MTime
	}
	if f.Content != nil {
		h := rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644, UID: uid, GID: gid, MTime: mtime,
			Origin: env.Origin("", "inline")}
		return writeFile(env, f, h, strings.NewReader(*f.Content))
	}
	fi, err := os.Stat(f.From)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return copyHostFile(ctx, env, f, f.Path, f.From, uid, gid, mtime)
	}
	return env.Tree.WalkDir(f.From, func(hp string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(f.From, hp)
		if err != nil {
			return err
		}
		dest := path.Join(f.Path, filepath.ToSlash(rel))
		origin := env.Origin("", filepath.ToSlash(filepath.Join(filepath.Base(f.From), rel)))
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			perm := uint32(info.Mode().Perm())
			_, err := env.Tree.MkdirAll(dest, rootfs.Header{Perm: perm, UID: uid, GID: gid, MTime: mtime, Origin: origin})
			if err != nil {
				return err
			}
			rp, err := env.Tree.Resolve(dest, true)
			if err != nil {
				return err
			}
			return env.Tree.Update(rp, func(in *rootfs.Inode) { in.Perm, in.UID, in.GID, in.MTime = perm, uid, gid, mtime })
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(hp)
			if err != nil {
				return err
			}
			_, err = env.Tree.Create(dest, rootfs.Header{Type: rootfs.TypeSymlink, Perm: 0o777, UID: uid, GID: gid, MTime: mtime, Target: target, Origin: origin}, nil)
			return err
		case d.Type().IsRegular():
			return copyHostFile(ctx, env, File{Path: dest, Mode: f.Mode}, dest, hp, uid, gid, mtime)
		default:
			return fmt.Errorf("%s: cannot copy a %v from the host", hp, d.Type())
		}
	})
}

// keptMin is the smallest host file kept in the cache for the tree to point
// at: a Kubernetes binary is copied there once, and a rebuild finds it
// unchanged without reading it, while a blob per small file would only
// crowd the cache.
const keptMin = 1 << 20

func copyHostFile(ctx context.Context, env *Env, f File, dest, hp string, uid, gid uint32, mtime time.Time) error {
	src, err := os.Open(hp)
	if err != nil {
		return err
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		return err
	}
	// Only the execute bits are the host's to say; the rest would depend on
	// the checkout's umask.
	perm := uint32(0o644)
	if fi.Mode().Perm()&0o100 != 0 {
		perm = 0o755
	}
	h := rootfs.Header{Type: rootfs.TypeRegular, Perm: perm, UID: uid, GID: gid, MTime: mtime,
		Origin: env.Origin("", hp)}
	f.Path = dest
	if fi.Size() >= keptMin && env.Cache != nil && env.Cache.Writable() && env.Tree.KeepsReferences() {
		sum, size, err := env.Cache.KeepFile(ctx, hp)
		if err != nil {
			return err
		}
		rp, h, err := fileHeader(env, f, h)
		if err != nil {
			return err
		}
		e, _, err := env.Tree.CreateKept(rp, h, sum, size)
		if err != nil {
			return err
		}
		e.Origin.Input = "sha256:" + e.Digest
		return nil
	}
	return writeFile(env, f, h, src)
}

// writeFile creates the file at f.Path, following a symlink in the last
// component as a write in the image would. A file that is there keeps its
// mode and owner unless the recipe sets them.
func writeFile(env *Env, f File, h rootfs.Header, r interface{ Read([]byte) (int, error) }) error {
	rp, h, err := fileHeader(env, f, h)
	if err != nil {
		return err
	}
	e, err := env.Tree.Create(rp, h, r)
	if err != nil {
		return err
	}
	e.Origin.Input = "sha256:" + e.Digest
	return nil
}

// fileHeader resolves where f is written and the header it gets there.
func fileHeader(env *Env, f File, h rootfs.Header) (string, rootfs.Header, error) {
	rp, err := env.Tree.Resolve(f.Path, true)
	if err != nil {
		return "", h, err
	}
	if old := env.Tree.Get(rp); old != nil && old.Type == rootfs.TypeRegular {
		h.Perm = old.Perm
		if f.Owner == (Owner{}) {
			h.UID, h.GID = old.UID, old.GID
		}
		h.Xattrs = old.Xattrs
	}
	if f.Mode != nil {
		h.Perm = *f.Mode
	}
	return rp, h, nil
}
