package hashio

import (
	"crypto/sha256"
	"errors"
	"io"
	"sync"
)

// chunkSize is large enough that a syscall per chunk costs nothing beside
// the copy, and small enough that the chunks in flight stay a few MiB.
const chunkSize = 512 << 10

// chunks is the number of buffers each stream cycles through: one being
// filled, one being drained, and one spare so neither side waits on the
// other for a single slow call.
const chunks = 4

type chunk struct {
	b   []byte
	err error
}

// Reader reads ahead of its consumer on a goroutine of its own, hashing as
// it reads. Sum is valid once Read has returned io.EOF.
type Reader struct {
	full  chan chunk
	free  chan []byte
	stop  chan struct{}
	done  sync.WaitGroup
	once  sync.Once
	cur   chunk
	off   int
	sum   [sha256.Size]byte
	ended bool
}

// NewReader starts reading r. Close must be called to stop the goroutine
// before r is closed.
func NewReader(r io.Reader) *Reader {
	rd := &Reader{
		full: make(chan chunk, chunks),
		free: make(chan []byte, chunks),
		stop: make(chan struct{}),
	}
	for range chunks {
		rd.free <- make([]byte, chunkSize)
	}
	rd.done.Add(1)
	go rd.fill(r)
	return rd
}

func (rd *Reader) fill(r io.Reader) {
	defer rd.done.Done()
	h := sha256.New()
	for {
		var b []byte
		select {
		case b = <-rd.free:
		case <-rd.stop:
			return
		}
		n, err := io.ReadFull(r, b)
		h.Write(b[:n])
		if err == io.ErrUnexpectedEOF {
			err = io.EOF
		}
		if err == io.EOF {
			h.Sum(rd.sum[:0])
		}
		select {
		case rd.full <- chunk{b: b[:n], err: err}:
		case <-rd.stop:
			return
		}
		if err != nil {
			return
		}
	}
}

// Read returns what the goroutine has read, in order. At the end it returns
// io.EOF, or the error the underlying reader gave.
func (rd *Reader) Read(p []byte) (int, error) {
	for rd.off == len(rd.cur.b) {
		if rd.cur.err != nil {
			return 0, rd.cur.err
		}
		if rd.cur.b != nil {
			rd.free <- rd.cur.b[:cap(rd.cur.b)]
		}
		rd.cur, rd.off = <-rd.full, 0
		if rd.cur.err == io.EOF {
			rd.ended = true
		}
	}
	n := copy(p, rd.cur.b[rd.off:])
	rd.off += n
	return n, nil
}

// Sum is the SHA-256 of everything read. It panics before Read has returned
// io.EOF: a sum of part of a stream is never what a caller means.
func (rd *Reader) Sum() [sha256.Size]byte {
	if !rd.ended || rd.off != len(rd.cur.b) {
		panic("hashio: Sum before the end of the stream")
	}
	return rd.sum
}

// Close stops the goroutine and waits for it; the underlying reader is not
// read again after Close returns.
func (rd *Reader) Close() error {
	rd.once.Do(func() { close(rd.stop) })
	rd.done.Wait()
	return nil
}

// Writer writes behind its producer on goroutines of its own: Write copies
// into a chunk, and full chunks are written to the underlying writer and
// hashed while the producer goes on. Errors of the underlying writer come
// back from a later Write or from Close.
type Writer struct {
	w      io.Writer
	full   chan []byte
	free   chan []byte
	done   chan error
	cur    []byte
	err    error
	closed bool
	sum    [sha256.Size]byte
}

// ErrClosed is returned by Write after Close.
var ErrClosed = errors.New("hashio: write after close")

// NewWriter starts writing to w. Close flushes the rest and must be called
// to stop the goroutines, whatever happened before.
func NewWriter(w io.Writer) *Writer {
	wr := &Writer{
		w:    w,
		full: make(chan []byte, chunks),
		free: make(chan []byte, chunks),
		done: make(chan error, 1),
	}
	for range chunks - 1 {
		wr.free <- make([]byte, 0, chunkSize)
	}
	wr.cur = make([]byte, 0, chunkSize)
	go wr.drain()
	return wr
}

func (wr *Writer) drain() {
	h := NewHasher()
	defer h.Close()
	var err error
	for b := range wr.full {
		if err == nil {
			h.Write(b)
			_, err = wr.w.Write(b)
			h.Settle(0)
		}
		// After a failure the chunks still come back, so the producer
		// never blocks on an empty free list before it sees the error.
		wr.free <- b[:0]
		if err != nil {
			select {
			case wr.done <- err:
			default:
			}
		}
	}
	if err == nil {
		wr.sum = h.Sum()
	}
	select {
	case wr.done <- err:
	default:
	}
	close(wr.done)
}

// Write copies p into the current chunk, handing full chunks to the writing
// goroutine.
func (wr *Writer) Write(p []byte) (int, error) {
	if wr.closed {
		return 0, ErrClosed
	}
	if wr.err == nil {
		select {
		case wr.err = <-wr.done:
		default:
		}
	}
	if wr.err != nil {
		return 0, wr.err
	}
	n := 0
	for len(p) > 0 {
		m := copy(wr.cur[len(wr.cur):cap(wr.cur)], p)
		wr.cur = wr.cur[:len(wr.cur)+m]
		p, n = p[m:], n+m
		if len(wr.cur) == cap(wr.cur) {
			wr.full <- wr.cur
			wr.cur = <-wr.free
		}
	}
	return n, nil
}

// Close writes what is left, waits for the goroutines and returns the first
// error of the underlying writer. It does not close that writer.
func (wr *Writer) Close() error {
	if wr.closed {
		return wr.err
	}
	wr.closed = true
	if len(wr.cur) > 0 {
		wr.full <- wr.cur
		wr.cur = nil
	}
	close(wr.full)
	for err := range wr.done {
		if wr.err == nil {
			wr.err = err
		}
	}
	return wr.err
}

// Sum is the SHA-256 of everything written. It is valid after a Close that
// returned nil.
func (wr *Writer) Sum() [sha256.Size]byte { return wr.sum }
