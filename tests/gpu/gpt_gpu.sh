#!/usr/bin/env bash
# tests/gpu/gpt_gpu.sh — examples/gpt_gpu.cu, the GPT/MoE of examples/gpt.c on GPUs:
#   1. --selftest of both builds on one GPU: the GPU model against gpt_model.h's on the CPU (the
#      packed data, the routing, the loss and every gradient; fp32 at 1e-4, bf16 at 1e-1), at a
#      vocab of 64 and of 61;
#   2. bad input: a clear message and exit 2;
#   3. --check for the GPUs present: the pipeline's loss and gradients against the same model whole
#      on one GPU (fp32 1e-4, bf16 3e-2). 1 GPU: a world of one process (pp 1, MoE, replay); 2 GPUs: pp 2 with 1F1B, interleaved, ZB-V and DualPipeV
#      (dense, and MoE with router replay), cp 2 x pp 1, dp 2 x pp 1; 4 GPUs also dp 2 x cp 2,
#      cp 2 x pp 2, dp 2 x pp 2; stages cut between a layer's attention and its MLP (--hybrid) on
#      the looped and the V placement, and on the split pipepar search finds on --unit-costs; the
#      output layer's weight gradient deferred (--defer-head-wgrad). The fp32 build runs the whole matrix, the bf16 build a subset.
# One process per GPU (torchrun's variables, a fresh file bootstrap each run). Small model (seconds
# per run). ONLY=REGEX runs only the check runs whose names it matches. Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/../.." || exit 1
BUILD=${1:-build}
export NCCL_NVLS_ENABLE=0
pass=0; fail=0
ok()  { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "$ngpu" -lt 1 ]; then echo "needs a GPU"; echo "0 passed, 1 failed"; exit 1; fi
for b in gpt_gpu gpt_gpu_fp32; do
    [ -x "$BUILD/$b" ] || make -s "$BUILD/$b" || { echo "0 passed, 1 failed"; exit 1; }
done
log=$(mktemp -d)

# --- 1. selftest -------------------------------------------------------------------------------
# (a vocab of 61 too: the loss kernel reads 16 bytes at a time only where the vocab allows)
for b in gpt_gpu_fp32 gpt_gpu; do
    for v in 64 61; do
        CUDA_VISIBLE_DEVICES=0 timeout 300 "$BUILD/$b" --selftest --vocab "$v" >"$log/selftest-$b" 2>&1; rc=$?
        if [ "$rc" -eq 0 ] && grep -q "^selftest: PASS" "$log/selftest-$b"; then ok "$b --selftest --vocab $v: $(grep '^selftest:' "$log/selftest-$b")"
        else bad "$b --selftest --vocab $v (exit $rc)"; sed 's/^/    /' "$log/selftest-$b"; fi
    done
done

# --- 2. bad input ------------------------------------------------------------------------------
expect_usage() {   # expect_usage TEXT ARGS...: exit 2 and TEXT on stderr, without a GPU launch
    local text=$1; shift
    "$BUILD/gpt_gpu" "$@" >"$log/usage" 2>&1; local rc=$?
    if [ "$rc" -eq 2 ] && grep -q -- "$text" "$log/usage"; then ok "usage: $* -> $(head -n 1 "$log/usage")"
    else bad "usage: $* (exit $rc, expected 2 and '$text')"; sed 's/^/    /' "$log/usage"; fi
}
expect_usage "must divide --width" --width 30 --heads 4
expect_usage "needs --moe" --replay
expect_usage "must be at most --capacity" --max-len 100 --capacity 64
expect_usage "DualPipe keeps two copies" --pp 2 --schedule dualpipe
expect_usage "unknown flag" --frobnicate
expect_usage "block 2 is 'mlp'" --hybrid '*--*'
expect_usage "not with --hybrid: its 'E' blocks" --moe --hybrid '*E'
expect_usage "times the model whole on one GPU" --unit-costs "$log/u.txt" --pp 2

# --- 3. the check matrix -----------------------------------------------------------------------
runn() {   # runn N NAME BINARY ARGS...: N processes, rank 0's output in $log/NAME
    local n=$1 name=$2 bin=$3 id=/tmp/pipepar_gpt_$$_$RANDOM.id rc=0 r pids=(); shift 3
    for ((r = 0; r < n; r++)); do
        env RANK=$r WORLD_SIZE="$n" LOCAL_RANK=$r PIPEPAR_NCCL_ID_FILE=$id timeout 300 "$BUILD/$bin" "$@" \
            >"$log/$name.$r" 2>&1 &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=$?; done
    cp "$log/$name.0" "$log/$name"
    rm -f "$id"
    return $rc
}
expect_match() {   # expect_match NAME RC: exit 0 and "gradients match"
    local name=$1 rc=$2
    if [ "$rc" -eq 0 ] && grep -q "^gradients match" "$log/$name"; then
        ok "$name: $(awk '$1 == "1" { print "step 1: loss err", $8, "grad err", $9 }' "$log/$name" | head -n 1)"
    else
        bad "$name (exit $rc)"; sed 's/^/    /' "$log/$name"
        for f in "$log/$name".[1-9]*; do [ -e "$f" ] && grep -h "gpt_gpu" "$f" | sed "s/^/    ${f##*.}: /"; done
    fi
}
check() {   # check N NAME BINARY ARGS... (ONLY=REGEX: only the names it matches)
    local n=$1 name=$2; shift 2
    [ -n "${ONLY:-}" ] && ! [[ $name =~ $ONLY ]] && return 0
    runn "$n" "$name" "$@" --check --steps 3; expect_match "$name" $?
}
MOE=(--moe --replay)
for b in gpt_gpu_fp32 gpt_gpu; do       # one GPU, a world of one process: the executor at pp 1
    CUDA_VISIBLE_DEVICES=0 timeout 300 "$BUILD/$b" --check --steps 3 "${MOE[@]}" >"$log/$b-one-gpu-moe" 2>&1
    expect_match "$b-one-gpu-moe" $?
done
if [ "$ngpu" -ge 2 ]; then
    for b in gpt_gpu_fp32 gpt_gpu; do
        check 2 "$b-pp2-1f1b" $b --pp 2 --schedule 1f1b
        check 2 "$b-pp2-interleaved" $b --pp 2 --schedule interleaved --vpp 2
        check 2 "$b-pp2-zbv-moe" $b --pp 2 --schedule zbv "${MOE[@]}"
        check 2 "$b-pp2-dualpipev" $b --pp 2 --schedule dualpipev
        check 2 "$b-cp2-moe" $b --cp 2 "${MOE[@]}"
        check 2 "$b-dp2" $b --dp 2
        [ "$b" = gpt_gpu ] && continue       # bf16: the subset above
        check 2 "$b-pp2-1f1b-moe" $b --pp 2 --schedule 1f1b "${MOE[@]}"
        check 2 "$b-pp2-interleaved-moe" $b --pp 2 --schedule interleaved --vpp 2 "${MOE[@]}"
        check 2 "$b-pp2-zbv" $b --pp 2 --schedule zbv
        check 2 "$b-pp2-dualpipev-moe" $b --pp 2 --schedule dualpipev "${MOE[@]}"
        check 2 "$b-cp2" $b --cp 2
        check 2 "$b-dp2-moe" $b --dp 2 "${MOE[@]}"
        check 2 "$b-pp2-uneven" $b --pp 2 --layers 5 --first-stage-layers 3
    done
    # stages cut between a layer's attention and its MLP (--hybrid), looped and V
    for b in gpt_gpu_fp32 gpt_gpu; do
        check 2 "$b-pp2-1f1b-half" $b --pp 2 --schedule 1f1b --hybrid '*-*-*|-*-'
        check 2 "$b-pp2-interleaved-half-moe" $b --pp 2 --schedule interleaved --hybrid '*-*|E*-*|-*|E*-*E' --replay
        check 2 "$b-pp2-zbv-half-moe" $b --pp 2 --schedule zbv --hybrid '*-*E*|-*|E*-*|-*E' --replay
        check 2 "$b-pp2-dualpipev-half" $b --pp 2 --schedule dualpipev --hybrid '*|-*-*-|*-*-*|-'
    done
    # the output layer's weight gradient deferred to the end of its stage's backwards
    for b in gpt_gpu_fp32 gpt_gpu; do
        check 2 "$b-pp2-1f1b-defer-head" $b --pp 2 --schedule 1f1b --defer-head-wgrad
        check 2 "$b-pp2-interleaved-group4-defer-head" $b --pp 2 --schedule interleaved --vpp 2 --group 4 --defer-head-wgrad
        check 2 "$b-dp2-defer-head" $b --dp 2 --defer-head-wgrad
        check 2 "$b-cp2-defer-head-moe" $b --cp 2 --moe --replay --defer-head-wgrad
        check 2 "$b-pp2-interleaved-half-defer-head-moe" $b --pp 2 --schedule interleaved --replay --defer-head-wgrad \
            --hybrid '*-*|E*-*|-*|E*-*E'
    done
    # the half-layer split pipepar search finds on the units' measured costs (--unit-costs)
    if [ -z "${ONLY:-}" ] || [[ searched =~ $ONLY ]]; then
        [ -x "$BUILD/pipepar" ] || make -s "$BUILD/pipepar"
        CUDA_VISIBLE_DEVICES=0 timeout 300 "$BUILD/gpt_gpu_fp32" --moe --layers 6 --unit-costs "$log/units.txt" >"$log/units" 2>&1
        flags=$(sed -n 's/^wrote .*; search with: //p' "$log/units")
        if [ -n "$flags" ] && eval "$BUILD/pipepar" search --pp 2 --mb 8 --kind zbv --vpp 2 --spread 4 "$flags" >"$log/search" 2>&1 &&
           pattern=$(sed -n "s/^pattern: '\(.*\)'$/\1/p" "$log/search") && [ -n "$pattern" ]; then
            ok "--unit-costs and pipepar search --hybrid: '$pattern'"
            check 2 "gpt_gpu_fp32-pp2-zbv-searched-moe" gpt_gpu_fp32 --pp 2 --schedule zbv --replay --hybrid "$pattern"
        else
            bad "--unit-costs, then pipepar search --hybrid"; sed 's/^/    /' "$log/units" "$log/search" 2>/dev/null
        fi
        # the output layer's weight gradient timed on its own, for a search told of the deferral
        defer=$(sed -n 's/^with --defer-head-wgrad, add: //p' "$log/units")
        if [ -n "$flags" ] && [ -n "$defer" ] &&
           eval "$BUILD/pipepar" search --pp 2 --mb 8 --kind 1f1b --spread 4 "$flags" "$defer" >"$log/search" 2>&1 &&
           pattern=$(sed -n "s/^pattern: '\(.*\)'$/\1/p" "$log/search") && [ -n "$pattern" ]; then
            ok "--unit-costs' $defer and pipepar search --kind 1f1b: '$pattern'"
            check 2 "gpt_gpu_fp32-pp2-1f1b-searched-defer-head" gpt_gpu_fp32 --pp 2 --schedule 1f1b --replay \
                --defer-head-wgrad --hybrid "$pattern"
        else
            bad "--unit-costs' --loss-deferred, then pipepar search"; sed 's/^/    /' "$log/units" "$log/search" 2>/dev/null
        fi
    fi
    # a grid that does not multiply to the processes: every rank refuses, exit 2
    runn 2 grid gpt_gpu --pp 4; rc=$?
    if [ "$rc" -eq 2 ] && grep -q "processes run" "$log/grid"; then ok "grid: $(grep "processes run" "$log/grid")"
    else bad "grid: --pp 4 on 2 processes (exit $rc, expected 2)"; sed 's/^/    /' "$log/grid"; fi
else
    echo "(one GPU: the check matrix needs 2)"
fi
if [ "$ngpu" -ge 4 ]; then
    check 4 fp32-dp2-cp2-moe gpt_gpu_fp32 --dp 2 --cp 2 "${MOE[@]}"
    check 4 fp32-cp2-pp2-1f1b-moe gpt_gpu_fp32 --cp 2 --pp 2 --schedule 1f1b "${MOE[@]}"
    check 4 fp32-cp2-pp2-interleaved gpt_gpu_fp32 --cp 2 --pp 2 --schedule interleaved --vpp 2
    check 4 fp32-dp2-pp2-zbv-moe gpt_gpu_fp32 --dp 2 --pp 2 --schedule zbv "${MOE[@]}"
    check 4 fp32-dp2-pp2-dualpipev gpt_gpu_fp32 --dp 2 --pp 2 --schedule dualpipev
    check 4 bf16-dp2-cp2 gpt_gpu --dp 2 --cp 2
    check 4 bf16-cp2-pp2-zbv-moe gpt_gpu --cp 2 --pp 2 --schedule zbv "${MOE[@]}"
fi
rm -rf "$log"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
