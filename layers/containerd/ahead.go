package containerd

import (
	"errors"
	"io"
	"sync"
)

// A layer's unpack is two kinds of work: inflating the stream and creating
// its files. Large files are written by the extractor's own goroutine, so
// done in one goroutine the two take turns on one core. The ahead reader
// inflates (and hashes) on a goroutine of its own, a few chunks ahead of
// the extractor, so a second core does it meanwhile; memory stays at
// aheadChunks chunks whatever the layer's size.
const (
	aheadChunk  = 1 << 20
	aheadChunks = 4
)

type aheadChunkRead struct {
	b   []byte
	err error
}

// aheadReader reads r on its own goroutine. Every byte it reads from r is
// written to sink there, before the reader sees it.
type aheadReader struct {
	full chan aheadChunkRead
	free chan []byte
	stop chan struct{}
	done chan struct{}
	once sync.Once

	buf    []byte
	off    int
	err    error
	closed bool
}

func newAheadReader(r io.Reader, sink io.Writer) *aheadReader {
	a := &aheadReader{
		full: make(chan aheadChunkRead, aheadChunks),
		free: make(chan []byte, aheadChunks),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	for range aheadChunks {
		a.free <- make([]byte, aheadChunk)
	}
	go a.fill(r, sink)
	return a
}

func (a *aheadReader) fill(r io.Reader, sink io.Writer) {
	defer close(a.done)
	defer close(a.full)
	for {
		var b []byte
		select {
		case b = <-a.free:
		case <-a.stop:
			return
		}
		n, err := io.ReadFull(r, b)
		if errors.Is(err, io.ErrUnexpectedEOF) {
			err = io.EOF
		}
		if n > 0 {
			if _, werr := sink.Write(b[:n]); werr != nil && err == nil {
				err = werr
			}
		}
		select {
		case a.full <- aheadChunkRead{b[:n], err}:
		case <-a.stop:
			return
		}
		if err != nil {
			return
		}
	}
}

// Read hands out the chunks in order, and the error that ended them once
// they are read.
func (a *aheadReader) Read(p []byte) (int, error) {
	if a.closed {
		return 0, errReadAfterClose
	}
	if len(p) == 0 {
		return 0, nil
	}
	for a.off == len(a.buf) {
		if a.buf != nil {
			a.free <- a.buf[:cap(a.buf)]
			a.buf, a.off = nil, 0
		}
		if a.err != nil {
			return 0, a.err
		}
		c, ok := <-a.full
		if !ok {
			a.err = errReadAfterClose
			return 0, a.err
		}
		a.buf, a.off, a.err = c.b, 0, c.err
	}
	n := copy(p, a.buf[a.off:])
	a.off += n
	return n, nil
}

var errReadAfterClose = errors.New("read ahead: read after close")

// Close stops the reading goroutine and waits for it, so that r is the
// caller's again. Like Read, it is for the reader's goroutine.
func (a *aheadReader) Close() error {
	a.closed = true
	a.once.Do(func() { close(a.stop) })
	<-a.done
	return nil
}
