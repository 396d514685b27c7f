#!/bin/sh
# A customize.post hook: it runs on the tree's directory with a fixed
# environment (umask 022, TZ=UTC, LANG=C.UTF-8, SOURCE_DATE_EPOCH, STAMP_ROOT);
# what it changes is folded into the index.
set -eu
printf 'Built by stamp at epoch %s.\n' "$SOURCE_DATE_EPOCH" > "$STAMP_ROOT/etc/motd"
chmod 0644 "$STAMP_ROOT/etc/motd"
