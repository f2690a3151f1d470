#!/usr/bin/env bash
# make test-gpu: runs every GPU test binary (build/gpu/test_*) and every tests/gpu/*.sh script
# (multi-process NCCL tests), then prints the summed "N passed, N failed". Needs GPUs.
set -u
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
export NCCL_NVLS_ENABLE=0
total_pass=0; total_fail=0
# No GPU here: one clear line, not dozens of failures from programs that cannot start
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    echo "FAIL make test-gpu: no NVIDIA GPU on this machine (nvidia-smi lists none); run it on a GPU machine"
    echo "0 passed, 1 failed"
    exit 1
fi
run_one() {
    local name=$1; shift
    local out; out=$(mktemp)
    echo "== $name"
    "$@" >"$out" 2>&1; local rc=$?
    cat "$out"
    local line; line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$out" | tail -n 1)
    if [ -z "$line" ]; then total_fail=$((total_fail + 1)); echo "FAIL $name: no result line (exit $rc)"
    else
        local p f; p=${line%% passed*}; f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
        [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
        total_pass=$((total_pass + p)); total_fail=$((total_fail + f))
    fi
    rm -f "$out"
}
for t in "$BUILD"/gpu/test_* "$BUILD"/gpu/host_*; do [ -x "$t" ] && run_one "$(basename "$t")" "$t"; done
for s in tests/gpu/*.sh; do [ "$s" = tests/gpu/run_all.sh ] && continue; run_one "$(basename "$s")" bash "$s" "$BUILD"; done
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
