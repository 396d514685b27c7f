package scripts

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"strings"

	"mvdan.cc/sh/v3/interp"

	"github.com/stamp-dev/stamp/rootfs"
)

// ucf and ucfr, the configuration file handlers chrony's and
// openssh-server's postinsts use for files that are not conffiles. On an
// image's first install the destination does not exist and ucf has no
// record of it: the new file is copied into place (cp -p), its md5sum
// recorded in /var/lib/ucf/hashfile (the previous hashfiles rotated, as
// ucf keeps seven), and a copy cached for three-way merges; ucfr records
// which package owns the file in the registry. A destination that exists
// already would need ucf's questions, which is unhandled.

const ucfState = "/var/lib/ucf"

func cmdUcf(r *run, hc interp.HandlerContext, args []string) error {
	threeWay := false
	var ops []string
	for i := 1; i < len(args); i++ {
		switch a := args[i]; a {
		case "--three-way":
			threeWay = true
		case "--debconf-ok", "--verbose", "-v":
		case "--sum-file", "--src-dir":
			i++ // only consulted when the destination exists
		default:
			if strings.HasPrefix(a, "-") {
				return r.unhandled(fmt.Sprintf("ucf option %s", a))
			}
			ops = append(ops, a)
		}
	}
	if len(ops) != 2 {
		return r.unhandledCommand(args)
	}
	newFile, dest := r.treePath(hc.Dir, ops[0]), r.treePath(hc.Dir, ops[1])
	if r.exists("/etc/ucf.conf") {
		if b, _ := r.readFile("/etc/ucf.conf"); strings.TrimSpace(stripComments(string(b))) != "" {
			return r.unhandled("ucf with settings in /etc/ucf.conf")
		}
	}
	src, err := r.env.Tree.Lookup(newFile, true)
	if err != nil || src.Type != rootfs.TypeRegular {
		fmt.Fprintf(hc.Stderr, "ucf: The new file %s does not exist!\n", ops[0])
		return exit(1)
	}
	hash, _ := r.readFile(ucfState + "/hashfile")
	recorded := false
	for _, l := range lines(hash) {
		if f := strings.Fields(l); len(f) == 2 && f[1] == dest {
			recorded = true
		}
	}
	if _, err := r.env.Tree.Lookup(dest, false); err == nil || recorded {
		return r.unhandledCommand(args, "the destination exists or is recorded already")
	}
	if err := r.mkdirAll(ucfState + "/cache"); err != nil {
		return err
	}
	if err := r.copyEntry(src, dest, true); err != nil {
		return err
	}
	data, err := r.readFile(newFile)
	if err != nil {
		return err
	}
	sum := md5.Sum(data)
	line := hex.EncodeToString(sum[:]) + "  " + dest + "\n"
	if err := r.rotate(ucfState+"/hashfile", true); err != nil {
		return err
	}
	var kept strings.Builder
	for _, l := range lines(hash) {
		kept.WriteString(l + "\n")
	}
	if err := r.writeFile(ucfState+"/hashfile", []byte(kept.String()+line), 0o644); err != nil {
		return err
	}
	if threeWay || len(data) < 25600 {
		if err := r.copyEntry(src, ucfState+"/cache/"+strings.ReplaceAll(dest, "/", ":"), true); err != nil {
			return err
		}
	}
	return nil
}

func stripComments(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if l, _, _ = strings.Cut(l, "#"); strings.TrimSpace(l) != "" {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// rotate keeps ucf's seven generations of a state file: f.6 to f.7 ...
// f.0 to f.1 (cp -f, or cp -pf when keep), then f to f.0.
func (r *run) rotate(f string, keep bool) error {
	for i := 6; i >= 0; i-- {
		if e, err := r.env.Tree.Lookup(fmt.Sprintf("%s.%d", f, i), true); err == nil {
			if err := r.copyEntry(e, fmt.Sprintf("%s.%d", f, i+1), keep); err != nil {
				return err
			}
		}
	}
	if e, err := r.env.Tree.Lookup(f, true); err == nil {
		return r.copyEntry(e, f+".0", keep)
	}
	return nil
}

func cmdUcfr(r *run, hc interp.HandlerContext, args []string) error {
	var ops []string
	for _, a := range args[1:] {
		switch {
		case a == "--verbose" || a == "-v":
		case strings.HasPrefix(a, "-"):
			return r.unhandled(fmt.Sprintf("ucfr option %s", a))
		default:
			ops = append(ops, a)
		}
	}
	if len(ops) != 2 {
		fmt.Fprintf(hc.Stderr, "ucfr: *** ERROR: Need exactly two arguments, got %d\n", len(ops))
		return exit(3)
	}
	pkg, conf := ops[0], ops[1]
	if !strings.HasPrefix(conf, "/") {
		fmt.Fprintf(hc.Stderr, "ucfr: Need a fully qualified path for the file \"%s\"\n", conf)
		return nil
	}
	real, err := r.env.Tree.Resolve(conf, true)
	if err != nil {
		real = conf
	}
	reg := ucfState + "/registry"
	if err := r.mkdirAll(ucfState); err != nil {
		return err
	}
	if !r.exists(reg) {
		if err := r.writeFile(reg, nil, 0o644); err != nil {
			return err
		}
	}
	b, _ := r.readFile(reg)
	var kept strings.Builder
	for _, l := range lines(b) {
		f := strings.Fields(l)
		if len(f) == 2 && f[1] == real {
			if f[0] == pkg {
				return nil // already recorded
			}
			fmt.Fprintf(hc.Stderr, "ucfr: Attempt from package %s  to take %s away from package %s\nucfr: Aborting.\n", pkg, real, f[0])
			return exit(4)
		}
		kept.WriteString(l + "\n")
	}
	if err := r.rotate(reg, false); err != nil {
		return err
	}
	return r.writeFile(reg, []byte(kept.String()+pkg+" \t "+real+"\n"), 0o644)
}
