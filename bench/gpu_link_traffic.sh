#!/usr/bin/env bash
# bench/gpu_link_traffic.sh — what a pipeline's transfers cost the compute beside them: one GPU's
# step with and without copy-engine traffic over its link.
#
#     bash bench/gpu_link_traffic.sh [OUTDIR]        (OUTDIR defaults to $OUT, else bench/out)
#
# The model of bench/gpu_pipeline.sh (H=4096, 16 blocks, 8192 tokens a microbatch, 8 microbatches,
# bf16) as a pipeline of one rank on GPU 0 (mlp_gpu --threads 1 --schedule zbv: forwards, input
# gradients and weight gradients as separate actions, as in a pipeline of several), timed while
# build/bench_link_traffic runs beside it in each mode (bench/link_traffic.cu): none, 64 MiB into
# GPU 0 pushed by GPU 1 (in), 64 MiB out of GPU 0 (out), each every PERIOD ms, in two rounds
# (MODES adds both, and pcie: the same bytes each way between GPU 0 and pinned host memory). For
# each run: the step, each action kind's median time per block from the trace (bench/trace_kinds.py
# --by-stage: stage 0 holds the input and block 0, which has no input gradient; stage 1 the loss),
# and GPU 0's clock and power.
# A rank of the pp 4 pipeline moves about one such copy each way every 20 ms.
# Env: SKIP_BUILD=1 uses the binaries in build/; PERIOD (20, ms); ROUNDS (2); MODES ("off none in
# out"; off: no second process at all).
set -u
cd "$(dirname "$0")/.." || exit 1
. bench/gpu_lib.sh
OUTDIR=${1:-${OUT:-bench/out}}
mkdir -p "$OUTDIR"
PERIOD=${PERIOD:-20}
LOG=$OUTDIR/link_traffic.log
: > "$LOG"
say() { echo "$@" | tee -a "$LOG"; }
say "== $(date -u +%Y-%m-%dT%H:%MZ)  $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n 1) x $(nvidia-smi -L | wc -l)"
[ "$(nvidia-smi -L | wc -l)" -ge 2 ] || { say "needs 2 GPUs"; exit 1; }
for mode in ${MODES:-off none in out}; do
    case $mode in off|none|in|out|both|pcie) ;; *) say "MODES: $mode: must be off, none, in, out, both or pcie"; exit 2 ;; esac
done
if [ "${SKIP_BUILD:-0}" != 1 ]; then
    make -s -j16 build/mlp_gpu build/bench_link_traffic >"$OUTDIR/build.log" 2>&1 || { cat "$OUTDIR/build.log"; exit 1; }
fi
MODEL="--hidden 4096 --layers 16 --tokens 8192 --mb 8"
tune_picks "$OUTDIR"
RUN="$MODEL --warmup 3 --steps 8 --single-ms 1300 --threads 1 --schedule zbv --quiet"

for r in $(seq 1 "${ROUNDS:-2}"); do
    for mode in ${MODES:-off none in out}; do
        base=$OUTDIR/$mode.$r
        if [ "$mode" != off ]; then
            build/bench_link_traffic "$PERIOD" 40 "$mode" >"$base.traffic.txt" 2>&1 &
            lp=$!
            sleep 2   # its contexts up and copying before the timed run starts
        fi
        CUDA_VISIBLE_DEVICES=0,1 clocks_during "$base.clocks.csv" timeout 120 build/mlp_gpu $RUN --trace "$base.json" \
            >"$base.log" 2>&1 || say "$mode round $r: mlp_gpu exit $?"
        if [ "$mode" != off ]; then kill "$lp" 2>/dev/null; wait "$lp" 2>/dev/null; fi
        step=$(grep -E '^pipeline' "$base.log" | sed -E 's/.* step +([0-9.]+) ms.*/\1/')
        say "$(printf '%-4s round %d: step %s ms; ms per block: %s' "$mode" "$r" "${step:-?}" "$([ -s "$base.json" ] && python3 bench/trace_kinds.py "$base.json" 'Et*8|t*8L' --by-stage)")"
        say "     $(clocks_brief "$base.clocks.csv" | sed -e 's/^ *//' -e 's/; GPU 1.*//')"
        [ "$mode" = off ] || say "     $(cat "$base.traffic.txt")"
    done
done
