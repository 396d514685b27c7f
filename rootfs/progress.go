package rootfs

import "io"

// Progress starts a progress display for one long step: name says what the
// step is and total its size in bytes (negative when unknown). add is told
// the length of each chunk as it is done, and done is called once at the
// end, whether the step succeeded or not. It is declared here, the one
// package the conductor, the layers, the cache and the formats all import,
// so the conductor hands the same value to each of them; nil shows nothing.
type Progress func(name string, total int64) (add func(n int64), done func())

// CountReader tells add the length of every read from r: a Progress's add,
// or a running count of the bytes consumed so far.
func CountReader(r io.Reader, add func(n int64)) io.Reader { return &countReader{r: r, add: add} }

type countReader struct {
	r   io.Reader
	add func(int64)
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.add(int64(n))
	return n, err
}
