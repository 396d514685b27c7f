package deb

import (
	"archive/tar"
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/stamp-dev/stamp/rootfs/compress"
)

const arMagic = "!<arch>\n"

// maxControl bounds the control.tar of one package: it holds a few small
// text files, and a hostile one should not fill memory.
const maxControl = 64 << 20

// Control is the decoded control.tar of a .deb: the control paragraph and
// every other member (md5sums, conffiles, maintainer scripts, triggers,
// shlibs...) by base name.
type Control struct {
	Paragraph *Paragraph
	Files     map[string][]byte
	// Modes holds each member's permission bits; dpkg keeps scripts
	// executable in its info directory.
	Modes map[string]int64
}

// Names returns the member names of Files in byte order.
func (c *Control) Names() []string {
	names := make([]string, 0, len(c.Files))
	for n := range c.Files {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Reader reads a .deb stream: it hands out the control members and then
// the decompressed data.tar, in the order the archive stores them.
type Reader struct {
	r       io.Reader
	control *Control
	data    io.ReadCloser
	member  io.Reader // the data member, still compressed
	dataAlg compress.Algorithm
}

// NewReader reads the ar header, debian-binary and control.tar of a .deb
// and stops at the data.tar member, which Data then streams.
func NewReader(r io.Reader) (*Reader, error) {
	// The decompressors read in small pieces; buffer so each is not a
	// system call.
	r = bufio.NewReaderSize(r, 256<<10)
	d := &Reader{r: r}
	magic := make([]byte, len(arMagic))
	if _, err := io.ReadFull(r, magic); err != nil || string(magic) != arMagic {
		return nil, errors.New("not a Debian package: no ar header")
	}
	first := true
	for {
		name, size, err := d.next()
		if err == io.EOF {
			return nil, errors.New("not a Debian package: no data.tar member")
		}
		if err != nil {
			return nil, err
		}
		lr := io.LimitReader(r, size)
		switch {
		case first && name == "debian-binary":
			b, err := io.ReadAll(io.LimitReader(lr, 64))
			if err != nil {
				return nil, err
			}
			if !strings.HasPrefix(string(b), "2.") {
				return nil, fmt.Errorf("debian-binary says %q, want 2.x", strings.TrimSpace(string(b)))
			}
		case first:
			return nil, fmt.Errorf("not a Debian package: first member is %q, not debian-binary", name)
		case strings.HasPrefix(name, "control.tar"):
			if size > maxControl {
				return nil, fmt.Errorf("%s: %d bytes is too large for a control archive", name, size)
			}
			c, err := readControl(name, lr)
			if err != nil {
				return nil, err
			}
			d.control = c
		case strings.HasPrefix(name, "data.tar"):
			if d.control == nil {
				return nil, errors.New("data.tar comes before control.tar")
			}
			alg, err := memberCompression(name)
			if err != nil {
				return nil, err
			}
			d.member, d.dataAlg = lr, alg
			return d, nil
		}
		first = false
		if _, err := io.Copy(io.Discard, lr); err != nil {
			return nil, err
		}
		if size%2 == 1 {
			if _, err := io.ReadFull(r, make([]byte, 1)); err != nil {
				return nil, fmt.Errorf("ar padding after %s: %w", name, err)
			}
		}
	}
}

// next reads one ar member header.
func (d *Reader) next() (string, int64, error) {
	var h [60]byte
	n, err := io.ReadFull(d.r, h[:])
	if n == 0 && (err == io.EOF || err == io.ErrUnexpectedEOF) {
		return "", 0, io.EOF
	}
	if err != nil {
		return "", 0, fmt.Errorf("ar header: %w", err)
	}
	if h[58] != '`' || h[59] != '\n' {
		return "", 0, errors.New("ar header: bad magic")
	}
	name := strings.TrimRight(string(h[0:16]), " ")
	name = strings.TrimSuffix(name, "/") // GNU ar terminates names with "/"
	size, err := strconv.ParseInt(strings.TrimSpace(string(h[48:58])), 10, 64)
	if err != nil || size < 0 {
		return "", 0, fmt.Errorf("ar member %q: bad size", name)
	}
	return name, size, nil
}

// Control returns the package's control data.
func (d *Reader) Control() *Control { return d.control }

// Data returns the uncompressed data.tar stream. Read it to the end.
func (d *Reader) Data() (io.ReadCloser, error) {
	if d.data == nil {
		rc, err := compress.NewReader(d.dataAlg, d.member)
		if err != nil {
			return nil, fmt.Errorf("data.tar: %w", err)
		}
		d.data = rc
	}
	return d.data, nil
}

func memberCompression(name string) (compress.Algorithm, error) {
	switch path.Ext(name) {
	case ".tar":
		return compress.None, nil
	case ".gz":
		return compress.Gzip, nil
	case ".xz":
		return compress.XZ, nil
	case ".zst":
		return compress.Zstd, nil
	case ".bz2":
		return "", fmt.Errorf("%s: %w", name, compress.ErrBzip2)
	}
	return "", fmt.Errorf("%s: unknown compression", name)
}

func readControl(name string, r io.Reader) (*Control, error) {
	alg, err := memberCompression(name)
	if err != nil {
		return nil, err
	}
	zr, err := compress.NewReader(alg, r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	defer zr.Close()
	c := &Control{Files: map[string][]byte{}, Modes: map[string]int64{}}
	tr := tar.NewReader(zr)
	total := int64(0)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		base := path.Base(path.Clean("/" + h.Name))
		total += h.Size
		if total > maxControl {
			return nil, fmt.Errorf("%s: too large", name)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", name, h.Name, err)
		}
		c.Files[base], c.Modes[base] = b, h.Mode&0o7777
	}
	b, ok := c.Files["control"]
	if !ok {
		return nil, fmt.Errorf("%s: no control file", name)
	}
	ps, err := ParseControl(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: control: %w", name, err)
	}
	if len(ps) != 1 {
		return nil, fmt.Errorf("%s: control holds %d paragraphs, want 1", name, len(ps))
	}
	c.Paragraph = ps[0]
	delete(c.Files, "control")
	return c, nil
}
