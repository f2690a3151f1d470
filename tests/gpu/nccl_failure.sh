#!/usr/bin/env bash
# tests/gpu/nccl_failure.sh — one rank killed in the middle of a step: the other must return
# PP_ETIMEOUT within its deadline (--timeout) and exit cleanly (exit code 3), never hang.
# Two processes, one per GPU, small model. Needs 2 GPUs. Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
export NCCL_NVLS_ENABLE=0
pass=0; fail=0
ok()  { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -lt 2 ]; then echo "needs 2 GPUs"; echo "0 passed, 1 failed"; exit 1; fi
[ -x "$BUILD/mlp_gpu" ] || make -s "$BUILD/mlp_gpu" || { echo "0 passed, 1 failed"; exit 1; }

DEADLINE=8
# once with the arrival gate (mlp_gpu's default: its stream waits on a dead peer must be
# opened by the abort, or the survivor hangs), once without it, both through NCCL; once through
# the copy engines (mlp_gpu's default; their waits on a dead peer too)
for mode in gate nogate copy-engine; do
flag="--no-copy-engine"; [ "$mode" = nogate ] && flag="--no-gate --no-copy-engine --quiet"; [ "$mode" = copy-engine ] && flag=""
echo "-- $mode"
id=/tmp/pipepar_failure_$$_$mode.id
log=$(mktemp -d)
for r in 0 1; do
    env RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r PIPEPAR_NCCL_ID_FILE=$id timeout 120 "$BUILD/mlp_gpu" --schedule 1f1b \
        --hidden 1024 --layers 8 --tokens 4096 --mb 8 --warmup 1 --steps 30 --timeout $DEADLINE $flag \
        --kill-rank 1 --kill-step 3 >"$log/r$r" 2>&1 &
    eval "pid$r=$!"
done
wait "$pid0"; rc0=$?
wait "$pid1"; rc1=$?
echo "rank 0 (exit $rc0):"; sed 's/^/    /' "$log/r0"
echo "rank 1 (exit $rc1):"; sed 's/^/    /' "$log/r1"

[ "$rc1" -eq 137 ] && ok "$mode: rank 1 was killed (SIGKILL) mid-step" || bad "$mode: rank 1 exit $rc1, expected 137 (killed)"
[ "$rc0" -eq 3 ] && ok "$mode: rank 0 exited cleanly with code 3 (PP_ETIMEOUT)" || bad "$mode: rank 0 exit $rc0, expected 3 (124 = hung)"
grep -q "PP_ETIMEOUT after" "$log/r0" && ok "$mode: rank 0 reports PP_ETIMEOUT" || bad "$mode: rank 0 does not report PP_ETIMEOUT"
if [ "$mode" = gate ]; then   # the gate was on (its set-up line; the ungated run is --quiet)
    grep -q "arrival gate: 1 peer(s) gated" "$log/r0" && ok "gate: the gate was on" || bad "gate: the gate was not on"
fi
if [ "$mode" = copy-engine ]; then
    grep -q "copy engines: 1 peer(s)" "$log/r0" && ok "copy-engine: the copy engines were on" || bad "copy-engine: not on"
fi
secs=$(sed -n 's/.*PP_ETIMEOUT after \([0-9.]*\) s in step.*/\1/p' "$log/r0" | head -n 1)
if [ -n "$secs" ] && awk -v s="$secs" -v d="$DEADLINE" 'BEGIN { exit !(s <= d + 5) }'; then
    ok "$mode: detected ${secs} s after the step began (deadline ${DEADLINE} s)"
else
    bad "$mode: detection time '${secs}' not within deadline ${DEADLINE} s + 5 s"
fi
rm -rf "$log" "$id"
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
