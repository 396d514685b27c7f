// Package accountdb reads the account databases of a tree (/etc/passwd,
// /etc/group, /etc/shadow, /etc/gshadow): colon-separated records, one a
// line, as shadow-utils' commonio reads them. Everything in stamp that reads
// a user or group from a tree goes through Fields, so that all of it takes
// the same lines for records.
package accountdb

import "strings"

// The databases, as shadow-utils names them.
const (
	Passwd  = "/etc/passwd"
	Group   = "/etc/group"
	Shadow  = "/etc/shadow"
	Gshadow = "/etc/gshadow"
)

// Fields splits one line of an account database into its fields, the
// name first. It returns nil for a line that holds no record: a blank line,
// a comment, a NIS compat entry ("+", "-") or a line without a colon, which
// commonio keeps but never matches.
func Fields(line string) []string {
	if line == "" || line[0] == '#' || line[0] == '+' || line[0] == '-' || !strings.Contains(line, ":") {
		return nil
	}
	return strings.Split(line, ":")
}
