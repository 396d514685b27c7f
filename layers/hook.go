package layers

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/stamp-dev/stamp/rootfs/hashio"
)

// Hook runs a host program on the tree's directory, then folds what it did
// into the index. The program sees a fixed environment whatever the caller's,
// so a deterministic hook gives the same tree as root and as nobody.
type Hook struct {
	Run  string // absolute host path of the program
	Args []string
	Env  map[string]string
}

func (l *Hook) Kind() string { return "hook" }

// PhaseKeeping implements PhaseKeeper: the program sees the tree written
// out.
func (*Hook) PhaseKeeping() Keeping { return KeepingMaterialized }

// HostFiles implements WithHostFiles: the program itself.
func (l *Hook) HostFiles() []HostFile { return []HostFile{{Kind: "hook", Path: l.Run}} }

// HookPath is the PATH hooks run with.
const HookPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

func (l *Hook) Apply(ctx context.Context, env *Env) error {
	sum, _, err := hashio.File(l.Run, false)
	if err != nil {
		return fmt.Errorf("%s: hook %s: %w", env.Label, l.Run, err)
	}
	digest := "sha256:" + sum
	// The hook sees the directory, so every file must be in it.
	if err := env.Tree.Materialize(ctx); err != nil {
		return fmt.Errorf("%s: %w", env.Label, err)
	}
	// umask is set by a shell so the program's own files get the same
	// permission bits whoever runs the build.
	args := append([]string{"-c", `umask 022; exec "$0" "$@"`, l.Run}, l.Args...)
	cmd := exec.CommandContext(ctx, "/bin/sh", args...)
	cmd.Dir = env.Tree.Dir()
	cmd.Env = l.environ(env)
	// The hook gets its own process group so that cancelling the build stops
	// everything it started, not just the shell.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: hook %s: %w", env.Label, l.Run, err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		logLines(out, func(s string) { env.Log.WithField("hook", l.Run).Info(s) })
	}()
	wg.Wait()
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("%s: hook %s: %w", env.Label, l.Run, err)
	}
	ch, err := env.Tree.Rescan(ctx, env.Origin(digest, l.Run))
	if err != nil {
		return fmt.Errorf("%s: after hook %s: %w", env.Label, l.Run, err)
	}
	env.Log.Debugf("%s: hook added %d, changed %d, removed %d entries", env.Label, len(ch.Added), len(ch.Modified), len(ch.Removed))
	return nil
}

func (l *Hook) environ(env *Env) []string {
	vars := map[string]string{
		"PATH":              HookPath,
		"HOME":              "/nonexistent",
		"TZ":                "UTC",
		"LANG":              "C.UTF-8",
		"LC_ALL":            "C.UTF-8",
		"SOURCE_DATE_EPOCH": strconv.FormatInt(env.Epoch.Unix(), 10),
		"STAMP_ROOT":        env.Tree.Dir(),
		"STAMP_ARCH":        env.Arch,
	}
	for k, v := range l.Env {
		vars[k] = v
	}
	keys := slices.Sorted(maps.Keys(vars))
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, k+"="+vars[k])
	}
	return out
}

func logLines(r io.Reader, log func(string)) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		log(sc.Text())
	}
	io.Copy(io.Discard, r)
}
