#!/usr/bin/env bash
# Pulls ~200 MB of artifacts from a local registry (Debian's docker-registry)
# into a tree and prints stamp's MB/s beside `skopeo copy` of the same
# artifacts, then builds twice through a counting proxy: the warm build must
# fetch no manifest or blob (warm-GETs 0). STAMP_BENCH_MB sets the size of
# each of the four files (default 50).
set -euo pipefail
cd "$(dirname "$0")/../.."
echo "== OCI pull: 4 x ${STAMP_BENCH_MB:-50} MB artifacts from a local registry"
go test -run '^$' -bench '^BenchmarkOCIPull$' -benchtime "${BENCHTIME:-3x}" -timeout 30m ./test/e2e |
	grep -E '^(Benchmark|---|\s+oci_test)' || true
