package rootfs

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"
)

// defaultCleanup is what every sealed tree loses unless the recipe says
// `cleanup: none`: state that is specific to one machine or one build.
var defaultCleanup = []string{
	"/etc/ssh/ssh_host_*",
	"/var/lib/dbus/machine-id",
	"/var/lib/systemd/random-seed",
	"/var/lib/systemd/credential.secret",
	"/var/lib/urandom/random-seed",
	"/var/lib/apt/lists/*",
	"/var/cache/apt/*.bin",
	"/var/cache/apt/archives/*.deb",
	"/var/cache/apt/archives/partial/*",
	"/var/cache/debconf/*-old",
	"/var/cache/ldconfig/aux-cache",
	"/var/cache/man/**",
	"/var/lib/dpkg/*-old",
	"/tmp/**",
	"/var/tmp/**",
}

// SealOptions say how to seal a tree.
type SealOptions struct {
	Epoch time.Time
	// NoDefaultCleanup turns off the built-in rules.
	NoDefaultCleanup bool
	// Cleanup globs are removed in addition to the built-in rules.
	Cleanup []string
	// Record, when set, makes the build's record: it is handed the tree
	// digest and the entries of the cleaned, clamped tree, and what it
	// returns is written at RecordPath, the last change the tree sees.
	// The digest leaves the record out, so the record can name it.
	Record func(treeDigest string, entries []*Entry) ([]byte, error)
}

// SealReport says what sealing changed.
type SealReport struct {
	Removed []string
	Emptied []string
	Clamped int
}

// Seal applies the cleanup rules, clamps every mtime to the epoch (whole
// seconds) and writes the record, so that every output format reads one
// canonical tree, and returns the read-only view every output is written
// from. t must not change after it: whatever an output adds goes into an
// overlay of its own (Sealed.Overlay).
func Seal(ctx context.Context, t *Tree, o SealOptions) (*Sealed, *SealReport, error) {
	rep := &SealReport{}
	var globs []string
	if !o.NoDefaultCleanup {
		globs = append(globs, defaultCleanup...)
		// Logs go, the directories services expect stay.
		for _, p := range t.Glob("/var/log/**") {
			if e := t.entries[p]; e != nil && e.Type != TypeDir {
				globs = append(globs, p)
			}
		}
		// /run is a tmpfs on the booted system: what scripts left there
		// is never seen. /run/lock stays, as mmdebstrap keeps it, since
		// /var/lock may link to it.
		for _, name := range t.Children("/run") {
			if name != "lock" {
				globs = append(globs, "/run/"+name)
			}
		}
		if e := t.entries["/etc/machine-id"]; e != nil && e.Type == TypeRegular && e.Size > 0 {
			h := Header{Type: TypeRegular, Perm: e.Perm, UID: e.UID, GID: e.GID, MTime: o.Epoch, Xattrs: e.Xattrs, Origin: Origin{Layer: "seal"}}
			if _, err := t.Create("/etc/machine-id", h, strings.NewReader("")); err != nil {
				return nil, nil, err
			}
			rep.Emptied = append(rep.Emptied, "/etc/machine-id")
		}
	}
	globs = append(globs, o.Cleanup...)
	for _, g := range globs {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		removed, err := t.RemoveGlob(g)
		if err != nil {
			return nil, nil, err
		}
		rep.Removed = append(rep.Removed, removed...)
	}
	epoch := o.Epoch.Truncate(time.Second)
	for _, p := range t.Paths() {
		e := t.entries[p]
		m := e.MTime.Truncate(time.Second)
		if m.After(epoch) || e.MTime.IsZero() {
			m = epoch
			rep.Clamped++
		}
		e.MTime = time.Unix(m.Unix(), 0).UTC()
	}
	entries := t.Entries()
	s := &Sealed{t: t, digest: Digest(entries)}
	if o.Record != nil {
		if err := writeRecord(t, o, s.digest, entries); err != nil {
			return nil, nil, err
		}
	}
	return s, rep, nil
}

// writeRecord writes what o.Record makes at RecordPath, its directory made
// when missing, both with the epoch as their mtime.
func writeRecord(t *Tree, o SealOptions, digest string, entries []*Entry) error {
	data, err := o.Record(digest, entries)
	if err != nil {
		return fmt.Errorf("record: %w", err)
	}
	origin := Origin{Layer: "stamp"}
	if _, err := t.MkdirAll(recordDir, Header{Perm: 0o755, MTime: o.Epoch, Origin: origin}); err != nil {
		return fmt.Errorf("record: %w", err)
	}
	h := Header{Type: TypeRegular, Perm: 0o644, MTime: o.Epoch, Origin: origin}
	if _, err := t.Create(RecordPath, h, bytes.NewReader(data)); err != nil {
		return fmt.Errorf("record: %w", err)
	}
	return nil
}
