#!/bin/sh
# Installs the Go tools `make lint` runs into .tools/ (gitignored), built from
# source through the Go module proxy at pinned versions so every machine lints
# with the same checks. Idempotent: it builds only what is missing or at
# another version.
set -eu

# staticcheck 2026.2.2; it analyses go1.26 code.
STATICCHECK_VERSION=v0.8.2

GO=${GO:-go}
cd "$(dirname "$0")/../.."
bin="$PWD/.tools"

if [ -x "$bin/staticcheck" ] &&
	"$bin/staticcheck" -version 2>/dev/null | grep -q "($(echo "$STATICCHECK_VERSION" | sed 's/^v//'))"; then
	exit 0
fi
echo "tools.sh: building staticcheck $STATICCHECK_VERSION into .tools/"
GOBIN="$bin" "$GO" install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
