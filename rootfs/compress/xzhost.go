package compress

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"

	"github.com/ulikunitz/xz"
)

// An xz stream is decoded by the host's xz when one is on PATH. Nearly every
// Debian package's data.tar is xz, and decoding it was the largest share of
// a node build's CPU: liblzma decodes the node's 1.22 GB of data.tar in
// 15.6 s of one core of the build machine, the pure-Go decoder in 38.9 s.
// Decoding has one right answer, so which decoder ran never shows in any
// output; without xz on PATH, the pure-Go decoder does the same work,
// slower.
func newXZReader(r io.Reader, hostXZ string) (io.ReadCloser, error) {
	if hostXZ == "" {
		xr, err := xz.ReaderConfig{DictCap: xzDictCap}.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("xz: %w", err)
		}
		return io.NopCloser(goXZReader{xr}), nil
	}
	return startHostXZ(r, hostXZ)
}

// goXZReader says whose a read error is, as the host's xz does.
type goXZReader struct{ r io.Reader }

func (g goXZReader) Read(p []byte) (int, error) {
	n, err := g.r.Read(p)
	if err != nil && err != io.EOF {
		err = fmt.Errorf("xz: %w", err)
	}
	return n, err
}

// lookHostXZ is the host's xz, or "" when there is none. exec.LookPath
// refuses a PATH entry relative to the working directory, so no xz that an
// input put in the work directory is ever found.
func lookHostXZ() string {
	p, err := exec.LookPath("xz")
	if err != nil {
		return ""
	}
	return p
}

// hostXZReader is xz --decompress reading r and writing what Read returns.
// Read gives io.EOF only once xz has exited cleanly, and so after xz has read
// r to its end (xz looks past a stream for another, as the pure-Go decoder
// does); the caller may then read on from r's source.
type hostXZReader struct {
	cmd    *exec.Cmd
	out    io.ReadCloser
	stderr *bytes.Buffer // read only once xz was reaped

	once sync.Once
	err  error // the outcome of wait, once it ran
}

func startHostXZ(r io.Reader, path string) (*hostXZReader, error) {
	// One thread: the callers decode one stream per core already (the debs
	// layer's packages), and xz decodes a multi-block stream (the kernel's)
	// on as many threads as it is told at about 60 MiB each, where one
	// takes 10 MiB. No environment: XZ_DEFAULTS or XZ_OPT of the caller's
	// shell would change threads and limits, not bytes, but a limit can fail
	// a build that works elsewhere.
	cmd := exec.Command(path, "--decompress", "--stdout", "--threads=1", "--no-warn")
	cmd.Env = []string{}
	cmd.Stdin = r
	// xz writes one line for an error and nothing else (--no-warn).
	stderr := &bytes.Buffer{}
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("xz: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("xz: %s: %w", path, err)
	}
	return &hostXZReader{cmd: cmd, out: out, stderr: stderr}, nil
}

func (h *hostXZReader) Read(p []byte) (int, error) {
	if h.cmd.ProcessState != nil {
		// Reaped: wait closed the pipe, and its outcome is the answer.
		if h.err != nil {
			return 0, h.err
		}
		return 0, io.EOF
	}
	n, err := h.out.Read(p)
	if err == io.EOF {
		if werr := h.wait(); werr != nil {
			return n, werr
		}
	}
	return n, err
}

// Close stops xz if it is still running. It does not close r.
func (h *hostXZReader) Close() error {
	if h.cmd.ProcessState == nil {
		h.cmd.Process.Kill()
	}
	werr := h.wait()
	if errors.Is(werr, errKilled) {
		return nil
	}
	return werr
}

var errKilled = errors.New("xz: stopped before the end of the stream")

// wait reaps xz once and turns a failure into an error in xz's own words.
func (h *hostXZReader) wait() error {
	h.once.Do(func() {
		err := h.cmd.Wait()
		var exit *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &exit) && !exit.Exited():
			h.err = errKilled
		case errors.As(err, &exit):
			msg := strings.TrimSpace(h.stderr.String())
			// "xz: (stdin): Compressed data is corrupt" reads as "xz:
			// compressed data is corrupt" beside the member it came from.
			msg = strings.TrimPrefix(strings.TrimPrefix(msg, "xz: "), "(stdin): ")
			if msg == "" {
				msg = exit.Error()
			}
			h.err = fmt.Errorf("xz: %s", msg)
		default:
			h.err = fmt.Errorf("xz: %w", err)
		}
	})
	return h.err
}
