package layers

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/stamp-dev/stamp/packages/deb"
	"github.com/stamp-dev/stamp/packages/dpkg"
	"github.com/stamp-dev/stamp/packages/order"
	"github.com/stamp-dev/stamp/packages/repo"
	"github.com/stamp-dev/stamp/packages/resolve"
	"github.com/stamp-dev/stamp/packages/scripts"
	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/sandbox"
)

// Debs installs packages from a Debian repository the way apt-get install
// --no-install-recommends and dpkg would, without running anything: the
// packages are chosen against the tree's dpkg status, every index and .deb
// is verified, data.tar is unpacked through the confined extractor (keeping
// merged-/usr directory symlinks), the dpkg database is written as dpkg
// writes it, and the maintainer scripts' effects are applied by the
// offline handlers of packages/scripts.
type Debs struct {
	Repo       string   // archive root URL
	Suites     []string // one or more suites, all read
	Components []string
	Packages   []string
	Trusted    bool // no signature check (reads Release, not InRelease)
	Recommends bool
	// Exclude are globs of package paths not to install (docs, man pages,
	// locales); they are left out of the .list and .md5sums too, so the
	// dpkg database stays true.
	Exclude []string
	// DeferScripts lets scripts the offline handlers cannot apply run at
	// first boot instead: their packages stay unpacked and a unit runs
	// dpkg --configure -a. Without it such a script fails the build.
	DeferScripts bool
	// Skip are commands (by base name) that maintainer scripts call and
	// that neither run nor wait for first boot, as if they had succeeded.
	Skip []string
	// Pinned, when set, gives the digest stamp.lock holds for a .deb URL.
	// Every package is checked against it before anything is fetched,
	// on top of the pinned index's SHA256.
	Pinned func(url string) (digest string, ok bool)
	// Chroot runs the maintainer scripts for real, chrooted into the tree
	// (as root, or as root of a user namespace), instead of through the
	// offline handlers: the preinsts one by one before each unpack, then
	// dpkg --configure -a.
	Chroot bool
	// NoPrograms runs no program of the image even in the sandbox (a
	// recipe's offline-only): the handlers that would (py_compile) count
	// as unhandled.
	NoPrograms bool

	// Variant, when set, makes the layer a bootstrap (base.debs): the
	// tree must be empty; it is laid out merged-/usr, and the variant's
	// packages (see variantRequests) are installed with Packages.
	Variant string

	// Keyring is the OpenPGP keyring InRelease is verified with (kind
	// "file"); unused when Trusted.
	Keyring Input
	// Index holds one input per suite (kind "deb"): its InRelease, or its
	// Release when Trusted. The lock pins them, and through their SHA256
	// lists every Packages index and .deb.
	Index []Input
}

// NewDebs builds the layer and its inputs for a repository and suites.
func NewDebs(repoURL string, suites []string, keyring string, trusted bool) *Debs {
	l := &Debs{Repo: strings.TrimSuffix(repoURL, "/"), Suites: suites, Trusted: trusted}
	if !trusted && keyring != "" {
		l.Keyring = Input{Kind: InputFile, URI: keyring}
	}
	for _, s := range suites {
		src := repo.Source{URL: l.Repo, Suite: s, Trusted: trusted}
		l.Index = append(l.Index, Input{Kind: InputDeb, URI: src.ReleaseURL()})
	}
	return l
}

// Kind implements Layer.
func (*Debs) Kind() string { return "debs" }

// Inputs implements WithInputs.
func (l *Debs) Inputs() []*Input {
	var out []*Input
	if l.Keyring.URI != "" {
		out = append(out, &l.Keyring)
	}
	for i := range l.Index {
		out = append(out, &l.Index[i])
	}
	return out
}

// PhaseKeeping implements PhaseKeeper: installing packages takes far
// longer than writing the tree again.
func (*Debs) PhaseKeeping() Keeping { return KeepingAlways }

// UseLock implements Resolver: every .deb is checked against the digest
// the lock holds for its URL.
func (l *Debs) UseLock(pinned func(kind InputKind, uri string) (string, bool)) {
	l.Pinned = func(url string) (string, bool) { return pinned(InputDeb, url) }
}

// RunNoPrograms implements ProgramFree.
func (l *Debs) RunNoPrograms() { l.NoPrograms = true }

// Precheck implements Prechecker: scripts: chroot needs a sandbox that can
// run the image's programs.
func (l *Debs) Precheck(arch string) error {
	if !l.Chroot {
		return nil
	}
	if err := sandbox.Check(false); err != nil {
		return fmt.Errorf("scripts: chroot: %w", err)
	}
	if err := sandbox.CheckArch(arch); err != nil {
		return fmt.Errorf("scripts: chroot: %w", err)
	}
	return nil
}

// debPackage is one package on its way into the tree.
type debPackage struct {
	pkg     *repo.Package
	digest  string // of the .deb
	control *deb.Control
	list    []string // data.tar members as dpkg lists them, excluded ones left out
	state   string
	// old is the installed version this one upgrades, "" for a new
	// package; oldInfo is where its info files are.
	old     string
	oldArch string
	oldMA   string
}

func (p *debPackage) id() string { return p.pkg.Name + "_" + p.pkg.Version + "_" + p.pkg.Arch }

// Apply implements Layer.
func (l *Debs) Apply(ctx context.Context, env *Env) error {
	if err := l.apply(ctx, env); err != nil {
		return fmt.Errorf("%s: %w", env.Label, err)
	}
	return nil
}

func (l *Debs) apply(ctx context.Context, env *Env) error {
	// Maintainer scripts, their handlers and the chroot read the
	// directory, so every file must be in it.
	if err := env.Tree.Materialize(ctx); err != nil {
		return err
	}
	for _, pat := range l.Exclude {
		if !rootfs.ValidPattern(pat) {
			return fmt.Errorf("exclude %q: not an absolute glob", pat)
		}
	}
	ch, err := l.chroot(env)
	if err != nil {
		return err
	}
	status, install, err := l.resolveInstall(ctx, env)
	if err != nil {
		return err
	}
	pkgs, err := fetchDebs(ctx, env, status, install)
	if err != nil {
		return err
	}
	se := l.scriptEnv(env)
	later := l.deferCommands(env, se)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var deferred []string
	if ch == nil {
		if pkgs, deferred, err = l.installOffline(ctx, env, se, status, pkgs); err != nil {
			return err
		}
		if err := l.finishOffline(env, status, pkgs); err != nil {
			return err
		}
	} else if err := l.chrootInstall(ctx, env, ch, se, status, pkgs); err != nil {
		return err
	}
	if len(deferred) > 0 || len(*later) > 0 {
		if err := l.firstBootUnit(ctx, env, deferred, *later); err != nil {
			return err
		}
	}
	return nil
}

// chroot is the sandbox maintainer scripts run in, or nil when the layer
// runs them offline.
func (l *Debs) chroot(env *Env) (*sandbox.Sandbox, error) {
	if !l.Chroot {
		return nil, nil
	}
	ch := &sandbox.Sandbox{Tree: env.Tree, Epoch: env.Epoch, DenyServices: true,
		Logf: func(format string, args ...any) { env.Log.Debugf(env.Label+": "+format, args...) }}
	// A bootstrap's tree is empty until its Essential set is
	// extracted, below.
	if l.Variant == "" {
		if err := ch.Available(); err != nil {
			return nil, fmt.Errorf("scripts: chroot: %w", err)
		}
	}
	return ch, nil
}

// resolveInstall reads the indexes and the tree's dpkg status, and works
// out the packages to install, checked against stamp.lock's pins.
func (l *Debs) resolveInstall(ctx context.Context, env *Env) (*dpkg.Status, []*repo.Package, error) {
	available, err := l.load(ctx, env)
	if err != nil {
		return nil, nil, err
	}
	requests, err := l.requests(available)
	if err != nil {
		return nil, nil, err
	}
	if l.Variant != "" {
		if err := mergedUsr(env); err != nil {
			return nil, nil, err
		}
	}
	status, err := readStatus(env.Tree)
	if err != nil {
		return nil, nil, err
	}
	installed, err := status.Installed(env.Arch)
	if err != nil {
		return nil, nil, err
	}
	res, err := resolve.Resolve(available, installed, requests, resolve.Options{Arch: env.Arch, Recommends: l.Recommends})
	if err != nil {
		return nil, nil, err
	}
	env.Log.Infof("%s: installing %d packages: %s", env.Label, len(res.Install), strings.Join(res.Names(), " "))
	if l.Pinned != nil {
		for _, p := range res.Install {
			if want, ok := l.Pinned(p.URL()); ok && want != "sha256:"+p.SHA256 {
				return nil, nil, fmt.Errorf("%s %s: stamp.lock pins %s at %s, the repository's index says sha256:%s (run stamp lock to accept it)",
					p.Name, p.Version, p.URL(), want, p.SHA256)
			}
		}
	}
	return status, res.Install, nil
}

// fetchDebs fetches and verifies every .deb before the tree changes, and
// notes the version each replaces.
func fetchDebs(ctx context.Context, env *Env, status *dpkg.Status, install []*repo.Package) ([]*debPackage, error) {
	pkgs := make([]*debPackage, len(install))
	var total int64
	for _, p := range install {
		total += p.Size
	}
	add, done := env.progress("fetch packages", total)
	defer done()
	for i, p := range install {
		d, err := repo.FetchDeb(ctx, env.Cache, p)
		if err != nil {
			return nil, err
		}
		add(p.Size)
		pkgs[i] = &debPackage{pkg: p, digest: d}
		if cur := status.Get(p.Name); cur != nil && len(strings.Fields(cur.Get("Status"))) == 3 && strings.Fields(cur.Get("Status"))[2] != "not-installed" && strings.Fields(cur.Get("Status"))[2] != "config-files" {
			pkgs[i].old, pkgs[i].oldArch, pkgs[i].oldMA = cur.Get("Version"), cur.Get("Architecture"), cur.Get("Multi-Arch")
		}
	}
	return pkgs, nil
}

// deferCommands makes se skip the commands the recipe skips and, with
// DeferScripts, put off the deferrable ones; it returns where the put-off
// commands collect, each once.
func (l *Debs) deferCommands(env *Env, se *scripts.Env) *[][]string {
	later := new([][]string)
	if !l.DeferScripts && len(l.Skip) == 0 {
		return later
	}
	se.Defer = func(pkg string, argv []string) bool {
		if slices.Contains(l.Skip, path.Base(argv[0])) {
			env.Log.Infof("%s: %s runs %q; skipped, as the recipe asks", env.Label, pkg, strings.Join(argv, " "))
			return true
		}
		// Only commands whose work nothing later in the build
		// depends on: an initramfs is made at first boot as well as
		// here, and stamp's own boot outputs bring theirs.
		if !l.DeferScripts || !deferrable[path.Base(argv[0])] {
			return false
		}
		env.Log.Warnf("%s: %s runs %q; deferred to first boot", env.Label, pkg, strings.Join(argv, " "))
		for _, c := range *later {
			if slices.Equal(c, argv) {
				return true
			}
		}
		*later = append(*later, argv)
		return true
	}
	return later
}

// installOffline unpacks and configures every package when apt and dpkg
// would (packages/order): the order is in the bytes, from the ids adduser
// and systemd-sysusers pick to the order of dpkg's trigger interests.
// Decoding data.tar (xz, mostly) is the slow part and runs ahead in
// parallel, in unpack order; the tree changes in order only. It returns
// the packages unpacked and those whose scripts were deferred.
func (l *Debs) installOffline(ctx context.Context, env *Env, se *scripts.Env, status *dpkg.Status, pkgs []*debPackage) ([]*debPackage, []string, error) {
	calls, known, err := l.plan(env, status, pkgs)
	if err != nil {
		return nil, nil, err
	}
	for _, c := range calls {
		env.Log.Debugf("%s: planned: dpkg %s", env.Label, c)
	}
	byName := map[string]*debPackage{}
	for _, p := range pkgs {
		byName[p.pkg.Name] = p
	}
	var ordered []*debPackage
	for _, rp := range order.UnpackOrder(calls) {
		ordered = append(ordered, byName[rp.Name])
	}
	ahead, err := decodeAhead(ctx, env, ordered)
	if err != nil {
		return nil, nil, err
	}
	defer ahead.close()
	next := 0
	r := &debsRunner{ctx: ctx, l: l, env: env, se: se, byName: byName}
	r.next = func(p *debPackage) (decoded, error) {
		if next >= len(ordered) || ordered[next] != p {
			return decoded{}, fmt.Errorf("%s: unpacked out of the planned order", p.pkg.Name)
		}
		d := ahead.next()
		next++
		return d, d.err
	}
	d := order.NewDpkg(known, r)
	for _, c := range calls {
		if err := d.Run(c); err != nil {
			return nil, nil, fmt.Errorf("dpkg %s: %w", c, err)
		}
	}
	if err := se.Settle(ctx); err != nil {
		return nil, nil, err
	}
	return r.unpacked, r.deferred, nil
}

// finishOffline does what dpkg does after an offline install: it records
// trigger interests, runs the triggers and writes the status file.
func (l *Debs) finishOffline(env *Env, status *dpkg.Status, pkgs []*debPackage) error {
	if err := recordInterests(env, pkgs); err != nil {
		return err
	}
	if err := l.processTriggers(env, pkgs); err != nil {
		return err
	}
	for _, p := range pkgs {
		para, err := statusEntry(env.Tree, p)
		if err != nil {
			return err
		}
		status.Put(para)
	}
	return writeTreeFile(env, dpkg.StatusPath, status.Bytes(), 0o644, env.Origin("", "dpkg status"))
}

// load reads every suite's indexes, verified.
func (l *Debs) load(ctx context.Context, env *Env) ([]*repo.Package, error) {
	var keyring []byte
	if !l.Trusted {
		if l.Keyring.Digest == "" {
			return nil, errors.New("no keyring: name one (keyring:) or set trusted: true")
		}
		rc, err := env.Cache.Open(l.Keyring.Digest)
		if err != nil {
			return nil, err
		}
		keyring, err = io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return nil, fmt.Errorf("keyring %s: %w", l.Keyring.URI, err)
		}
	}
	var idx []*repo.Index
	for i, suite := range l.Suites {
		src := repo.Source{URL: l.Repo, Suite: suite, Components: l.Components, Arch: env.Arch, Trusted: l.Trusted}
		if src.Flat() {
			src.Components = nil
		}
		if !l.Trusted {
			kr, err := repo.ReadKeyring(keyring)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", l.Keyring.URI, err)
			}
			src.Keyring = kr
		}
		digest := ""
		if i < len(l.Index) {
			digest = l.Index[i].Digest
		}
		ix, err := repo.Load(ctx, env.Cache, src, digest)
		if err != nil {
			return nil, err
		}
		env.Log.Debugf("%s: %s %s: %d packages (signed by %s)", env.Label, l.Repo, suite, len(ix.Packages), ix.Release.Signer)
		idx = append(idx, ix)
	}
	return repo.Merge(idx...), nil
}

func readStatus(t *rootfs.Tree) (*dpkg.Status, error) {
	e, err := t.Lookup(dpkg.StatusPath, true)
	if errors.Is(err, fs.ErrNotExist) {
		return dpkg.NewStatus(), nil
	}
	if err != nil {
		return nil, err
	}
	f, err := t.Open(e.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s, err := dpkg.ReadStatus(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dpkg.StatusPath, err)
	}
	return s, nil
}

func (l *Debs) excluded(p string) bool {
	for _, pat := range l.Exclude {
		if rootfs.Match(pat, p) || rootfs.Match(strings.TrimSuffix(pat, "/")+"/**", p) {
			return true
		}
	}
	return false
}

// unpack runs the preinst and extracts data.tar.
func (l *Debs) unpack(ctx context.Context, env *Env, se *scripts.Env, ch *sandbox.Sandbox, p *debPackage, d decoded) error {
	defer d.data.close()
	p.control = d.control
	// The byte-compiles the scripts before asked for read the files this
	// package may replace.
	if err := se.Settle(ctx); err != nil {
		return err
	}
	if got := p.control.Paragraph.Get("Package"); got != p.pkg.Name || p.control.Paragraph.Get("Version") != p.pkg.Version {
		return fmt.Errorf("%s: the .deb holds %s %s, the index says %s %s", p.pkg.URL(), got, p.control.Paragraph.Get("Version"), p.pkg.Name, p.pkg.Version)
	}
	// A preinst (and on an upgrade the old prerm and postrm) cannot wait
	// for first boot: the files they prepare for are about to change.
	if p.old != "" {
		if err := l.oldScript(ctx, env, se, ch, p, "prerm", "upgrade", p.pkg.Version); err != nil {
			return err
		}
	}
	if body, ok := p.control.Files["preinst"]; ok {
		se.Origin = env.Origin(p.digest, p.id()+":preinst")
		args := []string{"install"}
		if p.old != "" {
			args = []string{"upgrade", p.old}
		}
		var err error
		if ch != nil {
			err = l.chrootPreinst(ctx, env, ch, p, body, args)
		} else {
			err = scripts.Run(ctx, se, scripts.Script{Package: p.pkg.Name, Version: p.pkg.Version, Name: "preinst", Body: body}, args...)
		}
		if err != nil {
			return err
		}
	}
	var oldList []string
	if p.old != "" {
		b, _, err := readTreeContent(env.Tree, dpkg.InfoFile(p.pkg.Name, p.oldArch, p.oldMA, "list"))
		if err != nil {
			return err
		}
		oldList = strings.Split(strings.TrimSpace(string(b)), "\n")
	}
	seen := map[string]bool{}
	opts := rootfs.ExtractOptions{
		Origin:          env.Origin(p.digest, ""),
		KeepDirSymlinks: true,
		Map: func(q string) (string, bool) {
			if l.excluded(q) {
				return "", false
			}
			// Map sees a hard link's target too, which is already listed.
			if !seen[q] {
				seen[q] = true
				p.list = append(p.list, q)
			}
			return q, true
		},
	}
	data, err := d.data.reader()
	if err != nil {
		return fmt.Errorf("%s: %w", p.pkg.URL(), err)
	}
	if _, err := rootfs.Extract(ctx, env.Tree, data, opts); err != nil {
		return fmt.Errorf("%s: %w", p.pkg.URL(), err)
	}
	if p.old != "" {
		if err := l.oldScript(ctx, env, se, ch, p, "postrm", "upgrade", p.pkg.Version); err != nil {
			return err
		}
		if err := removeObsolete(env, p, oldList); err != nil {
			return err
		}
	}
	for _, q := range p.list {
		rp, err := env.Tree.Resolve(q, false)
		if err != nil {
			continue
		}
		if e := env.Tree.Get(rp); e != nil && e.Origin.Input == p.digest {
			e.Origin.Member = p.id() + ":" + q
		}
	}
	return l.writeInfo(env, p)
}

// writeInfo writes the package's files in /var/lib/dpkg/info.
func (l *Debs) writeInfo(env *Env, p *debPackage) error {
	c := p.control
	name, arch, ma := p.pkg.Name, p.pkg.Arch, c.Paragraph.Get("Multi-Arch")
	if env.Tree.Get(dpkg.InfoDir+"/format") == nil {
		if err := writeTreeFile(env, dpkg.InfoDir+"/format", []byte(dpkg.InfoFormat), 0o644, env.Origin("", "dpkg info format")); err != nil {
			return err
		}
	}
	origin := func(member string) rootfs.Origin { return env.Origin(p.digest, p.id()+":control/"+member) }
	if p.old != "" {
		// The old version's info files go; the new ones are written below.
		for _, f := range env.Tree.Children(dpkg.InfoDir) {
			for _, pre := range []string{name + ".", name + ":" + p.oldArch + "."} {
				if strings.HasPrefix(f, pre) && !strings.Contains(strings.TrimPrefix(f, pre), ".") {
					if err := env.Tree.Remove(dpkg.InfoDir + "/" + f); err != nil {
						return err
					}
				}
			}
		}
	}
	for _, m := range c.Names() {
		if !dpkg.CopiedControl(m) {
			continue
		}
		data := c.Files[m]
		if m == "md5sums" {
			var err error
			if data, err = dpkg.FilterMD5Sums(data, func(q string) bool { return !l.excluded(q) }); err != nil {
				return fmt.Errorf("%s: %w", p.id(), err)
			}
		}
		if err := writeTreeFile(env, dpkg.InfoFile(name, arch, ma, m), data, uint32(c.Modes[m]&0o777), origin(m)); err != nil {
			return err
		}
	}
	if _, ok := c.Files["md5sums"]; !ok {
		// dpkg records the sums it computed while unpacking.
		sums, err := md5sums(env.Tree, p.list)
		if err != nil {
			return err
		}
		if err := writeTreeFile(env, dpkg.InfoFile(name, arch, ma, "md5sums"), sums, 0o644, origin("md5sums")); err != nil {
			return err
		}
	}
	return writeTreeFile(env, dpkg.InfoFile(name, arch, ma, "list"), dpkg.ListFile(p.list), 0o644, origin("list"))
}

func md5sums(t *rootfs.Tree, list []string) ([]byte, error) {
	var b bytes.Buffer
	for _, q := range list {
		rp, err := t.Resolve(q, false)
		if err != nil {
			return nil, err
		}
		e := t.Get(rp)
		if e == nil || e.Type != rootfs.TypeRegular {
			continue
		}
		sum, err := md5Of(t, rp)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "%s  %s\n", sum, strings.TrimPrefix(q, "/"))
	}
	return b.Bytes(), nil
}

func md5Of(t *rootfs.Tree, p string) (string, error) {
	f, err := t.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := md5.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// configure runs the postinst.
func (l *Debs) configure(ctx context.Context, env *Env, se *scripts.Env, p *debPackage) error {
	body, ok := p.control.Files["postinst"]
	if !ok {
		return nil
	}
	se.Origin = env.Origin(p.digest, p.id()+":postinst")
	return scripts.Run(ctx, se, scripts.Script{Package: p.pkg.Name, Version: p.pkg.Version, Name: "postinst", Body: body}, "configure", p.old)
}

// oldScript runs a maintainer script of the installed version being
// upgraded, from the info directory, as dpkg does.
func (l *Debs) oldScript(ctx context.Context, env *Env, se *scripts.Env, ch *sandbox.Sandbox, p *debPackage, name string, args ...string) error {
	info := dpkg.InfoFile(p.pkg.Name, p.oldArch, p.oldMA, name)
	b, e, err := readTreeContent(env.Tree, info)
	if err != nil || e == nil {
		return err
	}
	if ch != nil {
		if err := chrootRun(ctx, ch, p.pkg.Name, name, scripts.MaintainerEnv(p.pkg.Name, name, env.Arch), append([]string{info}, args...)...); err != nil {
			return err
		}
		return l.chrootRescan(ctx, env, ch, p.pkg.Name+"_"+p.old+":"+name)
	}
	se.Origin = env.Origin("", p.pkg.Name+"_"+p.old+":"+name)
	return scripts.Run(ctx, se, scripts.Script{Package: p.pkg.Name, Version: p.old, Name: name, Body: b}, args...)
}

// chrootInstall installs the packages with dpkg itself configuring them,
// chrooted: each batch (for a bootstrap, the Essential set, extracted
// first so that its first preinst has a shell, then the rest) is unpacked
// package by package, then configured by dpkg --configure -a in the order
// dpkg chooses.
func (l *Debs) chrootInstall(ctx context.Context, env *Env, ch *sandbox.Sandbox, se *scripts.Env, status *dpkg.Status, pkgs []*debPackage) error {
	batches := [][]*debPackage{pkgs}
	if l.Variant != "" {
		batches = essentialFirst(pkgs)
		pkgs = append(append([]*debPackage{}, batches[0]...), batches[1]...)
		if err := l.extractEssential(ctx, env, batches[0]); err != nil {
			return err
		}
		if err := ch.Available(); err != nil {
			return fmt.Errorf("scripts: chroot: %w", err)
		}
	}
	ahead, err := decodeAhead(ctx, env, pkgs)
	if err != nil {
		return err
	}
	defer ahead.close()
	for _, batch := range batches {
		for _, p := range batch {
			if err := ctx.Err(); err != nil {
				return err
			}
			d := ahead.next()
			if d.err != nil {
				return d.err
			}
			if err := l.unpack(ctx, env, se, ch, p, d); err != nil {
				return err
			}
		}
		var err error
		if status, err = l.chrootConfigure(ctx, env, ch, status, batch); err != nil {
			return err
		}
	}
	return nil
}

// chrootConfigure records a batch of unpacked packages in the dpkg status
// and has dpkg configure them, chrooted; it returns the status dpkg left.
func (l *Debs) chrootConfigure(ctx context.Context, env *Env, ch *sandbox.Sandbox, status *dpkg.Status, batch []*debPackage) (*dpkg.Status, error) {
	for _, p := range batch {
		p.state = "install ok unpacked"
		para, err := statusEntry(env.Tree, p)
		if err != nil {
			return nil, err
		}
		status.Put(para)
	}
	if err := writeTreeFile(env, dpkg.StatusPath, status.Bytes(), 0o644, env.Origin("", "dpkg status")); err != nil {
		return nil, err
	}
	if err := chrootRun(ctx, ch, "dpkg", "--configure", nil, "/usr/bin/dpkg", "--configure", "-a"); err != nil {
		return nil, err
	}
	if err := l.chrootRescan(ctx, env, ch, "dpkg --configure -a"); err != nil {
		return nil, err
	}
	return readStatus(env.Tree)
}

// extractEssential lays the Essential set's files into the empty tree
// before any of its scripts runs chrooted, as mmdebstrap extracts them
// before its first dpkg run: the first preinst needs a shell, and a
// sandbox needs /proc and /dev to mount on. Each package is then
// unpacked again, properly, with its preinst.
func (l *Debs) extractEssential(ctx context.Context, env *Env, pkgs []*debPackage) error {
	for _, p := range pkgs {
		if err := l.extractOnly(ctx, env, p); err != nil {
			return fmt.Errorf("%s: %w", p.pkg.URL(), err)
		}
	}
	return nil
}

// chrootScratch is where a preinst waits to run, as dpkg keeps the control
// area of the package it is unpacking.
const chrootScratch = "/var/lib/dpkg/tmp.ci"

// chrootPreinst runs a new package's preinst in the chroot from dpkg's
// scratch directory, then folds what it did into the index.
func (l *Debs) chrootPreinst(ctx context.Context, env *Env, ch *sandbox.Sandbox, p *debPackage, body []byte, args []string) error {
	origin := env.Origin(p.digest, p.id()+":preinst")
	if _, err := env.Tree.MkdirAll(chrootScratch, rootfs.Header{Perm: 0o755, MTime: env.Epoch, Origin: origin}); err != nil {
		return err
	}
	if err := writeTreeFile(env, chrootScratch+"/preinst", body, 0o755, origin); err != nil {
		return err
	}
	err := chrootRun(ctx, ch, p.pkg.Name, "preinst", scripts.MaintainerEnv(p.pkg.Name, "preinst", env.Arch), append([]string{chrootScratch + "/preinst"}, args...)...)
	if rerr := env.Tree.Remove(chrootScratch); err == nil {
		err = rerr
	}
	if err != nil {
		return err
	}
	return l.chrootRescan(ctx, env, ch, p.id()+":preinst")
}

// chrootRun runs a maintainer script (or dpkg) in the sandbox with what apt
// would give it, and reports a failure as dpkg would.
func chrootRun(ctx context.Context, ch *sandbox.Sandbox, pkg, script string, env []string, argv ...string) error {
	err := ch.Run(ctx, pkg+" "+script, append(scripts.ChrootEnv(), env...), argv...)
	var ee *sandbox.ExitError
	if errors.As(err, &ee) {
		return &scripts.ScriptError{Package: pkg, Script: script, Status: uint8(ee.Status), Output: ee.Output}
	}
	return err
}

// chrootRescan folds what chrooted scripts did into the index, with the
// owners they gave.
func (l *Debs) chrootRescan(ctx context.Context, env *Env, ch *sandbox.Sandbox, what string) error {
	c, err := ch.FoldBack(ctx, env.Origin("", what))
	if err != nil {
		return err
	}
	env.Log.Debugf("%s: %s: %d added, %d changed, %d removed", env.Label, what, len(c.Added), len(c.Modified), len(c.Removed))
	return nil
}

// removeObsolete deletes what the old version listed and the new one does
// not, deepest first; directories only when empty, and conffiles never, as
// dpkg keeps them.
func removeObsolete(env *Env, p *debPackage, oldList []string) error {
	keep := map[string]bool{}
	for _, q := range p.list {
		keep[q] = true
	}
	for _, c := range dpkg.ParseConffiles(p.control.Files["conffiles"]) {
		keep[c] = true
	}
	for i := len(oldList) - 1; i >= 0; i-- {
		q := oldList[i]
		if q == "/." || q == "" || keep[q] {
			continue
		}
		rp, err := env.Tree.Resolve(q, false)
		if err != nil {
			continue
		}
		e := env.Tree.Get(rp)
		if e == nil || e.Type == rootfs.TypeDir && len(env.Tree.Children(rp)) > 0 {
			continue
		}
		if err := env.Tree.Remove(rp); err != nil {
			return err
		}
	}
	return nil
}

// statusEntry builds the package's status paragraph, with the hashes of
// its conffiles as installed.
func statusEntry(t *rootfs.Tree, p *debPackage) (*deb.Paragraph, error) {
	var cfs []dpkg.Conffile
	for _, c := range dpkg.ParseConffiles(p.control.Files["conffiles"]) {
		e, err := t.Lookup(c, true)
		if err != nil || e.Type != rootfs.TypeRegular {
			// Excluded, or removed by a script: dpkg records it as
			// obsolete only on upgrade; leave it out.
			continue
		}
		sum, err := md5Of(t, e.Path)
		if err != nil {
			return nil, err
		}
		cfs = append(cfs, dpkg.Conffile{Path: c, MD5: sum})
	}
	return dpkg.StatusParagraph(p.control.Paragraph, p.state, cfs), nil
}

// scriptEnv connects the script handlers to the layers that keep accounts
// and systemd links.
func (l *Debs) scriptEnv(env *Env) *scripts.Env {
	return &scripts.Env{
		Tree:       env.Tree,
		Arch:       env.Arch,
		Epoch:      env.Epoch,
		NoPrograms: l.NoPrograms,
		Logf:       func(format string, args ...any) { env.Log.Debugf(env.Label+": "+format, args...) },
		Systemctl: func(ctx context.Context, verb string, units []string) error {
			s := &Systemd{}
			switch verb {
			case "enable", "preset", "reenable":
				// Debian's default preset policy enables everything.
				s.Enable = units
			case "disable":
				s.Disable = units
			case "mask":
				s.Mask = units
			case "unmask":
				for _, u := range units {
					if e := env.Tree.Get(unitConfigDir + "/" + u); e != nil && e.Type == rootfs.TypeSymlink && e.Target == "/dev/null" {
						if err := env.Tree.Remove(e.Path); err != nil {
							return err
						}
					}
				}
				return nil
			default:
				return fmt.Errorf("systemctl %s is not supported offline", verb)
			}
			return s.Apply(ctx, env)
		},
		AddGroup: func(ctx context.Context, g scripts.Group) error {
			return (&Groups{Groups: []Group{{Name: g.Name, GID: g.GID, System: g.System}}}).Apply(ctx, env)
		},
		AddUser: func(ctx context.Context, u scripts.User) error {
			create := u.CreateHome
			return (&Users{Users: []User{{Name: u.Name, UID: u.UID, Group: u.Group, GID: u.GID, Groups: u.Groups,
				Home: u.Home, Shell: u.Shell, Comment: u.Comment, System: u.System, CreateHome: &create}}}).Apply(ctx, env)
		},
	}
}

// firstBootUnit installs and enables a unit that configures the deferred
// packages on first boot.
func (l *Debs) firstBootUnit(ctx context.Context, env *Env, pkgs []string, commands [][]string) error {
	sort.Strings(pkgs)
	const unit = "stamp-dpkg-configure.service"
	var why, exec strings.Builder
	if len(pkgs) > 0 {
		fmt.Fprintf(&why, "# Written by stamp: maintainer scripts of %s\n# could not be applied offline; dpkg configures them on first boot.\n", strings.Join(pkgs, ", "))
		exec.WriteString("ExecStart=/usr/bin/dpkg --configure -a\n")
	}
	for _, c := range commands {
		fmt.Fprintf(&why, "# Written by stamp: %s was deferred to first boot.\n", strings.Join(c, " "))
		fmt.Fprintf(&exec, "ExecStart=%s\n", strings.Join(c, " "))
	}
	body := why.String() +
		"[Unit]\nDescription=Configure packages unpacked at image build time\n" +
		"After=local-fs.target\nBefore=multi-user.target\n\n" +
		"[Service]\nType=oneshot\n" + exec.String() + "RemainAfterExit=yes\n\n" +
		"[Install]\nWantedBy=multi-user.target\n"
	if err := writeTreeFile(env, "/etc/systemd/system/"+unit, []byte(body), 0o644, env.Origin("", "deferred maintainer scripts")); err != nil {
		return err
	}
	return (&Systemd{Enable: []string{unit}}).Apply(ctx, env)
}

// deferrable are the commands deferScripts may postpone one by one, leaving
// the package that runs them configured.
// systemd-hwdb is among them for builds where no program of the image may
// run (its handler runs the image's own in the sandbox): its hwdb.bin
// records the path of every source file, so it cannot be run on a scratch
// copy outside a chroot, where that would be the scratch path.
var deferrable = map[string]bool{"update-initramfs": true, "systemd-hwdb": true}

// writeTreeFile writes a root-owned file into the tree at p (parents made
// as needed), with the build's epoch as mtime.
func writeTreeFile(env *Env, p string, data []byte, perm uint32, origin rootfs.Origin) error {
	rp, err := env.Tree.Resolve(p, true)
	if err != nil {
		return err
	}
	h := rootfs.Header{Perm: 0o755, MTime: env.Epoch, Origin: origin}
	if _, err := env.Tree.MkdirAll(path.Dir(rp), h); err != nil {
		return err
	}
	h.Type, h.Perm = rootfs.TypeRegular, perm
	if _, err := env.Tree.Create(rp, h, bytes.NewReader(data)); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	return nil
}

// Pins implements Resolver: it lists the .deb files the layer would install
// on a tree with no packages yet, each as a kind "deb" input with its URL
// and the digest its index gives, for stamp.lock. The Index inputs must be
// resolved. What is installed already at build time is skipped then, so
// the lock may pin a few more .debs than a build fetches; every one it
// pins is the exact version and digest the pinned Release leads to. A request that only the
// tree's packages make resolvable (a virtual package one of whose
// providers the base has) pins no .debs: the Release pin still fixes them.
func (l *Debs) Pins(ctx context.Context, env *Env) ([]Input, error) {
	available, err := l.load(ctx, env)
	if err != nil {
		return nil, err
	}
	requests, err := l.requests(available)
	if err != nil {
		return nil, err
	}
	res, err := resolve.Resolve(available, nil, requests, resolve.Options{Arch: env.Arch, Recommends: l.Recommends})
	if err != nil {
		env.Log.Warnf("%s: %v; pinning the index only", env.Label, err)
		return nil, nil
	}
	var out []Input
	for _, p := range res.Install {
		out = append(out, Input{Kind: InputDeb, URI: p.URL(), Digest: "sha256:" + p.SHA256})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].URI < out[j].URI })
	return out, nil
}
