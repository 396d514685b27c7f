package scripts

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"

	"mvdan.cc/sh/v3/interp"

	"github.com/stamp-dev/stamp/packages/deb"
	"github.com/stamp-dev/stamp/packages/dpkg"
)

// debconfShim replaces /usr/share/debconf/confmodule when a script sources
// it. The real one re-executes the script under debconf's frontend, which
// for a postinst first runs the package's config script, and answers the
// script's commands from its database. Offline the frontend is the one a
// build would use, noninteractive: no question is shown, every question
// has its template's default until a script sets it, and db_input says
// the question was skipped (status 30). Each function sets RET and
// returns debconf's status code, as the real confmodule's do.
const debconfShim = `# stamp: debconf offline, noninteractive
stamp-debconf startup || exit $?
db_version() { RET=2.0; return 0; }
db_capb() { RET=""; return 0; }
db_stop() { return 0; }
db_title() { return 0; }
db_settitle() { return 0; }
db_progress() { return 0; }
db_info() { return 0; }
db_beginblock() { return 0; }
db_endblock() { return 0; }
db_go() { RET=""; return 0; }
db_data() { return 0; }
db_x_loadtemplatefile() { RET="$(stamp-debconf x_loadtemplatefile "$@")"; }
db_get() { RET="$(stamp-debconf get "$@")"; }
db_set() { RET="$(stamp-debconf set "$@")"; }
db_input() { RET="$(stamp-debconf input "$@")"; }
db_text() { RET="$(stamp-debconf input "$@")"; }
db_fget() { RET="$(stamp-debconf fget "$@")"; }
db_fset() { RET="$(stamp-debconf fset "$@")"; }
db_metaget() { RET="$(stamp-debconf metaget "$@")"; }
db_subst() { RET="$(stamp-debconf subst "$@")"; }
db_register() { RET="$(stamp-debconf register "$@")"; }
db_unregister() { RET="$(stamp-debconf unregister "$@")"; }
db_reset() { RET="$(stamp-debconf reset "$@")"; }
db_clear() { RET=""; return 0; }
db_purge() { RET="$(stamp-debconf purge "$@")"; }
`

const debconfModule = "/usr/share/debconf/confmodule"

// debconf's status codes (Debconf::ConfModule).
const (
	dcSuccess   = 0
	dcBadParams = 10
	dcInvisible = 30
)

// debconfDB is the question database of one layer's scripts: templates
// by name and the questions made from them.
type debconfDB struct {
	templates map[string]*dcTemplate
	questions map[string]*dcQuestion
	// configured remembers the packages whose config script ran, so a
	// postinst sourcing confmodule twice runs it once.
	configured map[string]bool
}

type dcTemplate struct {
	fields map[string]string // lower-case field name -> value (C locale)
}

type dcQuestion struct {
	template string
	value    *string
	flags    map[string]string
	substs   map[string]string
	owners   map[string]bool
}

func (r *run) debconf() *debconfDB {
	if r.env.debconf == nil {
		r.env.debconf = &debconfDB{templates: map[string]*dcTemplate{}, questions: map[string]*dcQuestion{}, configured: map[string]bool{}}
	}
	return r.env.debconf
}

// loadTemplates reads a templates file (the control member dpkg keeps as
// PKG.templates) into the database: every template makes the question of
// the same name, owned by pkg, as Debconf::Template->load does.
func (db *debconfDB) loadTemplates(b []byte, pkg string) error {
	paras, err := deb.ParseControl(bytes.NewReader(b))
	if err != nil {
		return err
	}
	for _, p := range paras {
		name := p.Get("Template")
		if name == "" {
			continue
		}
		t := &dcTemplate{fields: map[string]string{}}
		for _, f := range []string{"Type", "Default", "Choices", "Description"} {
			if v, ok := p.Lookup(f); ok {
				t.fields[strings.ToLower(f)] = v
			}
		}
		db.templates[name] = t
		q := db.questions[name]
		if q == nil {
			q = &dcQuestion{template: name, flags: map[string]string{}, substs: map[string]string{}, owners: map[string]bool{}}
			db.questions[name] = q
		}
		q.owners[pkg] = true
	}
	return nil
}

var dcVar = regexp.MustCompile(`\$\{([^}]+)\}`)

// expand substitutes ${name} as Debconf::Question's _expand_vars does.
func (q *dcQuestion) expand(s string) string {
	return dcVar.ReplaceAllStringFunc(s, func(m string) string {
		if v, ok := q.substs[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

// cmdDebconf answers the shim's commands. "startup" is the frontend
// starting for the script: the package's templates are loaded and, for a
// postinst, its config script runs first.
func cmdDebconf(r *run, hc interp.HandlerContext, args []string) error {
	if len(args) < 2 {
		return exit(dcBadParams)
	}
	db := r.debconf()
	pkg, _, _ := strings.Cut(r.s.Package, ":")
	cmd, rest := args[1], args[2:]
	if cmd == "startup" {
		return r.debconfStartup(hc, db, pkg)
	}
	if cmd == "x_loadtemplatefile" {
		return r.debconfLoadTemplateFile(hc, db, pkg, rest)
	}
	if len(rest) < 1 {
		return dcReply(hc, dcBadParams, "")
	}
	if cmd == "register" {
		return debconfRegister(hc, db, pkg, rest)
	}
	name := rest[0]
	if cmd == "input" {
		if len(rest) != 2 {
			return dcReply(hc, dcBadParams, "")
		}
		name = rest[1]
	}
	q := db.questions[name]
	if q == nil {
		return dcReply(hc, dcBadParams, fmt.Sprintf("%s doesn't exist", name))
	}
	return r.debconfQuestion(hc, db, pkg, cmd, name, q, rest)
}

// dcReply is the shim's answer: text on stdout, the code as the status.
func dcReply(hc interp.HandlerContext, code int, text string) error {
	fmt.Fprint(hc.Stdout, text)
	return exit(code)
}

// debconfLoadTemplateFile is X_LOADTEMPLATEFILE FILE [OWNER].
func (r *run) debconfLoadTemplateFile(hc interp.HandlerContext, db *debconfDB, pkg string, rest []string) error {
	if len(rest) < 1 {
		return dcReply(hc, dcBadParams, "")
	}
	b, err := r.readFile(r.treePath(hc.Dir, rest[0]))
	if err != nil {
		return dcReply(hc, dcBadParams, "cannot read "+rest[0])
	}
	owner := pkg
	if len(rest) > 1 {
		owner = rest[1]
	}
	if err := db.loadTemplates(b, owner); err != nil {
		return fmt.Errorf("debconf: %s: %w", rest[0], err)
	}
	return dcReply(hc, dcSuccess, "")
}

// debconfRegister is REGISTER TEMPLATE QUESTION.
func debconfRegister(hc interp.HandlerContext, db *debconfDB, pkg string, rest []string) error {
	if len(rest) != 2 || db.templates[rest[0]] == nil {
		return dcReply(hc, dcBadParams, "")
	}
	q := db.questions[rest[1]]
	if q == nil {
		q = &dcQuestion{flags: map[string]string{}, substs: map[string]string{}, owners: map[string]bool{}}
		db.questions[rest[1]] = q
	}
	q.template = rest[0]
	q.owners[pkg] = true
	return dcReply(hc, dcSuccess, "")
}

// debconfQuestion answers the commands on an existing question q (named
// name): INPUT, GET, SET, RESET, FGET, FSET, SUBST, METAGET, UNREGISTER
// and PURGE.
func (r *run) debconfQuestion(hc interp.HandlerContext, db *debconfDB, pkg, cmd, name string, q *dcQuestion, rest []string) error {
	reply := func(code int, text string) error { return dcReply(hc, code, text) }
	t := db.templates[q.template]
	switch cmd {
	case "input":
		// The noninteractive frontend shows nothing.
		return reply(dcInvisible, "question skipped")
	case "get":
		if q.value != nil {
			return reply(dcSuccess, *q.value)
		}
		if t != nil {
			return reply(dcSuccess, t.fields["default"])
		}
		return reply(dcSuccess, "")
	case "set":
		v := strings.Join(rest[1:], " ")
		q.value = &v
		return reply(dcSuccess, "value set")
	case "reset":
		q.value = nil
		q.flags["seen"] = "false"
		return reply(dcSuccess, "")
	case "fget":
		if len(rest) != 2 {
			return reply(dcBadParams, "")
		}
		if v, ok := q.flags[rest[1]]; ok {
			return reply(dcSuccess, v)
		}
		return reply(dcSuccess, "false")
	case "fset":
		if len(rest) < 3 {
			return reply(dcBadParams, "")
		}
		q.flags[rest[1]] = strings.Join(rest[2:], " ")
		return reply(dcSuccess, "")
	case "subst":
		if len(rest) < 2 {
			return reply(dcBadParams, "")
		}
		q.substs[rest[1]] = strings.Join(rest[2:], " ")
		return reply(dcSuccess, "")
	case "metaget":
		if len(rest) != 2 || t == nil {
			return reply(dcBadParams, "")
		}
		v, ok := t.fields[strings.ToLower(rest[1])]
		if !ok {
			return reply(dcBadParams, rest[1]+" does not exist")
		}
		return reply(dcSuccess, q.expand(v))
	case "unregister":
		delete(q.owners, pkg)
		if len(q.owners) == 0 {
			delete(db.questions, name)
		}
		return reply(dcSuccess, "")
	case "purge":
		for n, q := range db.questions {
			delete(q.owners, pkg)
			if len(q.owners) == 0 {
				delete(db.questions, n)
			}
		}
		return reply(dcSuccess, "")
	}
	return r.unhandled("debconf command " + cmd)
}

// debconfStartup is what the frontend does before it hands the script its
// first answer: load the package's templates, and for a postinst run the
// config script (with the postinst's arguments) unless it ran already.
func (r *run) debconfStartup(hc interp.HandlerContext, db *debconfDB, pkg string) error {
	info := func(member string) ([]byte, bool) {
		for _, name := range []string{pkg, r.s.Package} {
			for _, p := range []string{dpkg.InfoDir + "/" + name + "." + member, dpkg.InfoDir + "/" + name + ":" + r.env.Arch + "." + member} {
				if b, err := r.readFile(p); err == nil {
					return b, true
				}
			}
		}
		return nil, false
	}
	if b, ok := info("templates"); ok {
		if err := db.loadTemplates(b, pkg); err != nil {
			return fmt.Errorf("debconf: %s templates: %w", pkg, err)
		}
	}
	if r.s.Name != "postinst" || db.configured[pkg] {
		return nil
	}
	db.configured[pkg] = true
	body, ok := info("config")
	if !ok {
		return nil
	}
	var params []string
	for i := 1; ; i++ {
		v := hc.Env.Get(fmt.Sprint(i))
		if !v.IsSet() {
			break
		}
		params = append(params, v.String())
	}
	return r.nested(r.ctx, hc, Script{Package: r.s.Package, Version: r.s.Version, Name: "config", Body: body}, params)
}
