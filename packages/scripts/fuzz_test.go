package scripts

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/rootfs"
)

// fuzzSeeds are maintainer-script shapes: the dpkg argument dispatch,
// dpkg-maintscript-helper, update-alternatives, the redirections, here-
// documents, subshells, substitutions and file tests Debian's scripts use,
// and the paths a hostile one would reach for.
var fuzzSeeds = []string{
	"#!/bin/sh\nset -e\ncase \"$1\" in\n  configure)\n    update-alternatives --install /usr/bin/editor editor /usr/bin/vim 50\n  ;;\n  abort-upgrade|abort-remove|abort-deconfigure) ;;\n  *) echo \"postinst called with unknown argument '$1'\" >&2; exit 1 ;;\nesac\nexit 0\n",
	"#!/bin/sh\nset -e\ndpkg-maintscript-helper rm_conffile /etc/foo/old.conf 1.2-1~ -- \"$@\"\n",
	"#!/bin/sh -e\nif [ \"$1\" = configure ] && [ -z \"$2\" ]; then\n  adduser --system --group --home /var/lib/foo foo >/dev/null\nfi\n",
	"#!/bin/sh\nset -e\nif [ -x /usr/bin/py3compile ]; then py3compile -p foo; fi\nif [ -d /run/systemd/system ]; then systemctl daemon-reload >/dev/null || true; fi\n",
	"#!/bin/bash\n[[ -O /etc/passwd && -r ../../../etc/shadow ]] && echo yes\n[ -w /etc/hostname -a ! -e /proc/self ] || echo no\ntest -f scripts.go && echo host\n",
	"#!/bin/sh\nexec 3< /etc/passwd\nread -r line <&3\nexec 3>&-\necho $line > /tmp/out 4>&1\n",
	"#!/bin/bash\nwhile read -r l; do echo \"$l\"; done < <(cat /etc/passwd)\ndiff <(echo a) <(echo b) || true\ntee >(cat) < /dev/null\n",
	"#!/bin/sh\ncat > /etc/foo.conf <<EOF\nuser=$USER home=~root pid=$$ $(id -u)\nEOF\ncat <<'EOF' >> ../../escape\nliteral\nEOF\n",
	"#!/bin/sh\n( cd /var/lib && mkdir -p foo && cd foo && pwd > /out && pwd -P >> /out )\n{ echo a; echo b; } | sort > /sorted\nx=$(cat /etc/passwd | grep root)\n",
	"#!/bin/sh\nset -e\n. /usr/share/debconf/confmodule\ndb_get foo/question || true\neval \"$(echo 'echo hi > /evaled')\"\ntrap 'rm -f /tmp/x' EXIT\n",
	"#!/bin/sh\nln -s /etc/shadow /data/link\ncat /data/link > /copied\necho x > /data/link\nrm -rf /../../..\nmkdir -p ../../outside\n",
	"#!/bin/sh\nfor f in /etc/* /data/*; do [ -L \"$f\" ] && readlink \"$f\"; done\nfind /data -type f\nls -la ~nobody ~daemon\n",
	"#!/bin/sh\nalias ll='ls -l'\nf() { [ $# -gt 0 ] && f $(($1 - 1)); }\nf 5\ncommand -v ssh-keygen && ssh-keygen -q -f /etc/ssh/ssh_host_ed25519_key -N '' -t ed25519\n",
	"#!/bin/sh\necho $UID $EUID $PWD $HOME $TMPDIR\numask 077\ntouch /secret\n: > \"$TMPDIR/x\"\nmktemp\n",
	"#!/bin/bash\ncoproc cat\ncat <&- ; echo x >&- ; echo > /dev/tty\nbuiltin [ -O / ] && command test -G /data\nexec {fd}</etc/passwd\necho $RANDOM\n",
	"#!/bin/bash\nshopt -s expand_aliases\nalias t='[[ -O / ]] && echo own'\nt\ntrap '[[ -G / ]]' EXIT\nf() { f; }\n",
}

// hostState is what the fuzz body holds constant outside the tree: the
// canaries beside it, TMPDIR, the host's passwd and the working directory.
func hostState(t *testing.T, dirs ...string) string {
	t.Helper()
	var out []string
	for _, d := range dirs {
		filepath.WalkDir(d, func(p string, de fs.DirEntry, err error) error {
			if err != nil {
				out = append(out, p+" "+err.Error())
				return nil
			}
			if strings.HasSuffix(p, "/tree") && de.IsDir() {
				return filepath.SkipDir
			}
			fi, _ := de.Info()
			line := fmt.Sprintf("%s %v", p, fi.Mode())
			if fi.Mode().IsRegular() {
				b, _ := os.ReadFile(p)
				line += fmt.Sprintf(" %x", sha256.Sum256(b))
			}
			out = append(out, line)
			return nil
		})
	}
	for _, f := range []string{"/etc/passwd", "/etc/shadow", "/etc/hostname"} {
		b, err := os.ReadFile(f)
		out = append(out, fmt.Sprintf("%s %x %v", f, sha256.Sum256(b), err == nil))
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// FuzzScript interprets maintainer-script-shaped input against a small
// tree. It must never panic, and nothing outside the tree may change: not
// the canary beside the tree (where ../ from the tree's directory leads),
// not TMPDIR, not the host's passwd, not the working directory.
func FuzzScript(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	tmp := f.TempDir()
	f.Setenv("TMPDIR", tmp)
	cwd, err := os.Getwd()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body string) {
		work := t.TempDir()
		if err := os.WriteFile(filepath.Join(work, "canary"), []byte("canary\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		tr, err := rootfs.New(filepath.Join(work, "tree"), rootfs.Options{DefaultMTime: epoch})
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		file(t, tr, "/etc/passwd", "root:x:0:0:root:/root:/bin/sh\n")
		file(t, tr, "/data/file", "data\n")
		file(t, tr, "/usr/bin/ssh-keygen", "")
		before := hostState(t, work, tmp, cwd)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		done := make(chan struct{})
		go func() {
			defer close(done)
			Run(ctx, env(tr), Script{Package: "fuzz", Name: "postinst", Body: []byte(body)}, "configure", "")
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			buf := make([]byte, 1<<20)
			t.Fatalf("the script ran on past its deadline:\n%q\n%s", body, buf[:runtime.Stack(buf, true)])
		}
		if after := hostState(t, work, tmp, cwd); after != before {
			t.Fatalf("the script changed the host:\nbefore:\n%s\nafter:\n%s", before, after)
		}
	})
}
