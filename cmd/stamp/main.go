// Command stamp composes bootable node images from a recipe, offline, without
// root, byte for byte the same on every rebuild.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/stamp-dev/stamp"
	"github.com/stamp-dev/stamp/recipes"
	"github.com/stamp-dev/stamp/rootfs/hostroot"
	"github.com/stamp-dev/stamp/serve"
	"github.com/stamp-dev/stamp/verify"
)

// Exit codes, as the design fixes them.
const (
	exitOK     = 0
	exitFailed = 1
	exitUsage  = 2
)

// buildMemoryLimit is the heap size past which the Go runtime collects
// garbage harder in a command that runs one build, unless GOMEMLIMIT says
// otherwise. Outputs are written two at a time, each with its
// compressors' buffers, and the collector's default pacing let a node
// build's RSS reach 476 MiB against the 512 MiB a build should stay
// under. stamp serve, which runs several builds at once, keeps the
// runtime's default.
const buildMemoryLimit = 384 << 20

func main() {
	os.Exit(run(os.Args, os.Getenv))
}

func run(args []string, getenv func(string) string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code := exitOK
	app := newApp(getenv, &code)
	if err := app.RunContext(ctx, interspersed(app, args)); err != nil {
		fmt.Fprintln(os.Stderr, "stamp:", err)
		if code == exitOK {
			code = exitUsage
		}
	}
	return code
}

func newApp(getenv func(string) string, code *int) *cli.App {
	common := []cli.Flag{
		&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error"},
		&cli.StringFlag{Name: "log-format", Value: "text", Usage: "text or json"},
		&cli.StringFlag{Name: "cache-dir", Usage: "content-addressed cache (default $XDG_CACHE_HOME/stamp)"},
		&cli.StringFlag{Name: "lock", Usage: "lock file (default stamp.lock beside the recipe)"},
	}
	// Each command gets its own flag values: urfave/cli keeps state in them.
	insecure := func() cli.Flag {
		return &cli.StringSliceFlag{Name: "insecure-registry", Usage: "reach registry HOST[:PORT] over plain HTTP (repeatable; localhost and 127.0.0.1 always are)"}
	}
	updateLock := func() cli.Flag {
		return &cli.BoolFlag{Name: "update-lock", Usage: "accept inputs that no longer match stamp.lock"}
	}
	cacheSign := func() cli.Flag {
		return &cli.StringFlag{Name: "cache-sign", Usage: "sign every record pushed to --cache-to with the ed25519 private key in PEM file KEY (openssl genpkey -algorithm ed25519)"}
	}
	cacheTrust := func() cli.Flag {
		return &cli.StringSliceFlag{Name: "cache-trust", Usage: "take from --cache-from only records signed by the ed25519 public key in PEM file PUBKEY (repeatable; openssl pkey -pubout)"}
	}
	set := func() cli.Flag {
		return &cli.GenericFlag{Name: "set", Value: &setFlag{}, Usage: "give recipe parameter NAME the value VALUE (NAME=VALUE, repeatable)"}
	}
	buildFlags := append([]cli.Flag{
		&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "out", Usage: "directory for the outputs"},
		&cli.Int64Flag{Name: "epoch", Usage: "SOURCE_DATE_EPOCH for the build (overrides the environment and the recipe)"},
		&cli.StringFlag{Name: "work-dir", Usage: "where the tree is built (default the system temp dir)"},
		&cli.BoolFlag{Name: "offline", Usage: "use only the cache; fail naming any missing input"},
		updateLock(), insecure(), set(),
		&cli.BoolFlag{Name: "keep-work", Usage: "keep the work directory for debugging"},
		&cli.BoolFlag{Name: "no-cache", Usage: "build every phase and output, neither reading nor writing the build cache (inputs are still cached)"},
		&cli.StringFlag{Name: "cache-from", Usage: "read cache records from registry repository REF (HOST/NAME), as OCI artifacts"},
		&cli.StringFlag{Name: "cache-to", Usage: "write cache records to registry repository REF (HOST/NAME), with the docker config's credentials"},
		cacheSign(), cacheTrust(),
		&cli.BoolFlag{Name: "dry-run", Usage: "print the plan (inputs with their digests, what comes from the cache and why not) and build nothing"},
		&cli.BoolFlag{Name: "reverse-readdir", Hidden: true, Usage: "read host directories in reverse order (verify's second build)"},
	}, common...)
	app := &cli.App{
		Name:            "stamp",
		Usage:           "compose bootable node images offline, without root, reproducibly",
		HideHelpCommand: true,
		ExitErrHandler:  func(*cli.Context, error) {},
		Commands: []*cli.Command{
			{
				Name:      "build",
				Usage:     "run every phase of RECIPE and write its outputs",
				ArgsUsage: "RECIPE",
				Flags:     buildFlags,
				Action: func(c *cli.Context) error {
					return act(c, code, getenv, func(rec *recipes.Recipe, o stamp.Options) error {
						if c.Bool("dry-run") {
							p, err := stamp.DryRun(c.Context, rec, o)
							if err != nil {
								return err
							}
							p.Write(c.App.Writer)
							return nil
						}
						res, err := stamp.Build(c.Context, rec, o)
						if err != nil {
							return err
						}
						for _, name := range res.Outputs {
							fmt.Fprintf(c.App.Writer, "%s/%s\n", o.OutputDir, name)
						}
						return nil
					})
				},
			},
			{
				Name:      "lock",
				Usage:     "resolve every input of RECIPE and pin it in stamp.lock",
				ArgsUsage: "RECIPE",
				Flags:     append([]cli.Flag{&cli.BoolFlag{Name: "offline"}, updateLock(), insecure(), set()}, common...),
				Action: func(c *cli.Context) error {
					return act(c, code, getenv, func(rec *recipes.Recipe, o stamp.Options) error {
						p, err := stamp.Lock(c.Context, rec, o)
						if err == nil {
							fmt.Fprintln(c.App.Writer, p)
						}
						return err
					})
				},
			},
			{
				Name:      "push",
				Usage:     "upload the OCI image OUTPUT (a layout directory or oci-archive) to REF; prints REPO@DIGEST",
				ArgsUsage: "OUTPUT REF",
				Flags: []cli.Flag{
					&cli.BoolFlag{Name: "insecure", Usage: "allow plain HTTP or unverified TLS to a registry not on loopback"},
					&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error"},
					&cli.StringFlag{Name: "log-format", Value: "text", Usage: "text or json"},
				},
				Action: func(c *cli.Context) error {
					if c.NArg() != 2 {
						*code = exitUsage
						return errors.New("push needs OUTPUT and REF")
					}
					log, err := newLogger(c)
					if err != nil {
						*code = exitUsage
						return err
					}
					o := stamp.PushOptions{Insecure: c.Bool("insecure"), Log: log}
					var b *bars
					if c.String("log-format") != "json" && term.IsTerminal(int(os.Stderr.Fd())) {
						b = newBars(os.Stderr)
						o.Progress = stamp.Progress(b.start)
					}
					ref, err := stamp.Push(c.Context, c.Args().Get(0), c.Args().Get(1), o)
					if b != nil {
						b.wait()
					}
					if err != nil {
						*code = exitFailed
						if stamp.IsUsage(err) {
							*code = exitUsage
						}
						return err
					}
					fmt.Fprintln(c.App.Writer, ref)
					return nil
				},
			},
			{
				Name:      "fetch",
				Usage:     "fill the cache with every input stamp.lock pins, for build --offline",
				ArgsUsage: "RECIPE",
				Flags:     append([]cli.Flag{updateLock(), insecure(), set()}, common...),
				Action: func(c *cli.Context) error {
					return act(c, code, getenv, func(rec *recipes.Recipe, o stamp.Options) error {
						p, err := stamp.Fetch(c.Context, rec, o)
						if err == nil {
							fmt.Fprintln(c.App.Writer, p)
						}
						return err
					})
				},
			},
			{
				Name:      "verify",
				Usage:     "build RECIPE twice under varied environments and compare every output",
				ArgsUsage: "RECIPE",
				Flags: append([]cli.Flag{
					&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "directory for both builds (default a temporary one, kept only when they differ)"},
					&cli.StringFlag{Name: "against", Usage: "an earlier build's SHA256SUMS: build once and compare with it"},
					&cli.BoolFlag{Name: "same-user", Usage: "run the second build as the caller even when that is root (default: as uid 65534)"},
					&cli.Int64Flag{Name: "epoch", Usage: "SOURCE_DATE_EPOCH for both builds"},
					&cli.BoolFlag{Name: "offline", Usage: "use only the cache"},
					updateLock(), insecure(), set(),
					&cli.BoolFlag{Name: "keep-work", Usage: "keep the builds' directories"},
				}, common...),
				Action: func(c *cli.Context) error {
					return act(c, code, getenv, func(rec *recipes.Recipe, o stamp.Options) error {
						exe, err := os.Executable()
						if err != nil {
							return fmt.Errorf("verify: finding the stamp binary: %w", err)
						}
						build, err := childBuild(exe, o)
						if err != nil {
							return err
						}
						res, err := verify.Recipe(c.Context, rec, verify.Options{OutputDir: o.OutputDir, CacheDir: o.CacheDir,
							Offline: o.Offline, KeepWork: o.KeepWork, Log: o.Log, Build: build, Reach: []string{exe},
							SameUser: c.Bool("same-user"), Against: c.String("against")})
						if res != nil && (err == nil || len(res.Outputs) > 0) {
							res.Write(c.App.Writer)
						}
						if err != nil {
							return err
						}
						if !res.OK() {
							return fmt.Errorf("verify: %d of %d outputs differ", res.Mismatches(), len(res.Outputs))
						}
						return nil
					})
				},
			},
			{
				Name:      "inspect",
				Usage:     "read an output back without mounting it and print what it holds",
				ArgsUsage: "IMAGE",
				Flags: []cli.Flag{
					&cli.BoolFlag{Name: "check", Usage: "verify every file's sha256 against the record embedded in the image"},
					common[0], common[1],
				},
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						*code = exitUsage
						return errors.New("inspect needs exactly one IMAGE argument")
					}
					in, err := stamp.Inspect(c.Context, c.Args().First())
					if err != nil {
						*code = exitFailed
						return err
					}
					in.Write(c.App.Writer)
					if !c.Bool("check") {
						return nil
					}
					problems := in.Check()
					for _, p := range problems {
						fmt.Fprintln(c.App.ErrWriter, "mismatch:", p)
					}
					if len(problems) > 0 {
						*code = exitFailed
						return fmt.Errorf("inspect --check: %d problems in %s", len(problems), c.Args().First())
					}
					fmt.Fprintf(c.App.Writer, "check:        every file matches the embedded record\n")
					return nil
				},
			},
			{
				Name:      "diff",
				Usage:     "compare two outputs entry by entry, across formats too; exit 1 when they differ",
				ArgsUsage: "A B",
				Flags: []cli.Flag{
					&cli.BoolFlag{Name: "include-record", Usage: "compare the embedded record " + "/usr/lib/stamp/manifest.json too"},
					common[0], common[1],
				},
				Action: func(c *cli.Context) error {
					if c.NArg() != 2 {
						*code = exitUsage
						return errors.New("diff needs two images, A and B")
					}
					changes, err := stamp.Diff(c.Context, c.Args().Get(0), c.Args().Get(1), stamp.DiffOptions{IncludeRecord: c.Bool("include-record")})
					if err != nil {
						*code = exitFailed
						return err
					}
					for _, ch := range changes {
						fmt.Fprintln(c.App.Writer, ch)
					}
					if len(changes) > 0 {
						*code = exitFailed
						return fmt.Errorf("diff: %d differences", len(changes))
					}
					return nil
				},
			},
			{
				Name:      "apply",
				Usage:     "apply RECIPE's customize and provision phases to the existing root directory --root DIR, in place, and print every change",
				ArgsUsage: "RECIPE",
				Flags: append([]cli.Flag{
					&cli.StringFlag{Name: "root", Required: true, Usage: "the root directory to change"},
					&cli.Int64Flag{Name: "epoch", Usage: "SOURCE_DATE_EPOCH (overrides the environment and the recipe)"},
					&cli.BoolFlag{Name: "offline", Usage: "use only the cache"},
					&cli.StringFlag{Name: "cache-from", Usage: "read cache records from registry repository REF (HOST/NAME), as OCI artifacts"},
					&cli.StringFlag{Name: "cache-to", Usage: "write cache records to registry repository REF (HOST/NAME), with the docker config's credentials"},
					cacheSign(), cacheTrust(),
					&cli.BoolFlag{Name: "dry-run", Usage: "print every change apply would make and change nothing"},
					&cli.BoolFlag{Name: "json", Usage: "print the changes as JSON (the default with --log-format json)"},
					&cli.BoolFlag{Name: "undo", Usage: "put the root back as it was before the last apply (takes no RECIPE)"},
					&cli.BoolFlag{Name: "force", Usage: "with --undo: undo paths changed since apply too, losing those changes"},
					&cli.StringFlag{Name: "work-dir", Usage: "where the scratch copy of the root is made (default the system temp dir; on the root's file system reflinks make it cheap)"},
					&cli.BoolFlag{Name: "keep-work", Usage: "keep the scratch copy for debugging"},
					set(),
				}, common...),
				Action: func(c *cli.Context) error {
					if c.Bool("undo") {
						return undo(c, code)
					}
					if c.Bool("force") {
						*code = exitUsage
						return errors.New("--force goes with --undo")
					}
					return act(c, code, getenv, func(rec *recipes.Recipe, o stamp.Options) error {
						p, err := stamp.Apply(c.Context, rec, c.String("root"), stamp.ApplyOptions{Options: o, DryRun: c.Bool("dry-run")})
						if err != nil {
							return err
						}
						if c.Bool("json") || c.String("log-format") == "json" {
							return p.WriteJSON(c.App.Writer)
						}
						return p.WriteText(c.App.Writer)
					})
				},
			},
			{
				Name:  "cache",
				Usage: "look after the build cache",
				Subcommands: []*cli.Command{{
					Name:  "prune",
					Usage: "remove what no build used lately: records, the blobs only they name, temp files",
					Flags: []cli.Flag{
						&cli.DurationFlag{Name: "keep-for", Value: 7 * 24 * time.Hour, Usage: "keep what a build used within this long (0 empties the cache)"},
						&cli.StringFlag{Name: "max-size", Usage: "then let go of what was used longest ago until the cache takes at most SIZE of disk (e.g. 20GiB)"},
						&cli.BoolFlag{Name: "dry-run", Usage: "say what would go and remove nothing"},
						common[0], common[1], common[2],
					},
					Action: func(c *cli.Context) error { return prune(c, code) },
				}},
			},
			{
				Name:  "serve",
				Usage: "build the recipes under --recipes DIR on request over HTTP, and serve their outputs from the cache",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "recipes", Required: true, Usage: "the directory of the recipes the server builds; nothing outside it is built"},
					&cli.StringFlag{Name: "listen", Value: "127.0.0.1:8080", Usage: "the address to listen on, HOST:PORT"},
					&cli.StringFlag{Name: "tokens", Usage: "a file of NAME TOKEN lines: the bearer tokens that may build (without it, nobody may)"},
					&cli.BoolFlag{Name: "auth-reads", Usage: "reading recipes, builds and images needs a token too"},
					&cli.IntFlag{Name: "max-builds", Usage: "builds that run at once (default half the cores, at least 1)"},
					&cli.IntFlag{Name: "queue", Value: serve.DefaultQueue, Usage: "builds that may wait for a place; more are answered 429"},
					&cli.IntFlag{Name: "max-builds-per-token", Value: serve.DefaultMaxPerToken, Usage: "builds one token may have queued or running"},
					&cli.StringFlag{Name: "cache-from", Usage: "read cache records from registry repository REF (HOST/NAME), as OCI artifacts"},
					&cli.StringFlag{Name: "cache-to", Usage: "write cache records to registry repository REF (HOST/NAME), with the docker config's credentials"},
					cacheSign(), cacheTrust(),
					insecure(),
					common[0], common[1], common[2],
				},
				Action: func(c *cli.Context) error { return serveCommand(c, code) },
			},
			{
				Name:  "version",
				Usage: "print stamp's own build information",
				Action: func(c *cli.Context) error {
					bi, ok := debug.ReadBuildInfo()
					if !ok {
						fmt.Fprintln(c.App.Writer, "stamp (no build information)")
						return nil
					}
					fmt.Fprintf(c.App.Writer, "stamp %s\n%s", bi.Main.Version, bi.String())
					return nil
				},
			},
		},
	}
	return app
}

// serveCommand is stamp serve: it runs until interrupted.
func serveCommand(c *cli.Context, code *int) error {
	*code = exitUsage
	if c.NArg() != 0 {
		return errors.New("serve takes no arguments")
	}
	log, err := newLogger(c)
	if err != nil {
		return err
	}
	cacheDir, err := privateDir(c, "cache-dir")
	if err != nil {
		return err
	}
	o := serve.Options{RecipeDir: c.String("recipes"), CacheDir: cacheDir, CacheFrom: c.String("cache-from"), CacheTo: c.String("cache-to"),
		CacheSign: c.String("cache-sign"), CacheTrust: c.StringSlice("cache-trust"),
		InsecureRegistries: c.StringSlice("insecure-registry"), AuthReads: c.Bool("auth-reads"),
		MaxBuilds: c.Int("max-builds"), Queue: c.Int("queue"), MaxPerToken: c.Int("max-builds-per-token"), Log: log}
	if f := c.String("tokens"); f != "" {
		if o.Tokens, err = serve.LoadTokens(f); err != nil {
			return err
		}
	}
	s, err := serve.New(o)
	if err != nil {
		return err
	}
	*code = exitFailed
	if err := s.ListenAndServe(c.Context, c.String("listen")); err != nil {
		return err
	}
	*code = exitOK
	return nil
}

// undo is stamp apply --undo: no recipe, only the root's own record.
func undo(c *cli.Context, code *int) error {
	if c.NArg() != 0 || c.Bool("dry-run") {
		*code = exitUsage
		return errors.New("apply --undo takes no RECIPE and no --dry-run")
	}
	log, err := newLogger(c)
	if err != nil {
		*code = exitUsage
		return err
	}
	res, err := hostroot.Undo(c.Context, c.String("root"), hostroot.UndoOptions{Force: c.Bool("force"), Log: log})
	if err != nil {
		*code = exitFailed
		return err
	}
	fmt.Fprintf(c.App.Writer, "undid %s: %d removed, %d restored, %d reset\n", res.Recipe, res.Removed, res.Restored, res.Changed)
	return nil
}

// prune is stamp cache prune.
func prune(c *cli.Context, code *int) error {
	if c.NArg() != 0 {
		*code = exitUsage
		return errors.New("cache prune takes no arguments")
	}
	log, err := newLogger(c)
	if err != nil {
		*code = exitUsage
		return err
	}
	po := stamp.PruneOptions{KeepFor: c.Duration("keep-for"), DryRun: c.Bool("dry-run")}
	if po.KeepFor < 0 {
		*code = exitUsage
		return fmt.Errorf("--keep-for %s: must not be negative", po.KeepFor)
	}
	if s := c.String("max-size"); s != "" {
		n, err := recipes.ParseSize(s)
		if err == nil && n == 0 {
			err = errors.New("auto is not a size here")
		}
		if err != nil {
			*code = exitUsage
			return fmt.Errorf("--max-size: %w", err)
		}
		po.MaxSize = n
	}
	cacheDir, err := privateDir(c, "cache-dir")
	if err != nil {
		*code = exitUsage
		return err
	}
	rep, err := stamp.PruneCache(c.Context, stamp.Options{CacheDir: cacheDir, Log: log}, po)
	if err != nil {
		*code = exitFailed
		return err
	}
	verb := "removed"
	if po.DryRun {
		verb = "to remove"
	}
	mib := func(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
	fmt.Fprintf(c.App.Writer, "records: %d %s, %d kept; blobs: %d %s (%s freed), %d kept (%s)\n",
		rep.Records, verb, rep.KeptRecords, rep.Blobs, verb, mib(rep.Freed), rep.KeptBlobs, mib(rep.Kept))
	return nil
}

// act loads the recipe, sets up logging and progress, runs fn and turns its
// error into the exit code.
func act(c *cli.Context, code *int, getenv func(string) string, fn func(*recipes.Recipe, stamp.Options) error) error {
	if c.NArg() != 1 {
		*code = exitUsage
		return fmt.Errorf("%s needs exactly one RECIPE argument", c.Command.Name)
	}
	if getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(buildMemoryLimit)
	}
	log, err := newLogger(c)
	if err != nil {
		*code = exitUsage
		return err
	}
	lo := recipes.Options{Set: map[string]string{}, HostApt: os.DirFS("/etc/apt")}
	if sf, ok := c.Generic("set").(*setFlag); ok {
		for _, arg := range *sf {
			name, value, err := recipes.ParseSet(arg)
			if err != nil {
				*code = exitUsage
				return err
			}
			lo.Set[name] = value // a later --set of the same name wins
		}
	}
	rec, err := recipes.LoadWith(c.Args().First(), lo)
	if err != nil {
		*code = exitUsage
		return err
	}
	workDir, err := privateDir(c, "work-dir")
	if err != nil {
		*code = exitUsage
		return err
	}
	cacheDir, err := privateDir(c, "cache-dir")
	if err != nil {
		*code = exitUsage
		return err
	}
	o := stamp.Options{
		OutputDir:          c.String("output"),
		WorkDir:            workDir,
		CacheDir:           cacheDir,
		LockPath:           c.String("lock"),
		Offline:            c.Bool("offline"),
		UpdateLock:         c.Bool("update-lock"),
		InsecureRegistries: c.StringSlice("insecure-registry"),
		KeepWork:           c.Bool("keep-work"),
		ReverseReaddir:     c.Bool("reverse-readdir"),
		NoCache:            c.Bool("no-cache"),
		CacheFrom:          c.String("cache-from"),
		CacheTo:            c.String("cache-to"),
		CacheSign:          c.String("cache-sign"),
		CacheTrust:         c.StringSlice("cache-trust"),
		Log:                log,
	}
	if c.IsSet("epoch") {
		e := c.Int64("epoch")
		o.Epoch = &e
	} else if s := getenv("SOURCE_DATE_EPOCH"); s != "" {
		e, err := strconv.ParseInt(s, 10, 64)
		if err != nil || e < 0 {
			*code = exitUsage
			return fmt.Errorf("SOURCE_DATE_EPOCH=%q is not a non-negative integer", s)
		}
		o.Epoch = &e
	}
	var b *bars
	if c.String("log-format") != "json" && term.IsTerminal(int(os.Stderr.Fd())) {
		b = newBars(os.Stderr)
		o.Progress = b.start
	}
	err = fn(rec, o)
	if b != nil {
		b.wait()
	}
	if err != nil {
		*code = exitFailed
		// An invalid recipe, or a request that cannot be carried out as
		// given, from the conductor or from verify.
		if stamp.IsUsage(err) {
			*code = exitUsage
		}
		if errors.Is(err, context.Canceled) {
			return errors.New("interrupted; no output was written under a final name")
		}
		return err
	}
	return nil
}

// childBuild makes each of verify's builds by running exe build as a child:
// only a process of its own can have another uid and umask. What the
// request leaves out (lock, epoch, registries) comes from o, the same for
// both builds.
func childBuild(exe string, o stamp.Options) (verify.BuildFunc, error) {
	lock := o.LockPath
	if lock != "" {
		abs, err := filepath.Abs(lock)
		if err != nil {
			return nil, err
		}
		lock = abs
	}
	return func(ctx context.Context, req verify.BuildRequest) error {
		args := []string{exe, "build", req.Recipe,
			"--output", req.OutputDir, "--work-dir", req.WorkDir, "--cache-dir", req.CacheDir, "--log-format", "text"}
		if lock != "" {
			args = append(args, "--lock", lock)
		}
		if o.Epoch != nil {
			args = append(args, "--epoch", strconv.FormatInt(*o.Epoch, 10))
		}
		for _, flag := range []struct {
			name string
			on   bool
		}{{"--offline", req.Offline}, {"--update-lock", o.UpdateLock}, {"--keep-work", o.KeepWork}, {"--reverse-readdir", req.ReverseReaddir}, {"--no-cache", req.NoCache}} {
			if flag.on {
				args = append(args, flag.name)
			}
		}
		for _, r := range o.InsecureRegistries {
			args = append(args, "--insecure-registry", r)
		}
		for _, a := range req.Set {
			args = append(args, "--set", a)
		}
		return verify.RunChild(ctx, req.Log, req.Run, filepath.Dir(req.Recipe), args)
	}, nil
}

// setFlag collects --set NAME=VALUE. A string slice flag would split a
// value at its commas.
type setFlag []string

func (s *setFlag) Set(v string) error { *s = append(*s, v); return nil }
func (s *setFlag) String() string     { return strings.Join(*s, " ") }

func newLogger(c *cli.Context) (*logrus.Logger, error) {
	log := logrus.New()
	log.SetOutput(os.Stderr)
	lvl, err := logrus.ParseLevel(c.String("log-level"))
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	log.SetLevel(lvl)
	switch c.String("log-format") {
	case "text":
		log.SetFormatter(&logrus.TextFormatter{DisableTimestamp: !term.IsTerminal(int(os.Stderr.Fd()))})
	case "json":
		// Milliseconds: a build's steps are timed from its log.
		log.SetFormatter(&logrus.JSONFormatter{TimestampFormat: "2006-01-02T15:04:05.000Z07:00"})
	default:
		return nil, fmt.Errorf("--log-format must be text or json, not %q", c.String("log-format"))
	}
	return log, nil
}

// interspersed moves a command's flags before its arguments, so that
// "stamp build RECIPE -o DIR" works as the design writes it: urfave/cli stops
// reading flags at the first argument.
func interspersed(app *cli.App, args []string) []string {
	if len(args) < 3 {
		return args
	}
	cmd := app.Command(args[1])
	if cmd == nil {
		return args
	}
	// A command's subcommand names itself next: "cache prune".
	head := 2
	for head < len(args) && len(cmd.Subcommands) > 0 {
		sub := cmd.Command(args[head])
		if sub == nil {
			return args
		}
		cmd = sub
		head++
	}
	takesValue := map[string]bool{}
	for _, f := range cmd.Flags {
		_, isBool := f.(*cli.BoolFlag)
		for _, n := range f.Names() {
			takesValue[n] = !isBool
		}
	}
	var flags, rest []string
	for i := head; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			rest = append(rest, args[i+1:]...)
			break
		}
		name := strings.TrimLeft(a, "-")
		if !strings.HasPrefix(a, "-") || a == "-" {
			rest = append(rest, a)
			continue
		}
		flags = append(flags, a)
		if !strings.Contains(name, "=") && takesValue[name] && i+1 < len(args) {
			flags = append(flags, args[i+1])
			i++
		}
	}
	out := append(append([]string{}, args[:head]...), flags...)
	if len(rest) > 0 {
		out = append(out, "--")
		out = append(out, rest...)
	}
	return out
}

// privateDir returns the directory a flag names as an absolute path, made
// (mode 0700) when missing, since a fresh CI runner has none and every
// path the build hands a child process must not depend on its working
// directory. "" stays "": the library's default.
func privateDir(c *cli.Context, flag string) (string, error) {
	dir := c.String(flag)
	if dir == "" {
		return "", nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("--%s %s: %w", flag, dir, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return "", fmt.Errorf("--%s %s: %w", flag, dir, err)
	}
	if flag == "cache-dir" {
		// A cache may be read-only: an --offline build only reads it.
		return abs, nil
	}
	probe, err := os.MkdirTemp(abs, ".stamp-probe-")
	if err != nil {
		return "", fmt.Errorf("--%s %s: not usable: %w", flag, dir, err)
	}
	os.Remove(probe)
	return abs, nil
}
