// Command mkbase builds the base root filesystem tarball that tests and
// `make demo` use, from real Debian packages:
//
//	mkbase -o base.tar.zst [-debs DIR] [-packages a,b,c] [-cache DIR]
//
// SOURCE_DATE_EPOCH, when set, is the mtime ceiling (default 1700000000).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"

	"github.com/stamp-dev/stamp/test/harness"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "mkbase:", err)
		os.Exit(1)
	}
}

func run() error {
	var opts harness.BaseOptions
	var pkgs string
	flag.StringVar(&opts.Output, "o", "", "output tarball (.tar, .tar.gz, .tar.zst, .tar.xz)")
	flag.StringVar(&opts.DebDir, "debs", "", "take .deb files from `DIR` instead of downloading")
	flag.StringVar(&pkgs, "packages", "", "comma-separated packages, merged in order (default "+strings.Join(harness.DefaultPackages, ",")+")")
	flag.StringVar(&opts.CacheDir, "cache", "", "keep downloaded .deb files in `DIR` (default "+harness.DebCacheDir()+")")
	flag.BoolVar(&opts.SplitUsr, "split-usr", false, "keep /bin, /sbin and /lib as directories instead of symlinks into /usr")
	verbose := flag.Bool("v", false, "print progress to stderr")
	flag.Parse()
	if opts.Output == "" || flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	if pkgs != "" {
		opts.Packages = strings.Split(pkgs, ",")
	}
	epoch, err := harness.EpochFromEnv()
	if err != nil {
		return err
	}
	opts.Epoch = epoch
	if *verbose {
		opts.Logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return harness.BuildBase(ctx, opts)
}
