package rootfs

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"path"
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// An extraction spends most of its time in the kernel creating inodes, which
// a single goroutine does one at a time. The write pool lets the extractor
// read a small file's content from the archive and hand the create, write,
// chmod and stat to a worker, so a machine with a second core creates two
// files at once. The index is still changed only by the extractor's goroutine,
// in archive order; a worker fills in the content digest and disk state of the
// inode it was handed, and nothing reads those before the pool settles.
//
// A directory's files all go to one worker: creating a file locks its parent
// directory in the kernel, so two workers in one directory would wait on each
// other.

const (
	// asyncMax is the largest file handed to a worker; larger ones are
	// streamed by the extractor itself, which needs no copy in memory.
	asyncMax = 1 << 20
	// asyncBudget bounds the content held in memory for queued writes.
	asyncBudget = 32 << 20
	// asyncQueue bounds the jobs queued for one worker.
	asyncQueue = 512
)

type writeJob struct {
	full string // clean tree path
	name string // archive member, for errors
	in   *Inode
	data []byte
	// src, when set, holds the content instead of data: in.Size bytes at
	// off, copied by the kernel. The inode's digest is already known.
	src *os.File
	off int64
}

type writePool struct {
	root *os.Root
	jobs []chan *writeJob
	wg   sync.WaitGroup
	// pending counts jobs handed out and not yet finished; settled is
	// signalled as it drops, and held bytes as memory is given back.
	mu      sync.Mutex
	cond    *sync.Cond
	pending int
	held    int
	err     error
}

func newWritePool(root *os.Root) *writePool {
	n := min(max(runtime.GOMAXPROCS(0), 2), 4)
	p := &writePool{root: root, jobs: make([]chan *writeJob, n)}
	p.cond = sync.NewCond(&p.mu)
	for i := range p.jobs {
		p.jobs[i] = make(chan *writeJob, asyncQueue)
		p.wg.Add(1)
		go p.work(p.jobs[i])
	}
	return p
}

func (p *writePool) work(jobs <-chan *writeJob) {
	defer p.wg.Done()
	for j := range jobs {
		err := p.write(j)
		p.mu.Lock()
		if err != nil && p.err == nil {
			p.err = &EntryError{Name: j.name, Err: &fs.PathError{Op: "create", Path: j.full, Err: err}}
		}
		p.pending--
		p.held -= len(j.data)
		p.cond.Broadcast()
		p.mu.Unlock()
	}
}

func (p *writePool) write(j *writeJob) error {
	name := rel(j.full)
	f, err := p.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	var werr error
	if j.src != nil {
		werr = copyRange(f, j.src, j.off, j.in.Size)
	} else {
		var hole bool
		hole, werr = writeChunk(f, j.data)
		if werr == nil && hole {
			werr = f.Truncate(int64(len(j.data)))
		}
	}
	fi, werr := finishFile(f, j.in, werr)
	if werr != nil {
		p.root.Remove(name)
		return werr
	}
	if j.src == nil {
		sum := sha256.Sum256(j.data)
		j.in.Digest = hex.EncodeToString(sum[:])
	}
	j.in.disk = stateOf(fi)
	return nil
}

// copyRange copies n bytes of src at off to the end of dst with
// copy_file_range(2): the kernel copies them without a trip through this
// process, and shares the blocks instead where the file system can (btrfs,
// XFS, for a block-aligned range). Between two file systems that cannot, it
// copies through a buffer.
func copyRange(dst, src *os.File, off, n int64) error {
	for n > 0 {
		m, err := unix.CopyFileRange(int(src.Fd()), &off, int(dst.Fd()), nil, int(min(n, 1<<30)), 0)
		switch {
		case errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL):
			return copyRangeBuffered(dst, src, off, n)
		case err != nil:
			return err
		case m == 0:
			return fmt.Errorf("the archive ends %d bytes short of the file", n)
		}
		n -= int64(m)
	}
	return nil
}

func copyRangeBuffered(dst, src *os.File, off, n int64) error {
	m, err := io.Copy(dst, io.NewSectionReader(src, off, n))
	if err == nil && m < n {
		err = fmt.Errorf("the archive ends %d bytes short of the file", n-m)
	}
	return err
}

// submit queues the write of a new regular file. It waits while the queued
// content is over budget, and reports a failure of an earlier job.
func (p *writePool) submit(j *writeJob, dir string) error {
	p.mu.Lock()
	for p.held > 0 && p.held+len(j.data) > asyncBudget && p.err == nil {
		p.cond.Wait()
	}
	if err := p.err; err != nil {
		p.mu.Unlock()
		return err
	}
	p.pending++
	p.held += len(j.data)
	p.mu.Unlock()
	h := fnv.New32a()
	io.WriteString(h, dir)
	p.jobs[h.Sum32()%uint32(len(p.jobs))] <- j
	return nil
}

// settle waits for every queued write and returns the first failure.
func (p *writePool) settle() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.pending > 0 {
		p.cond.Wait()
	}
	return p.err
}

// stop settles and ends the workers.
func (p *writePool) stop() error {
	err := p.settle()
	for _, c := range p.jobs {
		close(c)
	}
	p.wg.Wait()
	return err
}

// startWrites lets Create hand small files to a write pool until stopWrites.
func (t *Tree) startWrites() {
	if t.writes == nil {
		t.writes = newWritePool(t.root)
	}
}

// stopWrites waits for every handed-out write and ends the pool. On a failure
// the entry whose write failed is dropped from the index, so the index never
// names a file the directory does not hold.
func (t *Tree) stopWrites() error {
	if t.writes == nil {
		return nil
	}
	err := t.writes.stop()
	t.writes = nil
	if err != nil {
		t.dropUnwritten()
	}
	return err
}

// settleWrites is called before anything that reads or changes an existing
// entry on disk or reads its digest: the entry may be a queued write.
func (t *Tree) settleWrites() error {
	if t.writes == nil {
		return nil
	}
	if err := t.writes.settle(); err != nil {
		return err
	}
	return nil
}

// dropUnwritten removes index entries of regular files whose queued write
// failed: they have no digest.
func (t *Tree) dropUnwritten() {
	for p, e := range t.entries {
		if e.Type == TypeRegular && e.Digest == "" {
			delete(t.entries, p)
			t.sorted = nil
		}
	}
}

// createQueued is Create for a new regular file whose size bytes of content
// come from r, written by the pool. The entry's Digest is filled in when the
// pool settles.
func (t *Tree) createQueued(p string, h Header, r io.Reader, size int64, member string) (*Entry, error) {
	full, err := t.prepareNew(p)
	if err != nil {
		return nil, err
	}
	data := make([]byte, size)
	if _, err := io.ReadFull(r, data); err != nil {
		return nil, &fs.PathError{Op: "create", Path: full, Err: fmt.Errorf("reading content: %w", err)}
	}
	in := h.inode()
	in.Size, in.nlink = size, 1
	e := &Entry{Path: full, Inode: in, Origin: h.Origin}
	dir := full[:max(len(full)-len(baseName(full)), 1)]
	if err := t.ensureDir(path.Dir(full)); err != nil {
		return nil, &fs.PathError{Op: "create", Path: full, Err: err}
	}
	if err := t.writes.submit(&writeJob{full: full, name: member, in: in, data: data}, dir); err != nil {
		return nil, err
	}
	t.add(e)
	return e, nil
}

func baseName(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			return p[i+1:]
		}
	}
	return p
}
