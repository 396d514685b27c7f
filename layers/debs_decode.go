package layers

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"

	"github.com/stamp-dev/stamp/packages/deb"
	"github.com/stamp-dev/stamp/rootfs"
)

// Decoding data.tar (xz, mostly) is most of an install's work, and one
// package can be most of that: the kernel's is 70 MB of xz and 400 MB of
// tar, 9 s of one core. So the archives are decoded ahead of the install,
// on every core, in install order except that the very large ones start
// first, and what is decoded and not yet unpacked waits in memory only
// while it is small.
const (
	// largeDeb is the .deb size from which a package is decoded as soon as
	// a core is free, however far ahead of the install it is: the kernel
	// (70 MB) and upstream's containerd (46 MB), not Kubernetes' 7-15 MB
	// packages, which come in the order they are installed.
	largeDeb = 32 << 20
	// spillAt is how much of one package's data.tar is held in memory;
	// past it, the whole goes to a spool file in the work directory.
	spillAt = 4 << 20
)

// decoded is a package read from the cache: its control data and its
// data.tar, decompressed.
type decoded struct {
	control *deb.Control
	data    *spool
	err     error
}

// ahead decodes a list of packages in the background and hands them out
// in list order. Memory is bounded by the small packages it may decode
// ahead (window of them, spillAt each), not by any package's size.
type ahead struct {
	env    *Env
	pkgs   []*debPackage
	dir    string // spool files
	out    []chan decoded
	window int
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	cond     *sync.Cond
	queue    []int // indexes of the packages not yet started, large ones first
	consumed int   // how many next has handed out
	stopped  bool
}

// decodeAhead starts decoding pkgs on GOMAXPROCS goroutines. The caller
// takes each package in order with next and calls close when done, early
// or not.
func decodeAhead(ctx context.Context, env *Env, pkgs []*debPackage) (*ahead, error) {
	dir, err := os.MkdirTemp(filepath.Dir(env.Tree.Dir()), "debs-")
	if err != nil {
		return nil, fmt.Errorf("spool for decoded packages: %w", err)
	}
	workers := runtime.GOMAXPROCS(0)
	a := &ahead{env: env, pkgs: pkgs, dir: dir, out: make([]chan decoded, len(pkgs)), window: 2 * (workers + 1)}
	a.cond = sync.NewCond(&a.mu)
	for i := range pkgs {
		a.out[i] = make(chan decoded, 1)
		a.queue = append(a.queue, i)
	}
	// Largest first among the large ones (longest processing time first
	// keeps both cores busy to the end); the rest in install order.
	slices.SortStableFunc(a.queue, func(x, y int) int {
		sx, sy := a.size(x), a.size(y)
		switch {
		case sx >= largeDeb && sy >= largeDeb:
			return int(sy>>10) - int(sx>>10)
		case sx >= largeDeb:
			return -1
		case sy >= largeDeb:
			return 1
		}
		return 0
	})
	ctx, a.cancel = context.WithCancel(ctx)
	for range workers {
		a.wg.Add(1)
		go a.work(ctx)
	}
	return a, nil
}

func (a *ahead) size(i int) int64 { return a.pkgs[i].pkg.Size }

// take removes and returns the first package of the queue that may be
// decoded now: a large one, or a small one within the window of the
// install's position. It waits while there is none; -1 means stop.
func (a *ahead) take() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	for !a.stopped {
		for k, i := range a.queue {
			if a.size(i) >= largeDeb || i < a.consumed+a.window {
				a.queue = slices.Delete(a.queue, k, k+1)
				return i
			}
		}
		if len(a.queue) == 0 {
			return -1
		}
		a.cond.Wait()
	}
	return -1
}

func (a *ahead) work(ctx context.Context) {
	defer a.wg.Done()
	for {
		i := a.take()
		if i < 0 {
			return
		}
		d := decodeDeb(ctx, a.env, a.pkgs[i], a.dir)
		a.out[i] <- d
	}
}

// next waits for the next package in list order.
func (a *ahead) next() decoded {
	a.mu.Lock()
	i := a.consumed
	a.consumed++
	a.cond.Broadcast()
	a.mu.Unlock()
	if i >= len(a.out) {
		return decoded{err: errors.New("no package left to decode")}
	}
	return <-a.out[i]
}

// close stops the decoding and removes what was decoded and not taken.
func (a *ahead) close() {
	a.cancel()
	a.mu.Lock()
	a.stopped = true
	a.cond.Broadcast()
	a.mu.Unlock()
	a.wg.Wait()
	for _, ch := range a.out {
		select {
		case d := <-ch:
			d.data.close()
		default:
		}
	}
	if err := os.RemoveAll(a.dir); err != nil {
		a.env.Log.Warnf("%s: %v", a.env.Label, err)
	}
}

// decodeDeb reads a package from the cache: its control archive, and its
// data.tar decompressed into a spool in dir.
func decodeDeb(ctx context.Context, env *Env, p *debPackage, dir string) decoded {
	rc, err := env.Cache.Open(p.digest)
	if err != nil {
		return decoded{err: err}
	}
	defer rc.Close()
	r, err := deb.NewReader(rc)
	if err != nil {
		return decoded{err: fmt.Errorf("%s: %w", p.pkg.URL(), err)}
	}
	data, err := r.Data()
	if err != nil {
		return decoded{err: fmt.Errorf("%s: %w", p.pkg.URL(), err)}
	}
	defer data.Close()
	s := &spool{dir: dir}
	if _, err := io.Copy(s, ctxReader{ctx, data}); err != nil {
		s.close()
		return decoded{err: fmt.Errorf("%s: data.tar: %w", p.pkg.URL(), err)}
	}
	// Read to the end so the cache's verifying reader checks every byte.
	if _, err := io.Copy(io.Discard, rc); err != nil {
		s.close()
		return decoded{err: fmt.Errorf("%s: %w", p.pkg.URL(), err)}
	}
	return decoded{control: r.Control(), data: s}
}

// extractOnly lays a package's files into the tree, nothing else.
func (l *Debs) extractOnly(ctx context.Context, env *Env, p *debPackage) error {
	d := decodeDeb(ctx, env, p, filepath.Dir(env.Tree.Dir()))
	if d.err != nil {
		return d.err
	}
	defer d.data.close()
	data, err := d.data.reader()
	if err != nil {
		return err
	}
	opts := rootfs.ExtractOptions{Origin: env.Origin(p.digest, p.id()), KeepDirSymlinks: true,
		Map: func(q string) (string, bool) { return q, !l.excluded(q) }}
	_, err = rootfs.Extract(ctx, env.Tree, data, opts)
	return err
}

// ctxReader stops a long copy when its context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// spool holds bytes in memory up to spillAt and in an unlinked-on-close
// file in dir past that.
type spool struct {
	dir string
	buf []byte
	f   *os.File
}

func (s *spool) Write(p []byte) (int, error) {
	if s.f == nil && len(s.buf)+len(p) <= spillAt {
		s.buf = append(s.buf, p...)
		return len(p), nil
	}
	if s.f == nil {
		f, err := os.CreateTemp(s.dir, "data-*.tar")
		if err != nil {
			return 0, err
		}
		s.f = f
		if _, err := f.Write(s.buf); err != nil {
			return 0, err
		}
		s.buf = nil
	}
	return s.f.Write(p)
}

// reader reads the spool from its start.
func (s *spool) reader() (io.Reader, error) {
	if s.f == nil {
		return bytes.NewReader(s.buf), nil
	}
	if _, err := s.f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return bufio.NewReaderSize(s.f, 256<<10), nil
}

// close frees the spool; it is safe on nil.
func (s *spool) close() {
	if s == nil {
		return
	}
	s.buf = nil
	if s.f != nil {
		s.f.Close()
		os.Remove(s.f.Name())
		s.f = nil
	}
}
