#!/usr/bin/env bash
# Runs the kernel tests (build/gpu/test_cuda_kernels --quick) under compute-sanitizer: memcheck
# (out-of-bounds and misaligned accesses, leaks of device memory), racecheck (shared-memory
# hazards in the row tables and block reductions) and synccheck. One test per tool: it passes when
# the sanitizer reports no error AND the kernel tests themselves pass. Needs a GPU.
#     bash tests/gpu/cuda_memcheck.sh [BUILD]          ends with "N passed, N failed"
set -u
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
BIN=$BUILD/gpu/test_cuda_kernels
SAN=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
pass=0; fail=0
if [ ! -x "$BIN" ]; then echo "FAIL: $BIN not built"; echo "0 passed, 1 failed"; exit 1; fi
if [ ! -x "$SAN" ]; then echo "FAIL: compute-sanitizer not found"; echo "0 passed, 1 failed"; exit 1; fi
for tool in memcheck racecheck synccheck; do
    extra=""
    [ "$tool" = memcheck ] && extra="--leak-check full"
    log=$(mktemp)
    "$SAN" --tool "$tool" $extra --error-exitcode 99 "$BIN" --quick >"$log" 2>&1; rc=$?
    summary=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -n 1)
    result=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
    if [ "$rc" -eq 0 ] && echo "$summary" | grep -qE ' 0 (errors|hazards)' && echo "$result" | grep -q ' 0 failed'; then
        pass=$((pass + 1)); echo "ok   $tool: $summary; tests: $result"
    else
        fail=$((fail + 1)); echo "FAIL $tool (exit $rc): ${summary:-no summary}; tests: ${result:-none}"
        grep -E '^=========|^FAIL' "$log" | head -n 40
    fi
    rm -f "$log"
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
