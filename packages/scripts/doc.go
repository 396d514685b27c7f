// Package scripts applies the effects of Debian maintainer scripts to a tree
// without root and without running anything of the image on the host. A
// script is interpreted by a POSIX shell interpreter written in Go
// (mvdan.cc/sh, a patched copy in third_party/mvdan-sh); its own logic
// (tests on $1 and $2, on files in the tree, functions, here-documents)
// runs as written, and every external command it runs is looked up in one
// table of built-in handlers.
//
// # The interpreter's view
//
// The interpreter sees only the image (scripts.go, view.go, rewrite.go,
// testcmd.go): every path it hands a handler becomes a path in the image,
// and pwd, $PWD and cd speak image paths; file tests of every form answer
// from the tree's index as root would see it; $UID, $EUID and id say 0,
// ~user reads the image's passwd, $$ and $PPID are fixed; $RANDOM is
// seeded from the script's name; process substitutions are kept in
// memory; descriptors above 2 are dropped where nothing reads them and
// refused where a script would. Builtins that would look at the host
// (command -v, type, umask, pwd, test) are rewritten into stamp-* handlers
// of the table. So a root build and an unprivileged one interpret every
// script alike, and nothing of the host reaches an output. A construct the
// interpreter stops on (a panic) is refused, naming the script.
//
// # The table
//
// table.go holds the table: one line per command name, sorted, found by
// binary search, as busybox keeps its applets; exec has no special cases.
// Its tests fail when the table is out of order and when an entry has no
// case in table_test.go's handlerCases. A command that is not in the table
// fails with status 127 when the image lacks it, as it would there; when
// the image has it, Env.Defer may take it for first boot, and otherwise
// the script stops with an *UnhandledError naming the package, the script
// and the command (built by run.unhandled and run.unhandledCommand, the one
// way a handler refuses). A handler likewise refuses an option or form it
// does not know rather than guess at it.
//
// The handlers live in files named by their command family: files.go and
// text.go (coreutils, grep, findutils, awk), sed.go, accounts.go (adduser,
// useradd, groupadd, getent, id, shadowconfig) and sysusers.go, shells.go
// (add-shell, update-shells), dpkg.go, dpkgquery.go, dpkglist.go and
// dpkgdivert.go, alternatives.go, systemd.go (deb-systemd-helper),
// systemctl.go, tmpfiles.go (with acl.go), services.go (update-rc.d, invoke-rc.d),
// kernel.go (depmod through packages/kmod, linux-update-symlinks, uname),
// ldconfig.go (the cache through packages/ldcache), python.go, debconf.go,
// ucf.go, pam.go, audit.go, certhash.go (openssl rehash),
// locale.go, machinestate.go (machine IDs and SSH host keys, which each
// machine makes on first boot), and imagescripts.go (run-parts and the
// image's own shell scripts, interpreted as the maintainer script is).
//
// # Programs of the image
//
// Handlers do their work in Go. The ones that need the image's own
// program, py_compile and systemd-hwdb, run it the one way a handler runs
// a program (imageprog.go): in rootfs/sandbox, with the tree read-only and
// only an output directory writable, whose files the handler then writes
// into the tree through the index. systemd-hwdb runs at once
// (runImageProgramAt); py_compile's modules are put together and compiled
// when the Env is settled (python.go). Env.NoPrograms (offline-only) makes
// either unhandled.
package scripts
