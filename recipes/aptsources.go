package recipes

import (
	"bufio"
	"bytes"
	"errors"
	"io/fs"
	"path"
	"slices"
	"strings"
)

// debianSuites are the suite names that mark a source as Debian's own
// archive: release codenames and their aliases. A third-party repository
// with component main (a vendor's packages, a security or backports
// suite) names another suite, so it is never taken for the mirror.
var debianSuites = []string{
	"oldoldstable", "oldstable", "stable", "testing", "unstable", "sid", "experimental",
	"buster", "bullseye", "bookworm", "trixie", "forky", "duke",
}

// HostDebianMirror returns the URI of the first "deb" source for a Debian
// suite with component main, reading sources.list and then
// sources.list.d/*.list and *.sources (deb822) in name order, as apt does.
// apt is the host's /etc/apt. It returns "" when there is none.
func HostDebianMirror(apt fs.FS) (string, error) {
	files := []string{"sources.list"}
	ents, err := fs.ReadDir(apt, "sources.list.d")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	for _, e := range ents { // ReadDir sorts by name
		if !e.IsDir() && (strings.HasSuffix(e.Name(), ".list") || strings.HasSuffix(e.Name(), ".sources")) {
			files = append(files, path.Join("sources.list.d", e.Name()))
		}
	}
	for _, f := range files {
		data, err := fs.ReadFile(apt, f)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		var srcs []aptSource
		if strings.HasSuffix(f, ".sources") {
			srcs = deb822Sources(data)
		} else {
			srcs = oneLineSources(data)
		}
		for _, s := range srcs {
			if u := s.debianMain(); u != "" {
				return u, nil
			}
		}
	}
	return "", nil
}

// aptSource is one source entry; a deb822 stanza may name several URIs and suites.
type aptSource struct {
	types, uris, suites, components []string
	enabled                         bool
}

func (s aptSource) debianMain() string {
	if !s.enabled || !slices.Contains(s.types, "deb") || !slices.Contains(s.components, "main") {
		return ""
	}
	if !slices.ContainsFunc(s.suites, func(x string) bool { return slices.Contains(debianSuites, strings.TrimSuffix(x, "/")) }) {
		return ""
	}
	for _, u := range s.uris {
		// cdrom: and apt's mirror+ methods name no archive a build can read.
		if strings.HasPrefix(u, "http://") || strings.HasPrefix(u, "https://") || strings.HasPrefix(u, "file:/") {
			return strings.TrimRight(u, "/")
		}
	}
	return ""
}

// oneLineSources reads sources.list: "deb [options] URI SUITE COMPONENT...".
func oneLineSources(data []byte) []aptSource {
	var out []aptSource
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) < 3 {
			continue
		}
		typ, rest := fields[0], fields[1:]
		if strings.HasPrefix(rest[0], "[") {
			// Options may hold spaces inside the brackets: "[ arch=amd64 ]".
			for len(rest) > 0 && !strings.HasSuffix(rest[0], "]") {
				rest = rest[1:]
			}
			if len(rest) > 0 {
				rest = rest[1:]
			}
		}
		if len(rest) < 2 {
			continue
		}
		out = append(out, aptSource{types: []string{typ}, uris: rest[:1], suites: rest[1:2], components: rest[2:], enabled: true})
	}
	return out
}

// deb822Sources reads a .sources file: stanzas of "Field: value" lines
// separated by blank lines; continuation lines start with white space.
func deb822Sources(data []byte) []aptSource {
	var out []aptSource
	fields := map[string]string{}
	last := ""
	flush := func() {
		if len(fields) > 0 {
			out = append(out, aptSource{
				types:      strings.Fields(fields["types"]),
				uris:       strings.Fields(fields["uris"]),
				suites:     strings.Fields(fields["suites"]),
				components: strings.Fields(fields["components"]),
				enabled:    !slices.Contains([]string{"no", "false", "0"}, strings.ToLower(strings.TrimSpace(fields["enabled"]))),
			})
		}
		fields, last = map[string]string{}, ""
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "#"):
		case strings.TrimSpace(line) == "":
			flush()
		case line[0] == ' ' || line[0] == '\t':
			if last != "" {
				fields[last] += " " + strings.TrimSpace(line)
			}
		default:
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			last = strings.ToLower(strings.TrimSpace(k))
			fields[last] = strings.TrimSpace(v)
		}
	}
	flush()
	return out
}
