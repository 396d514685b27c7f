package scripts

import (
	"fmt"
	"strconv"
	"strings"

	"mvdan.cc/sh/v3/interp"

	"github.com/stamp-dev/stamp/rootfs"
)

// test(1), [ and the file operators of [[ ]] answer from the tree's index,
// as root would see the image (dpkg runs scripts as root): -r and -w hold
// for anything that exists, -x for a directory or a file with an execute
// bit, -O and -G for what uid and gid 0 own. The interpreter's own test
// asks the host (access(2) for -r/-w/-x, the build user for -O/-G), so
// the call handler sends [ and test here, and the [[ ]] operators it
// cannot answer from a file's mode alone are rewritten into this
// (rewrite.go).

// fileTest answers one unary file operator for the operand p, relative to
// the script's working directory.
func (r *run) fileTest(cwd, op, p string) bool {
	if p == "" {
		return false
	}
	if v, ok := r.virtualFile(r.treePath(cwd, p)); ok {
		// A process substitution's output: it exists and reads as a pipe.
		return op == "-e" || op == "-a" || op == "-r" || op == "-p" || op == "-s" && len(v) > 0
	}
	follow := op != "-h" && op != "-L"
	e, err := r.env.Tree.Lookup(r.treePath(cwd, p), follow)
	if err != nil {
		return false
	}
	switch op {
	case "-e", "-a", "-r", "-w":
		return true
	case "-f":
		return e.Type == rootfs.TypeRegular
	case "-d":
		return e.Type == rootfs.TypeDir
	case "-x":
		return e.Type == rootfs.TypeDir || e.Perm&0o111 != 0
	case "-s":
		// A directory's size is never 0 on the file systems images use.
		return e.Type == rootfs.TypeDir || e.Size > 0
	case "-h", "-L":
		return e.Type == rootfs.TypeSymlink
	case "-O":
		return e.UID == 0
	case "-G":
		return e.GID == 0
	case "-u":
		return e.Perm&0o4000 != 0
	case "-g":
		return e.Perm&0o2000 != 0
	case "-k":
		return e.Perm&0o1000 != 0
	case "-p":
		return e.Type == rootfs.TypeFifo
	case "-S":
		return e.Type == rootfs.TypeSocket
	case "-b":
		return e.Type == rootfs.TypeBlock
	case "-c":
		return e.Type == rootfs.TypeChar
	case "-N":
		// Modified since last read: the index keeps no access time, and
		// an unpacked file's is its mtime.
		return false
	}
	return false
}

// fileCompare answers -nt, -ot and -ef.
func (r *run) fileCompare(cwd, a, op, b string) bool {
	lookup := func(p string) *rootfs.Entry {
		if p == "" {
			return nil
		}
		e, err := r.env.Tree.Lookup(r.treePath(cwd, p), true)
		if err != nil {
			return nil
		}
		return e
	}
	ea, eb := lookup(a), lookup(b)
	switch op {
	case "-nt":
		return ea != nil && (eb == nil || ea.MTime.After(eb.MTime))
	case "-ot":
		return eb != nil && (ea == nil || ea.MTime.Before(eb.MTime))
	case "-ef":
		return ea != nil && eb != nil && (ea.Path == eb.Path || ea.Inode == eb.Inode)
	}
	return false
}

var unaryFileOps = map[string]bool{"-e": true, "-a": true, "-f": true, "-d": true, "-r": true, "-w": true, "-x": true,
	"-s": true, "-h": true, "-L": true, "-O": true, "-G": true, "-u": true, "-g": true, "-k": true, "-p": true,
	"-S": true, "-b": true, "-c": true, "-N": true}

var unaryOps = map[string]bool{"-z": true, "-n": true, "-t": true, "-v": true, "-o": true}

var binaryOps = map[string]bool{"=": true, "==": true, "!=": true, "<": true, ">": true, "-eq": true, "-ne": true,
	"-lt": true, "-le": true, "-gt": true, "-ge": true, "-nt": true, "-ot": true, "-ef": true}

func isUnary(s string) bool { return unaryFileOps[s] || unaryOps[s] }

// testError is a malformed test expression: status 2, as test says.
type testError string

// cmdTest is test and [ (stamp-test, stamp-[ after the call handler).
func cmdTest(r *run, hc interp.HandlerContext, args []string) error {
	name := strings.TrimPrefix(args[0], "stamp-")
	ops := args[1:]
	if name == "[" {
		if len(ops) == 0 || ops[len(ops)-1] != "]" {
			fmt.Fprintln(hc.Stderr, "[: missing ]")
			return exit(2)
		}
		ops = ops[:len(ops)-1]
	}
	tp := &testParser{r: r, hc: hc, args: ops}
	ok, err := tp.evaluate()
	if err != nil {
		if te, isTest := err.(testError); isTest {
			fmt.Fprintf(hc.Stderr, "%s: %s\n", name, string(te))
			return exit(2)
		}
		return err
	}
	if ok {
		return nil
	}
	return exit(1)
}

func (e testError) Error() string { return string(e) }

type testParser struct {
	r    *run
	hc   interp.HandlerContext
	args []string
	pos  int
}

// evaluate applies POSIX's rules by operand count, then a full parse of
// -a, -o, ! and parentheses for longer expressions, as bash's test does.
func (tp *testParser) evaluate() (bool, error) {
	a := tp.args
	switch len(a) {
	case 0:
		return false, nil
	case 1:
		return a[0] != "", nil
	case 2:
		if a[0] == "!" {
			return a[1] == "", nil
		}
		if isUnary(a[0]) {
			return tp.unary(a[0], a[1])
		}
		return false, testError(a[0] + ": unary operator expected")
	case 3:
		if binaryOps[a[1]] {
			return tp.binary(a[0], a[1], a[2])
		}
		if a[1] == "-a" || a[1] == "-o" {
			break
		}
		if a[0] == "!" {
			sub := &testParser{r: tp.r, hc: tp.hc, args: a[1:]}
			v, err := sub.evaluate()
			return !v, err
		}
		if a[0] == "(" && a[2] == ")" {
			return a[1] != "", nil
		}
		return false, testError(a[1] + ": binary operator expected")
	case 4:
		if a[0] == "!" {
			sub := &testParser{r: tp.r, hc: tp.hc, args: a[1:]}
			v, err := sub.evaluate()
			return !v, err
		}
		if a[0] == "(" && a[3] == ")" {
			sub := &testParser{r: tp.r, hc: tp.hc, args: a[1:3]}
			return sub.evaluate()
		}
	}
	v, err := tp.or()
	if err == nil && tp.pos < len(tp.args) {
		err = testError("too many arguments")
	}
	return v, err
}

func (tp *testParser) peek(i int) (string, bool) {
	if tp.pos+i < len(tp.args) {
		return tp.args[tp.pos+i], true
	}
	return "", false
}

func (tp *testParser) or() (bool, error) {
	v, err := tp.and()
	for err == nil {
		if s, ok := tp.peek(0); !ok || s != "-o" {
			break
		}
		tp.pos++
		var w bool
		w, err = tp.and()
		v = v || w
	}
	return v, err
}

func (tp *testParser) and() (bool, error) {
	v, err := tp.not()
	for err == nil {
		if s, ok := tp.peek(0); !ok || s != "-a" {
			break
		}
		tp.pos++
		var w bool
		w, err = tp.not()
		v = v && w
	}
	return v, err
}

func (tp *testParser) not() (bool, error) {
	if s, ok := tp.peek(0); ok && s == "!" {
		tp.pos++
		v, err := tp.not()
		return !v, err
	}
	return tp.primary()
}

func (tp *testParser) primary() (bool, error) {
	s, ok := tp.peek(0)
	if !ok {
		return false, testError("argument expected")
	}
	if s == "(" {
		tp.pos++
		v, err := tp.or()
		if err != nil {
			return false, err
		}
		if c, ok := tp.peek(0); !ok || c != ")" {
			return false, testError("')' expected")
		}
		tp.pos++
		return v, nil
	}
	if op, ok := tp.peek(1); ok && binaryOps[op] {
		b, ok := tp.peek(2)
		if !ok {
			return false, testError(op + ": argument expected")
		}
		tp.pos += 3
		return tp.binary(s, op, b)
	}
	if isUnary(s) {
		arg, ok := tp.peek(1)
		if !ok {
			return false, testError(s + ": argument expected")
		}
		tp.pos += 2
		return tp.unary(s, arg)
	}
	tp.pos++
	return s != "", nil
}

func (tp *testParser) unary(op, x string) (bool, error) {
	switch op {
	case "-z":
		return x == "", nil
	case "-n":
		return x != "", nil
	case "-t":
		return false, nil // no terminal offline
	case "-v":
		return tp.hc.Env.Get(x).IsSet(), nil
	case "-o":
		return false, tp.r.unhandled(fmt.Sprintf("test -o %s (a shell option)", x))
	}
	return tp.r.fileTest(tp.hc.Dir, op, x), nil
}

func (tp *testParser) binary(x, op, y string) (bool, error) {
	switch op {
	case "=", "==":
		return x == y, nil
	case "!=":
		return x != y, nil
	case "<":
		return x < y, nil
	case ">":
		return x > y, nil
	case "-nt", "-ot", "-ef":
		return tp.r.fileCompare(tp.hc.Dir, x, op, y), nil
	}
	a, err := testInt(x)
	if err != nil {
		return false, err
	}
	b, err := testInt(y)
	if err != nil {
		return false, err
	}
	switch op {
	case "-eq":
		return a == b, nil
	case "-ne":
		return a != b, nil
	case "-lt":
		return a < b, nil
	case "-le":
		return a <= b, nil
	case "-gt":
		return a > b, nil
	}
	return a >= b, nil
}

// testInt reads an integer operand as test does: blanks around it, a sign.
func testInt(s string) (int64, error) {
	n, err := strconv.ParseInt(strings.Trim(s, " \t\n"), 10, 64)
	if err != nil {
		return 0, testError(s + ": integer expression expected")
	}
	return n, nil
}
