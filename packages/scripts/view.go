package scripts

import (
	"fmt"
	"io"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"sync"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/interp"

	"github.com/stamp-dev/stamp/rootfs"
)

// What the interpreter sees of the world is the image. Its working
// directory is inside the tree's directory, so its own checks (cd's
// search permission) look at the tree; every path it hands a handler is
// turned into the image's (treePath), and what it would say of its
// directory (pwd, $PWD, $OLDPWD) is said in image paths; cd is given the
// tree's directory of the image path it names. $UID and $EUID are 0, ~user
// comes from the image's passwd, and every file test is root's answer from
// the index. Nothing of the build host (its work path, its users, its uid,
// its TMPDIR) reaches a script, so a root build and a uid-65534 build run
// every script alike.

// imageEnviron is the script's starting environment plus the variables
// the interpreter would otherwise take from the host.
type imageEnviron struct {
	expand.Environ
	r *run
}

func readOnly(v string) expand.Variable {
	return expand.Variable{Set: true, Kind: expand.String, ReadOnly: true, Str: v}
}

func (e imageEnviron) Get(name string) expand.Variable {
	switch name {
	case "UID", "EUID", "GID":
		return readOnly("0")
	case pidVar:
		// A fixed stand-in: the host's pid would make outputs differ.
		return readOnly("2")
	case ppidVar:
		return readOnly("1")
	}
	if user, ok := strings.CutPrefix(name, "HOME "); ok {
		// ~user: the image's passwd, or the word left as it is, as a
		// shell leaves it for a user it does not know.
		if f := e.r.lookupAccount("/etc/passwd", user); len(f) > 5 {
			return expand.Variable{Set: true, Kind: expand.String, Str: f[5]}
		}
		return expand.Variable{Set: true, Kind: expand.String, Str: "~" + user}
	}
	return e.Environ.Get(name)
}

// virtualFiles hold what process substitutions printed and the rewritten
// code of sourced files, under paths in /dev/fd that no tree holds.
type virtualFiles struct {
	mu    sync.Mutex
	next  int
	files map[string][]byte
}

func (r *run) addVirtual(data []byte) string {
	v := r.virtual
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.files == nil {
		v.files, v.next = map[string][]byte{}, 63
	}
	p := "/dev/fd/" + strconv.Itoa(v.next)
	if v.next > 10 {
		v.next--
	} else {
		p = "/dev/fd/stamp-" + strconv.Itoa(len(v.files))
	}
	v.files[p] = data
	return p
}

func (r *run) virtualFile(p string) ([]byte, bool) {
	v := r.virtual
	v.mu.Lock()
	defer v.mu.Unlock()
	b, ok := v.files[p]
	return b, ok
}

// rewriteCall sends the builtins that would ask the host, or run code the
// rewrite has not seen, to their image-side forms; commands run through
// command or builtin are looked at past those words.
func (r *run) rewriteCall(cwd string, args []string) ([]string, error) {
	i := 0
	for i < len(args)-1 && (args[i] == "command" && !strings.HasPrefix(args[i+1], "-") || args[i] == "builtin") {
		i++
	}
	rest, err := r.rewriteBuiltin(cwd, args[i:])
	if err != nil {
		return nil, err
	}
	if len(rest) > 0 && strings.HasPrefix(rest[0], "stamp-") {
		// builtin and command would look for a builtin of that name.
		return rest, nil
	}
	return append(append([]string(nil), args[:i]...), rest...), nil
}

func (r *run) rewriteBuiltin(cwd string, args []string) ([]string, error) {
	switch args[0] {
	case "[", "test", "pwd":
		return append([]string{"stamp-" + args[0]}, args[1:]...), nil
	case "cd":
		return r.rewriteCd(cwd, args)
	case "dirs", "pushd", "popd":
		return nil, r.unhandled(fmt.Sprintf("%s (the directory stack)", args[0]))
	case "set", "export", "declare", "typeset", "readonly":
		// With no operand, or only -p, they print every variable, $PWD
		// among them as the interpreter keeps it.
		printsAll := true
		for _, a := range args[1:] {
			if a != "-p" {
				printsAll = false
			}
		}
		if printsAll && (args[0] != "set" || len(args) == 1) {
			return nil, r.unhandled(fmt.Sprintf("%s listing every variable", shorten(strings.Join(args, " "))))
		}
	case "eval":
		code, ok := reprint(strings.Join(args[1:], " "))
		if !ok {
			return args, nil
		}
		return []string{"eval", code}, nil
	case ".", "source":
		if len(args) < 2 {
			return args, nil
		}
		p, ok := r.sourcePath(cwd, args[1])
		if !ok {
			return args, nil
		}
		var body []byte
		if p == debconfModule {
			body = []byte(debconfShim)
		} else {
			b, err := r.readFile(p)
			if err != nil {
				return args, nil
			}
			body = b
		}
		code, ok := reprint(string(body))
		if !ok {
			return args, nil
		}
		return append([]string{args[0], r.addVirtual([]byte(code))}, args[2:]...), nil
	case "alias":
		out := []string{args[0]}
		for _, a := range args[1:] {
			name, value, ok := strings.Cut(a, "=")
			if ok {
				code, parsed := reprint(value)
				if !parsed {
					return nil, r.unhandled(fmt.Sprintf("alias %s", shorten(a)))
				}
				a = name + "=" + strings.TrimSuffix(code, "\n")
			}
			out = append(out, a)
		}
		return out, nil
	case "trap":
		if len(args) >= 3 && args[1] != "-" && args[1] != "" && !strings.HasPrefix(args[1], "-") {
			code, ok := reprint(args[1])
			if !ok {
				return nil, r.unhandled(fmt.Sprintf("trap %s", shorten(args[1])))
			}
			out := append([]string{args[0], code}, args[2:]...)
			return r.rewriteTrap(out), nil
		}
		return r.rewriteTrap(args), nil
	}
	return args, nil
}

// rewriteCd gives cd the tree's directory of the image path it names, so
// its search-permission check looks at the tree, never at the host; a
// directory reached through a symlink is given resolved.
func (r *run) rewriteCd(cwd string, args []string) ([]string, error) {
	var target string
	switch {
	case len(args) == 1:
		target = "/root"
		if h := r.lookupAccount("/etc/passwd", "root"); len(h) > 5 {
			target = h[5]
		}
	case len(args) == 2 && args[1] == "-":
		return args, nil // $OLDPWD is the tree's directory already
	case len(args) == 2 && !strings.HasPrefix(args[1], "-"):
		target = args[1]
	default:
		return nil, r.unhandledCommand(args)
	}
	p := r.treePath(cwd, target)
	if r.absoluteLinkOn(p) {
		// The host would follow it out of the tree: give it resolved.
		if rp, err := r.env.Tree.Resolve(p, true); err == nil {
			p = rp
		}
	}
	return []string{"cd", strings.TrimSuffix(r.env.Tree.Dir()+p, "/")}, nil
}

// absoluteLinkOn reports whether a symlink with an absolute target, or
// one that climbs with .., lies on the image path p.
func (r *run) absoluteLinkOn(p string) bool {
	cur := ""
	for _, c := range strings.Split(strings.Trim(p, "/"), "/") {
		cur += "/" + c
		e := r.env.Tree.Get(cur)
		if e == nil {
			rp, err := r.env.Tree.Resolve(cur, false)
			if err != nil {
				return false
			}
			e = r.env.Tree.Get(rp)
		}
		if e != nil && e.Type == rootfs.TypeSymlink && (path.IsAbs(e.Target) || strings.Contains(e.Target, "..")) {
			return true
		}
	}
	return false
}

// cmdVar prints $PWD or $OLDPWD as the image sees it.
func cmdVar(r *run, hc interp.HandlerContext, args []string) error {
	if len(args) == 2 && args[1] == "PWD" {
		fmt.Fprint(hc.Stdout, r.treePath(hc.Dir, hc.Dir))
		return nil
	}
	if v := hc.Env.Get("OLDPWD"); len(args) == 2 && args[1] == "OLDPWD" && v.IsSet() {
		fmt.Fprint(hc.Stdout, r.treePath(hc.Dir, v.String()))
	}
	return nil
}

// sourcePath finds the file . names, as a shell does: a name with a slash
// from the working directory, another through PATH, then the working
// directory.
func (r *run) sourcePath(cwd, name string) (string, bool) {
	if strings.Contains(name, "/") {
		return r.treePath(cwd, name), true
	}
	for _, dir := range pathDirs {
		if e, err := r.env.Tree.Lookup(dir+"/"+name, true); err == nil && e.Type == rootfs.TypeRegular {
			return dir + "/" + name, true
		}
	}
	return r.treePath(cwd, name), true
}

// cmdPwd is pwd: the working directory in the image, with -P its symlinks
// resolved inside the tree.
func cmdPwd(r *run, hc interp.HandlerContext, args []string) error {
	physical := false
	for _, a := range args[1:] {
		switch a {
		case "-P":
			physical = true
		case "-L":
			physical = false
		default:
			fmt.Fprintf(hc.Stderr, "pwd: invalid option: %s\n", a)
			return exit(2)
		}
	}
	dir := r.treePath(hc.Dir, hc.Dir)
	if physical {
		rp, err := r.env.Tree.Resolve(dir, true)
		if err != nil {
			fmt.Fprintf(hc.Stderr, "pwd: %v\n", err)
			return exit(1)
		}
		dir = rp
	}
	fmt.Fprintln(hc.Stdout, dir)
	return nil
}

// cmdFileTest answers a [[ ]] operator the rewrite sent here: "1" when it
// holds.
func cmdFileTest(r *run, hc interp.HandlerContext, args []string) error {
	var ok bool
	switch {
	case len(args) == 3:
		ok = r.fileTest(hc.Dir, args[1], args[2])
	case len(args) == 4:
		ok = r.fileCompare(hc.Dir, args[2], args[1], args[3])
	}
	if ok {
		fmt.Fprintln(hc.Stdout, "1")
	}
	return nil
}

// cmdProcSubst keeps what a process substitution printed and prints the
// path the command is given to read it.
func cmdProcSubst(r *run, hc interp.HandlerContext, _ []string) error {
	b, err := io.ReadAll(hc.Stdin)
	if err != nil {
		return err
	}
	fmt.Fprint(hc.Stdout, r.addVirtual(b))
	return nil
}

// cmdRefuse is a construct the rewrite found that no handler supports.
func cmdRefuse(r *run, _ interp.HandlerContext, args []string) error {
	return r.unhandled(strings.Join(args[1:], " "))
}

// cmdFd checks a descriptor given by a variable (>&$fd) when it is used.
// One it refuses becomes "-", which the interpreter can apply, and the
// script ends as unhandled.
func cmdFd(r *run, hc interp.HandlerContext, args []string) error {
	if len(args) == 3 {
		switch fd := args[2]; {
		case fd == "-", args[1] == ">&" && (fd == "1" || fd == "2"):
			fmt.Fprint(hc.Stdout, fd)
			return nil
		}
	}
	r.unhandled(fmt.Sprintf("redirection %s", strings.Join(args[1:], "")))
	fmt.Fprint(hc.Stdout, "-")
	return nil
}

// stdStream is a /dev path that names one of the script's own streams.
func stdStream(hc interp.HandlerContext, p string, write bool) (io.ReadWriteCloser, bool) {
	switch p {
	case "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1":
		return streamFile{w: hc.Stdout}, write
	case "/dev/stderr", "/dev/fd/2", "/proc/self/fd/2":
		return streamFile{w: hc.Stderr}, write
	case "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0":
		return streamFile{r: hc.Stdin}, !write
	}
	return nil, false
}

type streamFile struct {
	r io.Reader
	w io.Writer
}

func (s streamFile) Read(b []byte) (int, error) {
	if s.r == nil {
		return 0, io.EOF
	}
	return s.r.Read(b)
}

func (s streamFile) Write(b []byte) (int, error) {
	if s.w == nil {
		return 0, fs.ErrPermission
	}
	return s.w.Write(b)
}

func (streamFile) Close() error { return nil }

func cmdCommandV(r *run, hc interp.HandlerContext, args []string) error {
	code := 0
	for _, a := range args[1:] {
		if p, ok := r.lookPath(hc.Dir, a); ok {
			fmt.Fprintln(hc.Stdout, p)
		} else {
			code = 1
		}
	}
	return exit(code)
}

func cmdWhich(r *run, hc interp.HandlerContext, args []string) error {
	code := 0
	for _, a := range args[1:] {
		if strings.HasPrefix(a, "-") {
			continue
		}
		if p, ok := r.lookPath(hc.Dir, a); ok && !builtins[a] {
			fmt.Fprintln(hc.Stdout, p)
		} else {
			code = 1
		}
	}
	return exit(code)
}

// cmdUmask is the shell's umask builtin, which the interpreter lacks: it
// prints or sets the script's mask, which the files its redirections and
// handlers create are made with.
func cmdUmask(r *run, hc interp.HandlerContext, args []string) error {
	if len(args) == 1 {
		fmt.Fprintf(hc.Stdout, "%04o\n", r.umask)
		return nil
	}
	if len(args) != 2 || strings.HasPrefix(args[1], "-") {
		return r.unhandled(fmt.Sprintf("command %q", "umask "+strings.Join(args[1:], " ")))
	}
	m, err := strconv.ParseUint(args[1], 8, 32)
	if err != nil || m > 0o777 {
		fmt.Fprintf(hc.Stderr, "umask: %s: invalid mode\n", args[1])
		return exit(2)
	}
	r.umask = uint32(m)
	return nil
}
