//go:build node

package e2e

import (
	"archive/tar"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/test/harness"
)

// rebuildTries is how many times each round runs the rebuilds that take
// seconds: nothing changed, and one file changed.
const rebuildTries = 3

// BenchmarkNodeBuild measures what CI users of the node feel, stamp as uid
// 65534 beside mmdebstrap (minbase, the node's packages and the Kubernetes
// ones, from the same local repositories, into a tarball) in one run:
//   - first: the very first build, with an empty cache;
//   - cold: --no-cache, the inputs already in the cache;
//   - nothing changed: the same recipe again, with the cache (rebuildTries
//     times);
//   - one file changed in customize (a sysctl file the files layer copies;
//     rebuildTries times, each a change of its own);
//   - one package added in customize (a debs layer of one package);
//
// each with its peak RSS, its CPU time (user and system, the build's and
// its children's) and the steal time of the machine's CPUs while it ran
// (time the hypervisor gave to other guests: on a shared machine the part
// of a run's wandering that is not stamp's). The outputs of the first rebuild of each kind
// are checked against a cold build of the same recipe (in the first round),
// byte for byte through SHA256SUMS, which each output directory is checked
// against. It also reports the time per step (each layer, seal, each
// output) of the cold build and of the median rebuild after one file
// changed, from the build's own log; the size of the node's tree without the container images in
// containerd's state (which mmdebstrap does not make) against
// mmdebstrap's tarball; and, from the images layer's report, how long
// writing containerd's state took and its sizes. Needs root: mmdebstrap
// --mode=root.
func BenchmarkNodeBuild(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Fatal("needs root: mmdebstrap runs in --mode=root beside stamp")
	}
	harness.RequireSetpriv(b)
	mmdebstrap := harness.Tool(b, "mmdebstrap")
	nb := prepareNodeBuild(b, func(string) {})
	recipe := filepath.Join(nb.dir, "k8s-node.yaml")
	y, err := os.ReadFile(recipe)
	if err != nil {
		b.Fatal(err)
	}
	// The timed builds are of the node's recipe as it is. The tarball that
	// sizes the tree against mmdebstrap's comes from an untimed build of
	// the same tree into a tar alone; outputs: is the recipe's last section.
	head, _, ok := strings.Cut(string(y), "\noutputs:\n")
	if !ok {
		b.Fatal("the node recipe has no outputs: section")
	}
	writeFiles(b, nb.dir, map[string]string{"k8s-node-tar.yaml": head + "\noutputs:\n  - {format: tar}\n"})
	// The added package: one of the user's own, from a repository of its
	// own, as a fleet adds its agent.
	agentDir := filepath.Join(nb.dir, "agent-deb")
	if err := os.MkdirAll(agentDir, 0o755); err != nil {
		b.Fatal(err)
	}
	agent := harness.FlatDebRepoFor(b, &harness.DebRepo{}, harness.ScriptDeb(b, agentDir, "stamp-bench-agent", "#!/bin/sh\nset -e\n"))
	copyFile(b, agent.Keyring, filepath.Join(nb.dir, "agent.gpg"))
	added := strings.Replace(string(y), "\nprovision:\n", fmt.Sprintf(`    - debs:
        repo: %s
        suite: /
        keyring: ./agent.gpg
        packages: [stamp-bench-agent]

provision:
`, agent.FileURL()), 1)
	if added == string(y) {
		b.Fatal("the node recipe has no provision: section to add a customize layer before")
	}
	writeFiles(b, nb.dir, map[string]string{"k8s-node-added.yaml": added})
	sysctl := filepath.Join(nb.dir, "k8s-node", "99-kubernetes.conf")
	sysctlData, err := os.ReadFile(sysctl)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.Chmod(nb.dir, 0o777); err != nil {
		b.Fatal(err)
	}

	// The same packages as the recipe installs: its runtime, as the mode
	// chooses it, in place of Debian's.
	include := slices.DeleteFunc(slices.Clone(harness.NodeDebPackages), func(p string) bool { return p == "containerd" || p == "runc" })
	for _, p := range nb.mode.runtimePackages() {
		if p[1] != "" {
			p[0] += "=" + p[1]
		}
		include = append(include, p[0])
	}
	include = append(include, "kubelet", "kubeadm", "kubectl", "cri-tools", "kubernetes-cni")
	sources := []string{
		fmt.Sprintf("deb [signed-by=%s] %s %s %s", filepath.Join(nb.dir, "debian.gpg"), "copy://"+nb.repo.Dir, nb.repo.Suite, nb.repo.Component),
		fmt.Sprintf("deb [signed-by=%s] %s %s", filepath.Join(nb.dir, "kubernetes.gpg"), "copy://"+nb.in.Repo.Dir, nb.in.Repo.Suite),
	}
	if nb.ctdRepo != nil {
		sources = append(sources, fmt.Sprintf("deb [signed-by=%s] %s %s", filepath.Join(nb.dir, "containerd.gpg"), "copy://"+nb.ctdRepo.Dir, nb.ctdRepo.Suite))
	}

	type measure struct {
		times      []time.Duration
		cpu, steal []float64
		rss        int64
	}
	cases := []string{"first (empty cache)", "cold (--no-cache)", "nothing changed", "one file changed", "one package added", "mmdebstrap"}
	m := map[string]*measure{}
	for _, c := range cases {
		m[c] = &measure{}
	}
	note := func(c string, r runTimes) {
		m[c].times = append(m[c].times, r.d)
		m[c].cpu = append(m[c].cpu, r.user+r.sys)
		m[c].steal = append(m[c].steal, r.steal)
		m[c].rss = max(m[c].rss, r.rss)
		// As it goes, so a run that fails later still shows what it
		// measured.
		b.Logf("%s: %.1f s, CPU user %.1f s sys %.1f s, steal %.1f s, peak RSS %d MiB", c, r.d.Seconds(), r.user, r.sys, r.steal, r.rss)
	}
	var stampAll, stampPkgs, mmSize int64
	var state imagesReport
	var steps []stepTime
	type timedSteps struct {
		d     time.Duration
		steps []stepTime
	}
	var changedSteps []timedSteps
	rssFile := filepath.Join(nb.dir, "rss")
	out := func(name string) string { return filepath.Join(nb.dir, name) }
	for i := 0; i < b.N; i++ {
		cache := filepath.Join(nb.dir, fmt.Sprintf("cache-%d", i))
		build := func(recipe, dir string, extra ...string) runTimes {
			b.Helper()
			args := append([]string{"build", recipe, "-o", out(dir), "--cache-dir", cache, "--work-dir", nb.dir,
				"--insecure-registry", nb.reg.Addr, "--log-level", "debug", "--log-format", "json"}, nb.setArgs...)
			cmd := exec.Command(stampBin, append(args, extra...)...)
			cmd.Dir = nb.dir
			return timedRun(b, harness.Unprivileged(cmd), rssFile)
		}
		note("first (empty cache)", build("k8s-node.yaml", "first"))
		os.RemoveAll(out("first"))

		cold := build("k8s-node.yaml", "cold", "--no-cache")
		note("cold (--no-cache)", cold)
		r := imagesLayerReport(b, cold.out)
		state.seconds += r.seconds
		state.contentBytes, state.layerBytes, state.snapshotBytes = r.contentBytes, r.layerBytes, r.snapshotBytes
		if i == 0 {
			steps = stepTimes(b, cold.out, cold.d)
		}

		for range rebuildTries {
			note("nothing changed", build("k8s-node.yaml", "nothing"))
			sameOutputsBySums(b, out("cold"), out("nothing"))
			os.RemoveAll(out("nothing"))
		}
		os.RemoveAll(out("cold"))
		build("k8s-node-tar.yaml", "tar")
		stampAll, stampPkgs = nodeTarSizes(b, filepath.Join(out("tar"), "k8s-node.tar"))
		os.RemoveAll(out("tar"))

		// A rebuild after a change, checked (when check is set, in the
		// first round) against a cold build of the changed recipe.
		rebuild := func(c, recipe string, check bool) {
			r := build(recipe, "changed")
			note(c, r)
			if i == 0 && c == "one file changed" {
				changedSteps = append(changedSteps, timedSteps{r.d, stepTimes(b, r.out, r.d)})
			}
			if i == 0 && check {
				build(recipe, "changed-cold", "--no-cache")
				sameOutputsBySums(b, out("changed-cold"), out("changed"))
				os.RemoveAll(out("changed-cold"))
			}
			os.RemoveAll(out("changed"))
		}
		// The one-file rebuild is seconds and wanders by as much between
		// runs, so it runs rebuildTries times, each after a change of its
		// own.
		for k := range rebuildTries {
			if err := os.WriteFile(sysctl, append(slices.Clone(sysctlData), fmt.Sprintf("# changed in round %d, try %d\n", i, k)...), 0o644); err != nil {
				b.Fatal(err)
			}
			rebuild("one file changed", "k8s-node.yaml", k == 0)
		}
		if err := os.WriteFile(sysctl, sysctlData, 0o644); err != nil {
			b.Fatal(err)
		}
		rebuild("one package added", "k8s-node-added.yaml", true)
		os.RemoveAll(cache)

		tarball := filepath.Join(nb.dir, "mmdebstrap.tar")
		// copy://, not file://: mmdebstrap's apt runs chrooted, where
		// the host's repository paths do not exist.
		cmd := exec.Command(mmdebstrap, append([]string{"--mode=root", "--variant=minbase", "--quiet",
			"--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
			"--include=" + strings.Join(include, ","), nb.repo.Suite, tarball}, sources...)...)
		cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH=1700000000")
		note("mmdebstrap", timedRun(b, cmd, rssFile))
		fi, err := os.Stat(tarball)
		if err != nil {
			b.Fatal(err)
		}
		mmSize = fi.Size()
		os.Remove(tarball)
	}
	// The summary goes to stdout: the testing package keeps only the first
	// ten lines of a benchmark's log, which the notes above fill.
	mm := median(m["mmdebstrap"].times)
	for _, c := range cases {
		ts := m[c].times
		fmt.Printf("node: %-20s median %6.1f s (min %6.1f, max %6.1f, %d runs), %.3fx mmdebstrap, peak RSS %d MiB, CPU %.1f s (%.1f-%.1f), steal %.1f s (%.1f-%.1f)\n",
			c, median(ts).Seconds(), slices.Min(ts).Seconds(), slices.Max(ts).Seconds(), len(ts), median(ts).Seconds()/mm.Seconds(), m[c].rss,
			medianOf(m[c].cpu), slices.Min(m[c].cpu), slices.Max(m[c].cpu), medianOf(m[c].steal), slices.Min(m[c].steal), slices.Max(m[c].steal))
	}
	for _, st := range steps {
		fmt.Printf("node: cold build step %-40s %6.2f s\n", st.name, st.seconds)
	}
	// The steps of the median one-file rebuild.
	slices.SortFunc(changedSteps, func(x, y timedSteps) int { return cmp.Compare(x.d, y.d) })
	if len(changedSteps) > 0 {
		for _, st := range changedSteps[len(changedSteps)/2].steps {
			fmt.Printf("node: one-file rebuild step %-35s %6.2f s\n", st.name, st.seconds)
		}
	}
	b.ReportMetric(median(m["first (empty cache)"].times).Seconds(), "first-s")
	b.ReportMetric(median(m["cold (--no-cache)"].times).Seconds(), "cold-s")
	b.ReportMetric(median(m["nothing changed"].times).Seconds(), "nothing-changed-s")
	b.ReportMetric(median(m["one file changed"].times).Seconds(), "file-changed-s")
	b.ReportMetric(median(m["one package added"].times).Seconds(), "package-added-s")
	b.ReportMetric(mm.Seconds(), "mmdebstrap-s")
	b.ReportMetric(median(m["cold (--no-cache)"].times).Seconds()/mm.Seconds(), "cold/mmdebstrap")
	var rss int64
	for _, c := range cases[:5] {
		rss = max(rss, m[c].rss)
	}
	b.ReportMetric(float64(rss), "stamp-peak-RSS-MiB")
	b.ReportMetric(float64(stampAll)/(1<<20), "stamp-tar-MiB")
	b.ReportMetric(float64(stampPkgs)/(1<<20), "stamp-no-images-MiB")
	b.ReportMetric(float64(mmSize)/(1<<20), "mmdebstrap-tar-MiB")
	b.ReportMetric(float64(stampPkgs)/float64(mmSize), "size-ratio")
	n := float64(b.N)
	b.ReportMetric(state.seconds/n, "containerd-state-s/op")
	b.ReportMetric(float64(state.contentBytes)/(1<<20), "content-MiB")
	b.ReportMetric(float64(state.layerBytes)/(1<<20), "layer-blobs-MiB")
	b.ReportMetric(float64(state.snapshotBytes)/(1<<20), "snapshots-MiB")
	if s := state.seconds / n; s > 5 {
		fmt.Printf("node: over budget: writing containerd's state for the node's images took %.1f s of the cold build; the budget is 5 s\n", s)
	}
}

// stepTime is how long one step of a build took, by the build's own log.
type stepTime struct {
	name    string
	seconds float64
}

// stepTimes reads a build's JSON log (--log-level debug) for the time each
// layer, the seal and each output took: the "... done in D" and "wrote F
// in D" records the build writes as each ends, and the restore of a tree
// from the phase cache, up to its record. From the records' times it
// adds what came before the first phase (the recipe, the inputs resolved,
// fetched and verified) and, from the build's whole time, what came after
// the last output was written (the hashing still running, the cache
// records, the output directory's files), which nothing logs.
func stepTimes(b *testing.B, log []byte, total time.Duration) []stepTime {
	b.Helper()
	done := regexp.MustCompile(`^(.+) done in (\S+)$`)
	wrote := regexp.MustCompile(`^wrote (\S+) in (\S+)$`)
	restored := regexp.MustCompile(`^cache: the tree after (\S+) is in the cache`)
	var steps []stepTime
	var first, firstPhase, lastOutput, last time.Time
	var restore *stepTime
	for _, l := range strings.Split(string(log), "\n") {
		var e struct {
			Msg  string    `json:"msg"`
			Time time.Time `json:"time"`
		}
		if json.Unmarshal([]byte(l), &e) != nil {
			continue
		}
		if first.IsZero() {
			first = e.Time
		}
		if m := restored.FindStringSubmatch(e.Msg); m != nil && restore == nil {
			// From the line before: the tree is restored between them.
			restore = &stepTime{"restore the tree after " + m[1], e.Time.Sub(last).Seconds()}
		}
		last = e.Time
		if firstPhase.IsZero() && strings.HasPrefix(e.Msg, "phase ") {
			firstPhase = e.Time
		}
		if strings.HasPrefix(e.Msg, "wrote ") {
			lastOutput = e.Time
		}
		var name, dur string
		if m := done.FindStringSubmatch(e.Msg); m != nil {
			name, dur = m[1], m[2]
		} else if m := wrote.FindStringSubmatch(e.Msg); m != nil {
			name, dur = "output "+m[1], m[2]
		} else {
			continue
		}
		d, err := time.ParseDuration(dur)
		if err != nil {
			b.Fatalf("the build's log says %q: %v", e.Msg, err)
		}
		steps = append(steps, stepTime{name, d.Seconds()})
	}
	if len(steps) == 0 || firstPhase.IsZero() || lastOutput.IsZero() {
		b.Fatalf("the build's log times no phase or no output:\n%s", lastLines(string(log), 20))
	}
	head := []stepTime{{"inputs (resolve, fetch, verify)", firstPhase.Sub(first).Seconds()}}
	if restore != nil {
		head[0].seconds -= restore.seconds
		head = append(head, *restore)
	}
	steps = append(head, steps...)
	return append(steps, stepTime{"after the last output (hashing, records)", total.Seconds() - lastOutput.Sub(first).Seconds()})
}

// sameOutputsBySums checks two output directories: each against its own
// SHA256SUMS (sha256sum -c reads every byte), and the two SHA256SUMS and
// the lists of files against each other. It streams what sameOutputDirs
// would hold in memory, gigabytes for the node.
func sameOutputsBySums(b *testing.B, x, y string) {
	b.Helper()
	for _, d := range []string{x, y} {
		cmd := exec.Command("sha256sum", "--quiet", "--strict", "-c", "SHA256SUMS")
		cmd.Dir = d
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%s: sha256sum -c SHA256SUMS: %v\n%s", d, err, out)
		}
	}
	list := func(d string) string {
		es, err := os.ReadDir(d)
		if err != nil {
			b.Fatal(err)
		}
		var names []string
		for _, e := range es {
			names = append(names, e.Name())
		}
		return strings.Join(names, " ")
	}
	if lx, ly := list(x), list(y); lx != ly {
		b.Fatalf("%s has %s; %s has %s", x, lx, y, ly)
	}
	sx, err := os.ReadFile(filepath.Join(x, "SHA256SUMS"))
	if err != nil {
		b.Fatal(err)
	}
	sy, err := os.ReadFile(filepath.Join(y, "SHA256SUMS"))
	if err != nil {
		b.Fatal(err)
	}
	if string(sx) != string(sy) {
		b.Fatalf("SHA256SUMS differ:\n%s:\n%s\n%s:\n%s", x, sx, y, sy)
	}
}

// imagesReport is what the images layer reports of containerd's state.
type imagesReport struct {
	seconds                                 float64
	contentBytes, layerBytes, snapshotBytes int64
}

// imagesLayerReport finds the images layer's report in a build's JSON log.
func imagesLayerReport(b *testing.B, log []byte) imagesReport {
	b.Helper()
	for _, l := range strings.Split(string(log), "\n") {
		var e struct {
			Msg                                     string  `json:"msg"`
			Seconds                                 float64 `json:"seconds"`
			ContentBytes, LayerBytes, SnapshotBytes int64
		}
		if json.Unmarshal([]byte(l), &e) == nil && strings.Contains(e.Msg, "into containerd's state") {
			return imagesReport{e.Seconds, e.ContentBytes, e.LayerBytes, e.SnapshotBytes}
		}
	}
	b.Fatalf("the build's log has no report of the images layer:\n%s", log)
	return imagesReport{}
}

// nodeTarSizes returns the tarball's size, and that size less the
// images in containerd's state under /var/lib/containerd.
func nodeTarSizes(b *testing.B, p string) (all, withoutImages int64) {
	b.Helper()
	f, err := os.Open(p)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		b.Fatal(err)
	}
	var images int64
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			b.Fatalf("%s: %v", p, err)
		}
		if strings.HasPrefix(strings.TrimPrefix(h.Name, "./"), "var/lib/containerd/") {
			images += 512 + (h.Size+511)/512*512
		}
	}
	return fi.Size(), fi.Size() - images
}
