#!/usr/bin/env bash
# Installs ~60 Debian packages (~150 MB unpacked) from the local test
# repository onto the dpkg base, with stamp (unprivileged-capable offline
# path, whole build) and with apt-get + dpkg running the maintainer scripts
# in a chroot of the same base (tar -x + apt-get install), and prints both
# times and their ratio (target: ratio <= 1.0). Needs root for the chroot.
set -euo pipefail
cd "$(dirname "$0")/../.."
echo "== debs: ~60 packages onto the dpkg base, stamp vs apt-get/dpkg in a chroot"
go test -run '^$' -bench '^BenchmarkDebsInstall$' -benchtime "${BENCHTIME:-3x}" -timeout 30m ./test/e2e |
	grep -E '^(Benchmark|---|\s+debs_test)' || true
