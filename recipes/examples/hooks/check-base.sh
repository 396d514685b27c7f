#!/bin/sh
# A base.post hook: fail early if the base is not what this recipe expects.
set -eu
test -f "$STAMP_ROOT/etc/debian_version" || { echo "base is not Debian" >&2; exit 1; }
echo "base: Debian $(cat "$STAMP_ROOT/etc/debian_version")"
