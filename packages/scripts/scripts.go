package scripts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"path"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/interp"
	"mvdan.cc/sh/v3/syntax"

	"github.com/stamp-dev/stamp/rootfs"
)

// Env is the tree a script runs against and the services it may call.
type Env struct {
	Tree  *rootfs.Tree
	Arch  string
	Epoch time.Time
	// Origin is recorded on entries the scripts make.
	Origin rootfs.Origin
	// Logf receives what scripts print and what the handlers do; nil
	// discards it.
	Logf func(format string, args ...any)
	// Systemctl runs a systemctl verb (enable, preset, disable, mask,
	// unmask) on the tree, as systemctl --root does. Nil makes those
	// verbs unhandled.
	Systemctl func(ctx context.Context, verb string, units []string) error
	// AddGroup and AddUser create system accounts as groupadd/useradd
	// --root do; an existing account is left alone. Nil makes the account
	// commands unhandled.
	AddGroup func(ctx context.Context, g Group) error
	AddUser  func(ctx context.Context, u User) error
	// Defer is offered each command of the image that no handler covers,
	// with argv[0] its path in the image, before the command counts as
	// unhandled. Returning true means the caller runs it on first boot;
	// the script goes on as if it had succeeded. Nil defers nothing.
	Defer func(pkg string, argv []string) bool

	// NoPrograms makes every handler that would run a program of the
	// image (in rootfs/sandbox) unhandled: a recipe's offline-only.
	NoPrograms bool

	// debconf is the question database the scripts share, made when the
	// first one sources debconf's confmodule.
	debconf *debconfDB
	// skippedKeys are the SSH host keys scripts asked for and the build
	// did not make.
	skippedKeys map[string]bool
	// pyc are the byte-compiles asked for and not run yet.
	pyc pyBatch
	// once makes progs, the sandbox the handlers run programs in.
	once  sync.Once
	progs *programs
	// dispatched, when set, hears the table name of each handler run (the
	// table's test checks each case runs the handler it names).
	dispatched func(name string)
}

// Group is a group a script asks for.
type Group struct {
	Name   string
	GID    *uint32
	System bool
}

// User is an account a script asks for.
type User struct {
	Name       string
	UID        *uint32
	Group      string // primary group; "" for the default
	GID        *uint32
	Home       string
	Shell      string
	Comment    string
	System     bool
	CreateHome bool
	Groups     []string
}

// Script is one maintainer script of a package.
type Script struct {
	Package string // e.g. "iptables"
	Version string
	Name    string // preinst, postinst, ...
	Body    []byte
}

// UnhandledError is a script that does something the offline handlers
// cannot do.
type UnhandledError struct {
	Package, Script string
	What            string
}

func (e *UnhandledError) Error() string {
	return fmt.Sprintf("%s %s: %s is not handled offline", e.Package, e.Script, e.What)
}

// ScriptError is a script that failed (a non-zero exit, as dpkg would see).
type ScriptError struct {
	Package, Script string
	Status          uint8
	Output          string
}

func (e *ScriptError) Error() string {
	s := fmt.Sprintf("%s %s exited with status %d", e.Package, e.Script, e.Status)
	if e.Output != "" {
		s += ":\n" + e.Output
	}
	return s
}

// run is one script's execution.
type run struct {
	env    *Env
	s      Script
	ctx    context.Context
	output bytes.Buffer
	// umask is the script's file creation mask; dpkg runs scripts with 022.
	umask uint32
	// dsh is the instance deb-systemd-helper works on in this call.
	dsh *dshInstance
	// virtual are the files process substitutions and sourced code left
	// in memory.
	virtual *virtualFiles
	// refusedMu guards refused, the first thing this script did that no
	// handler covers: it stops the script as unhandled even where the
	// interpreter would only print it (a redirection's word) or the
	// script would swallow it (|| true).
	refusedMu sync.Mutex
	refused   *UnhandledError
	// calls counts the commands the script ran, against maxCalls.
	calls atomic.Int64
}

// A script that runs away is refused before it exhausts the build: more
// commands than any maintainer script runs, or recursion deeper than
// maxFrames of the interpreter's Go stack (a few hundred shell calls deep),
// which would otherwise end the process.
const (
	maxCalls  = 200000
	maxFrames = 20000
)

// Run interprets the script with args ($1, $2...) against the tree, as
// dpkg runs it: in the root, with DPKG_MAINTSCRIPT_* set and a fixed
// environment.
func Run(ctx context.Context, env *Env, s Script, args ...string) error {
	vars := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"LANG=C.UTF-8", "LC_ALL=C.UTF-8", "TZ=UTC", "HOME=/root", "SHELL=/bin/sh", "PWD=/",
		"DEBIAN_FRONTEND=noninteractive", "DPKG_ROOT=", "DPKG_ADMINDIR=/var/lib/dpkg",
		"DPKG_MAINTSCRIPT_PACKAGE=" + s.Package, "DPKG_MAINTSCRIPT_NAME=" + s.Name,
		"DPKG_MAINTSCRIPT_ARCH=" + env.Arch, "DPKG_MAINTSCRIPT_PACKAGE_REFCOUNT=1",
		"DPKG_RUNNING_VERSION=1.21.22",
		"SOURCE_DATE_EPOCH=" + strconv.FormatInt(env.Epoch.Unix(), 10),
	}
	r := &run{env: env, s: s, ctx: ctx, umask: 0o022, virtual: &virtualFiles{}}
	err := r.interpret(ctx, vars, args, &r.output, &r.output)
	if out := strings.TrimSpace(r.output.String()); out != "" {
		r.logf("%s %s: %s", s.Package, s.Name, out)
	}
	return err
}

// settlesFirstRE finds the commands (and words) that make a script wait for
// the byte-compiles put off before it: one that names .pyc files or
// __pycache__, or moves, links, copies or removes files. dh_python3's
// postinst snippets name none of them, so the compiles of a run of Python
// packages still go together.
var settlesFirstRE = regexp.MustCompile(`pyc|(^|[^A-Za-z0-9_-])(rm|rmdir|unlink|mv|ln|cp|find|dpkg-divert|dpkg-maintscript-helper)([^A-Za-z0-9_.-]|$)`)

// nested interprets another script from the tree as a command of this one
// (run-parts runs them), with this script's exported variables.
func (r *run) nested(ctx context.Context, hc interp.HandlerContext, s Script, args []string) error {
	var vars []string
	hc.Env.Each(func(name string, v expand.Variable) bool {
		if v.Exported && v.IsSet() {
			vars = append(vars, name+"="+v.String())
		}
		return true
	})
	n := &run{env: r.env, s: s, ctx: ctx, umask: r.umask, virtual: &virtualFiles{}}
	return n.interpret(ctx, vars, args, hc.Stdout, hc.Stderr)
}

func (r *run) interpret(ctx context.Context, vars, args []string, stdout, stderr io.Writer) (err error) {
	s := r.s
	// The interpreter panics on what it does not implement; the constructs
	// known to reach that are refused before the run, and this turns any
	// other into a refusal naming the script instead of the build's end.
	defer func() {
		if p := recover(); p != nil {
			err = s.unhandled(fmt.Sprintf("a construct the interpreter stopped on (%v)", p))
		}
	}()
	// A script that may look at, move or remove what the compiles put off
	// read or would write runs after them.
	if settlesFirstRE.Match(s.Body) {
		if err := r.env.settlePython(ctx); err != nil {
			return err
		}
	}
	interpreter := shebang(s.Body)
	switch path.Base(interpreter) {
	case "sh", "bash", "dash":
	default:
		return s.unhandled("interpreter " + interpreter)
	}
	f, err := syntax.NewParser(syntax.KeepComments(false)).Parse(bytes.NewReader(s.Body), s.Name)
	if err != nil {
		return s.unhandled(fmt.Sprintf("shell syntax (%v)", err))
	}
	rewrite(f)
	var output bytes.Buffer
	// Options on the #! line (#!/bin/sh -e) are the shell's options.
	params := append(shebangOptions(s.Body), "--")
	runner, err := interp.New(
		interp.Env(imageEnviron{expand.ListEnviron(vars...), r}),
		// The tree's directory, so the interpreter's own checks (cd's) see
		// the tree; what it says of it (pwd, $PWD) is rewritten into image
		// paths.
		interp.Dir(r.env.Tree.Dir()),
		interp.Params(append(params, args...)...),
		interp.StdIO(strings.NewReader(""), io.MultiWriter(stdout, &output), io.MultiWriter(stderr, &output)),
		interp.CallHandler(r.call),
		interp.ExecHandlers(func(interp.ExecHandlerFunc) interp.ExecHandlerFunc { return r.exec }),
		interp.OpenHandler(r.open),
		interp.StatHandler(r.stat),
		interp.ReadDirHandler2(r.readDir),
	)
	if err != nil {
		return err
	}
	// $RANDOM starts from a seed of the script's name, so two builds
	// draw the same numbers.
	seed := fnv.New64a()
	io.WriteString(seed, s.Package+"\x00"+s.Name)
	seeding := &syntax.File{Stmts: []*syntax.Stmt{{Cmd: &syntax.CallExpr{Assigns: []*syntax.Assign{{
		Name: &syntax.Lit{Value: "RANDOM"}, Value: lit(strconv.FormatUint(seed.Sum64()%32768, 10))}}}}}}
	err = runner.Run(ctx, seeding)
	if err == nil {
		err = runner.Run(ctx, f)
	}
	r.refusedMu.Lock()
	refused := r.refused
	r.refusedMu.Unlock()
	if refused != nil {
		return refused
	}
	if err == nil {
		return nil
	}
	if st, ok := interp.IsExitStatus(err); ok {
		if st == 0 {
			return nil
		}
		return &ScriptError{Package: s.Package, Script: s.Name, Status: st, Output: strings.TrimSpace(output.String())}
	}
	var ue *UnhandledError
	if errors.As(err, &ue) {
		return ue
	}
	return fmt.Errorf("%s %s: %w", s.Package, s.Name, err)
}

func shebang(b []byte) string {
	if !bytes.HasPrefix(b, []byte("#!")) {
		return "/bin/sh"
	}
	line, _, _ := bytes.Cut(b[2:], []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) == 0 {
		return "/bin/sh"
	}
	if path.Base(f[0]) == "env" && len(f) > 1 {
		return f[1]
	}
	return f[0]
}

// shebangOptions returns the single-letter options of a #! line that set
// shell options (-e, -u), which sh takes from there as from set.
func shebangOptions(b []byte) []string {
	if !bytes.HasPrefix(b, []byte("#!")) {
		return nil
	}
	line, _, _ := bytes.Cut(b[2:], []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) > 0 && path.Base(f[0]) == "env" {
		f = f[1:]
	}
	var out []string
	for _, o := range f[min(1, len(f)):] {
		if !strings.HasPrefix(o, "-") || o == "-" || o == "--" {
			continue
		}
		for _, c := range o[1:] {
			if c == 'e' || c == 'u' {
				out = append(out, "-"+string(c))
			}
		}
	}
	return out
}

// unhandledCommand refuses the command line args, with why (at most one)
// saying what of it no handler covers.
func (r *run) unhandledCommand(args []string, why ...string) error {
	what := fmt.Sprintf("command %q", strings.Join(args, " "))
	for _, w := range why {
		what += " (" + w + ")"
	}
	return r.unhandled(what)
}

// unhandled is the error naming the script and what of it is not handled.
func (s Script) unhandled(what string) *UnhandledError {
	return &UnhandledError{Package: s.Package, Script: s.Name, What: what}
}

func (r *run) logf(format string, args ...any) {
	if r.env.Logf != nil {
		r.env.Logf(format, args...)
	}
}

// unhandled is the one way a script is refused: what names what it did
// that no handler covers. The first refusal is kept, so the script stops
// as unhandled even where the shell would go on (|| true, a redirection's
// word).
func (r *run) unhandled(what string) error {
	ue := r.s.unhandled(what)
	r.refusedMu.Lock()
	if r.refused == nil {
		r.refused = ue
	}
	r.refusedMu.Unlock()
	return ue
}

// treePath turns a path the interpreter or a script produced (absolute
// in the image, under the tree's directory after the interpreter joined a
// relative one with its working directory, or relative to that) into a
// clean path inside the tree.
func (r *run) treePath(cwd, p string) string {
	if !path.IsAbs(p) {
		// A handler's relative operand is relative to the script's
		// working directory (after a cd), and .. stops at the image's
		// root, as it does there.
		return path.Join(r.imagePath(cwd), p)
	}
	return r.imagePath(p)
}

// imagePath is the image's path of an absolute path the interpreter
// produced: under the tree's directory, or already the image's.
func (r *run) imagePath(p string) string {
	dir := r.env.Tree.Dir()
	if p == dir || p == "" {
		return "/"
	}
	if rest, ok := strings.CutPrefix(p, dir+"/"); ok {
		return path.Clean("/" + rest)
	}
	return path.Clean("/" + p)
}

// call rewrites builtins that would look at the host or run code the
// rewrite has not seen (rewriteCall), and command -v (which searches the
// host's PATH).
func (r *run) call(ctx context.Context, args []string) ([]string, error) {
	if len(args) == 0 {
		return args, nil
	}
	if r.calls.Add(1) > maxCalls {
		return nil, r.unhandled(fmt.Sprintf("a script that runs more than %d commands", maxCalls))
	}
	var pc [1]uintptr
	if runtime.Callers(maxFrames, pc[:]) > 0 {
		return nil, r.unhandled("function calls nested too deep")
	}
	cwd := interp.HandlerCtx(ctx).Dir
	switch args[0] {
	case "command":
		if len(args) >= 3 && (args[1] == "-v" || args[1] == "-V") {
			return append([]string{"stamp-command-v"}, args[2:]...), nil
		}
	case "type":
		return append([]string{"stamp-command-v"}, args[1:]...), nil
	case "umask":
		// The interpreter has no umask of its own; the handler keeps the
		// script's, which the files it creates are made with.
		return append([]string{"stamp-umask"}, args[1:]...), nil
	}
	return r.rewriteCall(cwd, args)
}

// rewriteTrap keeps the traps that can fire offline: signal 0 is EXIT,
// which the interpreter knows only by name; no other signal reaches an
// offline script, so traps on them are dropped rather than refused.
func (r *run) rewriteTrap(args []string) []string {
	if len(args) >= 3 && args[1] != "-p" && args[1] != "-l" {
		out := []string{args[0], args[1]}
		for _, c := range args[2:] {
			switch strings.ToUpper(strings.TrimPrefix(c, "SIG")) {
			case "0", "EXIT":
				out = append(out, "EXIT")
			case "ERR":
				out = append(out, "ERR")
			}
		}
		if len(out) == 2 {
			return []string{"true"}
		}
		return out
	}
	return args
}

// lookPath finds an executable in the tree's PATH, as command -v does.
func (r *run) lookPath(cwd, name string) (string, bool) {
	if strings.Contains(name, "/") {
		e, err := r.env.Tree.Lookup(r.treePath(cwd, name), true)
		return name, err == nil && e.Type == rootfs.TypeRegular && e.Perm&0o111 != 0
	}
	if builtins[name] {
		return name, true
	}
	for _, dir := range pathDirs {
		e, err := r.env.Tree.Lookup(dir+"/"+name, true)
		if err == nil && e.Type == rootfs.TypeRegular && e.Perm&0o111 != 0 {
			return dir + "/" + name, true
		}
	}
	return "", false
}

// pathDirs are the PATH scripts run with, as dpkg sets it.
var pathDirs = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// builtins are the shell builtins command -v reports by name.
var builtins = map[string]bool{"echo": true, "printf": true, "test": true, "[": true, "true": true, "false": true,
	"cd": true, "set": true, "exit": true, "return": true, "shift": true, "read": true, "eval": true, "exec": true,
	"command": true, "type": true, "export": true, "unset": true, "local": true, ":": true, ".": true, "trap": true,
	"umask": true, "wait": true, "getopts": true, "pwd": true, "alias": true, "readonly": true, "times": true}

func (r *run) open(ctx context.Context, name string, flag int, perm os.FileMode) (io.ReadWriteCloser, error) {
	r.refusedMu.Lock()
	refused := r.refused
	r.refusedMu.Unlock()
	if refused != nil {
		// The redirection's word was a refusal: open nothing.
		return nil, refused
	}
	if name == "" {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	// A redirection is opened before its command is called: the
	// directory is the interpreter's now (after a cd).
	p := r.treePath(interp.HandlerCtx(ctx).Dir, name)
	if p == "/dev/null" {
		return devNull{}, nil
	}
	write := flag&(os.O_WRONLY|os.O_RDWR) != 0
	if f, ok := stdStream(interp.HandlerCtx(ctx), p, write); ok {
		return f, nil
	}
	if b, ok := r.virtualFile(p); ok {
		if write {
			return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrPermission}
		}
		return nopCloser{strings.NewReader(string(b))}, nil
	}
	if strings.HasPrefix(p, "/dev/") && write {
		// A device (a terminal, the console): there is none offline, and
		// a file written there would be a file in the image's /dev.
		return nil, &fs.PathError{Op: "open", Path: name, Err: syscall.ENXIO}
	}
	if p == debconfModule && flag&(os.O_WRONLY|os.O_RDWR) == 0 {
		return nopCloser{strings.NewReader(debconfShim)}, nil
	}
	t := r.env.Tree
	if flag&(os.O_WRONLY|os.O_RDWR) == 0 {
		e, err := t.Lookup(p, true)
		if err != nil {
			return nil, err
		}
		f, err := t.Open(e.Path)
		if err != nil {
			return nil, err
		}
		return readOnlyFile{f}, nil
	}
	w := &treeWriter{r: r, path: p, perm: uint32(perm) &^ r.umask}
	if flag&os.O_APPEND != 0 || flag&os.O_TRUNC == 0 {
		if b, err := r.readFile(p); err == nil {
			w.buf.Write(b)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	if flag&os.O_CREATE == 0 {
		if _, err := t.Lookup(p, true); err != nil {
			return nil, err
		}
	}
	return w, nil
}

type devNull struct{}

func (devNull) Read([]byte) (int, error)    { return 0, io.EOF }
func (devNull) Write(b []byte) (int, error) { return len(b), nil }
func (devNull) Close() error                { return nil }

// treeWriter collects what a redirection writes and puts it in the tree
// when closed: an existing file keeps its mode and owner.
type treeWriter struct {
	r    *run
	path string
	perm uint32
	buf  bytes.Buffer
}

func (w *treeWriter) Read([]byte) (int, error)    { return 0, io.EOF }
func (w *treeWriter) Write(b []byte) (int, error) { return w.buf.Write(b) }
func (w *treeWriter) Close() error                { return w.r.writeFile(w.path, w.buf.Bytes(), w.perm) }

func (r *run) readFile(p string) ([]byte, error) {
	if p == "/dev/null" {
		return nil, nil
	}
	if b, ok := r.virtualFile(p); ok {
		return b, nil
	}
	e, err := r.env.Tree.Lookup(p, true)
	if err != nil {
		return nil, err
	}
	f, err := r.env.Tree.Open(e.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

func (r *run) origin() rootfs.Origin {
	o := r.env.Origin
	if o.Member == "" {
		o.Member = r.s.Package + ":" + r.s.Name
	}
	return o
}

// writeFile replaces the file at p (following a symlink as the image
// would); an existing file keeps its mode and owner.
func (r *run) writeFile(p string, data []byte, perm uint32) error {
	t := r.env.Tree
	rp, err := t.Resolve(p, true)
	if err != nil {
		return err
	}
	h := rootfs.Header{Type: rootfs.TypeRegular, Perm: perm, MTime: r.env.Epoch, Origin: r.origin()}
	if e := t.Get(rp); e != nil && e.Type == rootfs.TypeRegular {
		h.Perm, h.UID, h.GID, h.Xattrs = e.Perm, e.UID, e.GID, e.Xattrs
	}
	if err := r.mkdirAll(path.Dir(rp)); err != nil {
		return err
	}
	_, err = t.Create(rp, h, bytes.NewReader(data))
	return err
}

func (r *run) mkdirAll(p string) error {
	_, err := r.env.Tree.MkdirAll(p, rootfs.Header{Perm: 0o755, MTime: r.env.Epoch, Origin: r.origin()})
	return err
}

func (r *run) symlink(target, p string) error {
	t := r.env.Tree
	rp, err := t.Resolve(p, false)
	if err != nil {
		return err
	}
	if err := r.mkdirAll(path.Dir(rp)); err != nil {
		return err
	}
	_, err = t.Create(rp, rootfs.Header{Type: rootfs.TypeSymlink, Perm: 0o777, Target: target, MTime: r.env.Epoch, Origin: r.origin()}, nil)
	return err
}

func (r *run) stat(ctx context.Context, name string, follow bool) (fs.FileInfo, error) {
	if name == "" {
		// test -e "": no file, wherever the script is.
		return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrNotExist}
	}
	// The interpreter hands stat an absolute path, joined with its
	// working directory.
	if b, ok := r.virtualFile(r.treePath("/", name)); ok {
		return rootfs.FileInfo(path.Base(name), &rootfs.Entry{Path: r.treePath("/", name),
			Inode: &rootfs.Inode{Type: rootfs.TypeFifo, Perm: 0o600, Size: int64(len(b))}}), nil
	}
	e, err := r.env.Tree.Lookup(r.treePath("/", name), follow)
	if err != nil {
		return nil, err
	}
	if e.Type == rootfs.TypeDir {
		// A directory's size on the file systems images use: test -s
		// holds for it.
		return dirInfo{rootfs.FileInfo(path.Base(e.Path), e)}, nil
	}
	return rootfs.FileInfo(path.Base(e.Path), e), nil
}

type dirInfo struct{ fs.FileInfo }

func (dirInfo) Size() int64 { return 4096 }

func (r *run) readDir(ctx context.Context, name string) ([]fs.DirEntry, error) {
	e, err := r.env.Tree.Lookup(r.treePath(interp.HandlerCtx(ctx).Dir, name), true)
	if err != nil {
		return nil, err
	}
	if e.Type != rootfs.TypeDir {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: rootfs.ErrNotDir}
	}
	var out []fs.DirEntry
	for _, c := range r.env.Tree.Children(e.Path) {
		out = append(out, fs.FileInfoToDirEntry(rootfs.FileInfo(c, r.env.Tree.Get(path.Join(e.Path, c)))))
	}
	return out, nil
}

type nopCloser struct{ *strings.Reader }

// readOnlyFile is a tree's file opened for reading, as the shell sees it.
type readOnlyFile struct{ *rootfs.File }

func (readOnlyFile) Write([]byte) (int, error) { return 0, os.ErrPermission }

func (nopCloser) Write([]byte) (int, error) { return 0, os.ErrPermission }
func (nopCloser) Close() error              { return nil }
