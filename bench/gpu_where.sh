#!/usr/bin/env bash
# bench/gpu_where.sh — where a pipelined step's time goes, per schedule, on 2 GPUs: the model of
# bench/gpu_pipeline.sh (H=4096, L=16, 8192 tokens, 8 microbatches, bf16), one run per schedule,
# each printing mlp_gpu's breakdown of the last step (pp_timeline_idle: compute, waiting for the
# peer's compute, waiting for transfers, other gaps, tail) next to its efficiency.
#
#     bash bench/gpu_where.sh [OUTDIR] [SCHEDULE:VPP ...]     (default: 1f1b:1 interleaved:4
#                                                             interleaved-zb:4 zbv:2)
# Env: SKIP_BUILD=1 uses binaries already in build/; EXTRA adds mlp_gpu flags to every run.
set -u
cd "$(dirname "$0")/.."
. bench/gpu_lib.sh
OUTDIR=${1:-${OUT:-bench/out}}; shift || true
RUNS=${*:-"1f1b:1 interleaved:4 interleaved-zb:4 zbv:2"}
mkdir -p "$OUTDIR"
export NCCL_NVLS_ENABLE=0
MODEL="--hidden 4096 --layers 16 --tokens 8192 --mb 8"
LOG=$OUTDIR/where.log
: > "$LOG"
say() { echo "$@" | tee -a "$LOG"; }
say "== $(date -u +%Y-%m-%dT%H:%MZ)  $(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1) x $(nvidia-smi -L | wc -l)"
if [ "${SKIP_BUILD:-0}" != 1 ]; then make -s -j16 build/mlp_gpu >"$OUTDIR/build.log" 2>&1 || { cat "$OUTDIR/build.log"; exit 1; }; fi
build/mlp_gpu --single $MODEL >"$OUTDIR/single.log" 2>&1
SINGLE_MS=$(single_step_ms "$OUTDIR/single.log")
say "single-GPU step: ${SINGLE_MS:-?} ms"
for run in $RUNS; do
    kind=${run%%:*}; vpp=${run##*:}
    ranks_run 2 "$OUTDIR/$kind-$vpp" build/mlp_gpu $MODEL --schedule "$kind" --vpp "$vpp" \
        --single-ms "${SINGLE_MS:-0}" --timeout 30 ${EXTRA:-}
    say "-- $kind vpp $vpp"
    grep -E "^pipeline|efficiency|simulator with each|compute busy|where the last|^    rank|exposed transfer \(the" \
        "$OUTDIR/$kind-$vpp.rank0.log" | tee -a "$LOG"
done
