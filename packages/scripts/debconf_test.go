package scripts

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestDebconfNoninteractive: a postinst that sources confmodule gets what
// debconf's noninteractive frontend gives: its config script runs first,
// db_get answers a question's template default until a script sets it,
// db_input skips (30), db_metaget expands db_subst variables, and a
// question no template made is status 10, which fails a set -e script.
func TestDebconfNoninteractive(t *testing.T) {
	tr := newTree(t)
	file(t, tr, "/var/lib/dpkg/info/foo.templates", `Template: foo/enabled
Type: boolean
Default: false
Description: Enable foo?
 Long text.

Template: foo/zone
Type: select
Choices: ${zones}
Default: Etc
Description: Zone?
Description-de.UTF-8: Zone?
`)
	file(t, tr, "/var/lib/dpkg/info/foo.config", `#!/bin/sh
set -e
. /usr/share/debconf/confmodule
db_subst foo/zone zones "Etc, Europe"
db_input high foo/zone || echo "input: $?" >> /log
`)
	body := `#!/bin/sh
set -e
. /usr/share/debconf/confmodule
db_version 2.0
db_get foo/enabled; echo "enabled=$RET" >> /log
db_get foo/zone; echo "zone=$RET" >> /log
db_metaget foo/zone choices; echo "choices=$RET" >> /log
db_set foo/zone Europe
db_get foo/zone; echo "zone=$RET" >> /log
db_fget foo/zone seen; echo "seen=$RET" >> /log
db_reset foo/zone
db_get foo/zone; echo "zone=$RET" >> /log
db_stop
`
	if err := Run(context.Background(), env(tr), Script{Package: "foo", Name: "postinst", Body: []byte(body)}, "configure", ""); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(snapshot(tr, "/log"), "")
	want := "/log = input: 30\nenabled=false\nzone=Etc\nchoices=Etc, Europe\nzone=Europe\nseen=false\nzone=Etc\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	err := Run(context.Background(), env(tr), Script{Package: "foo", Name: "postinst",
		Body: []byte("#!/bin/sh\nset -e\n. /usr/share/debconf/confmodule\ndb_get foo/nonexistent\necho unreachable >> /log\n")}, "configure", "")
	var se *ScriptError
	if !errors.As(err, &se) || se.Status != 10 {
		t.Errorf("an unknown question: err = %v, want exit status 10", err)
	}
}
