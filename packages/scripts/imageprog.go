package scripts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
	"mvdan.cc/sh/v3/interp"

	"github.com/stamp-dev/stamp/rootfs/sandbox"
)

// The one way a handler runs a program of the image (python's py_compile
// today): in rootfs/sandbox, chrooted into the tree mounted read-only, in
// a user namespace, with no network and nothing of the host in view but
// an empty output directory. Whatever the program makes, it leaves there;
// the handler reads it back and writes it into the tree through the index,
// so the program changes nothing behind the index and never runs on the
// host itself.

// programs is the sandbox the handlers of one Env share: its namespace
// probe runs once, and its runs one at a time.
type programs struct {
	mu  sync.Mutex
	box *sandbox.Sandbox
	err error // why no program can run here, once known
}

// imageRun is one program run: its output directory on the host, which
// done removes.
type imageRun struct {
	out string
}

// read returns the regular file a program left in its output directory
// under name; a symlink or anything else it put there is not followed.
func (ir *imageRun) read(name string) ([]byte, error) {
	fd, err := unix.Open(filepath.Join(ir.out, name), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", name)
	}
	return io.ReadAll(f)
}

// write puts an input for the program into its output directory.
func (ir *imageRun) write(name string, data []byte) error {
	return os.WriteFile(filepath.Join(ir.out, name), data, 0o600)
}

// inside is where the program sees name of the output directory.
func (ir *imageRun) inside(name string) string { return sandbox.OutputDir + "/" + name }

func (ir *imageRun) done() { os.RemoveAll(ir.out) }

// runImageProgramAt runs argv (a program of the image, by its path in the
// image) in the sandbox, after prepare has put its inputs into the run's
// output directory, which is also bound at the tree's directory at
// (resolved, with no symlink on the way) unless at is empty: for a program
// that writes where it reads and takes no option to write elsewhere; the
// output directory hides what the tree holds there. What the program
// prints goes to the script's stderr, with the output directory's path as
// the program saw it; a non-zero exit is the script's status (returned
// with the run, whose files the caller may still read). A build that may
// run no program (offline-only), a machine where the sandbox cannot work,
// or a program of an architecture the machine cannot run makes the
// command unhandled, naming why.
func (r *run) runImageProgramAt(hc interp.HandlerContext, what, at string, env []string, prepare func(*imageRun) error, argv ...string) (*imageRun, error) {
	if err := r.programsReady(what); err != nil {
		return nil, err
	}
	// A program may read what the byte-compiles put off would write.
	if err := r.env.settlePython(r.ctx); err != nil {
		return nil, err
	}
	return r.env.runProgram(r.ctx, r.s, hc.Stderr, what, at, env, prepare, argv...)
}

// programsReady says why no program of the image can run here, as an
// unhandled command naming what wanted one; nil when one can.
func (r *run) programsReady(what string) error {
	if r.env.NoPrograms {
		return r.unhandled(fmt.Sprintf("%s runs a program of the image, and this build runs none (offline-only)", what))
	}
	p := r.env.programs()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil && p.box == nil {
		if err := sandbox.CheckArch(r.env.Arch); err != nil {
			p.err = err
		} else {
			p.box = &sandbox.Sandbox{Tree: r.env.Tree, Epoch: r.env.Epoch, ReadOnly: true}
			p.err = p.box.Available()
		}
	}
	if p.err != nil {
		return r.unhandled(fmt.Sprintf("%s runs a program of the image, which cannot run in a sandbox here: %v", what, p.err))
	}
	return nil
}

// runProgram runs argv in the sandbox programsReady made, for script s,
// what it prints going to stderr.
func (e *Env) runProgram(ctx context.Context, s Script, stderr io.Writer, what, at string, env []string, prepare func(*imageRun) error, argv ...string) (*imageRun, error) {
	p := e.programs()
	p.mu.Lock()
	defer p.mu.Unlock()
	out, err := e.scratchDir(".stamp-program-")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	ir := &imageRun{out: out}
	if err := prepare(ir); err != nil {
		ir.done()
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	var printed bytes.Buffer
	p.box.OutputHost, p.box.OutputAt = out, at
	p.box.Logf = func(_ string, args ...any) {
		// "name: output", as Run logs it.
		if len(args) == 2 {
			fmt.Fprintf(&printed, "%s\n", args[1])
		}
	}
	err = p.box.Run(ctx, what, env, argv...)
	p.box.Logf, p.box.OutputHost, p.box.OutputAt = nil, "", ""
	var ee *sandbox.ExitError
	if errors.As(err, &ee) {
		if ee.Output != "" {
			fmt.Fprintln(stderr, ee.Output)
		}
		return ir, exit(ee.Status)
	}
	if err != nil {
		ir.done()
		return nil, fmt.Errorf("%s %s: %w", s.Package, s.Name, err)
	}
	stderr.Write(printed.Bytes())
	return ir, nil
}

// programs returns the Env's sandbox state, made on first use.
func (e *Env) programs() *programs {
	e.once.Do(func() { e.progs = &programs{} })
	return e.progs
}

// scratchDir makes a scratch directory beside the tree, by an absolute
// path, in the build's work directory and nowhere else on the host.
func (e *Env) scratchDir(prefix string) (string, error) {
	base, err := filepath.Abs(filepath.Dir(e.Tree.Dir()))
	if err != nil {
		return "", err
	}
	return os.MkdirTemp(base, prefix)
}
