#!/usr/bin/env bash
# bench/gpu_adapt.sh — a pipeline that adapts to a slow GPU: 2 GPUs, one slowed on purpose.
#
#     bash bench/gpu_adapt.sh [OUTDIR]        (OUTDIR defaults to $OUT, else bench/out)
#
# The model of bench/gpu_pipeline.sh (H=4096, 8192 tokens a microbatch, 8 microbatches, bf16) under
# ZB-V, with 16 blocks and again with 24, and rank 1's GPU running 1.35x the GEMMs (mlp_gpu
# --slow-rank 1 --slow-factor 1.35: the extra ones beside its own, of the same shape). For each:
#   1. each GPU's single-GPU step, GPU 1 slowed as in the pipeline; from them the bound the two
#      speeds allow: the step with the work split in proportion to their speeds, 1 / (1/t0 + 1/t1);
#   2. the pipeline on the even split, then --adapt: the speeds measured from its last step's
#      timeline, the blocks re-split for them (pp_layers_replan) and moved to their new ranks
#      (pp_layers_move), the steps timed again, round after round until a split is kept (or one
#      that ran comes back; the fastest split measured is the one that stays), and
#      --check: the new split's gradients against the single-GPU run's (which also shows that every
#      moved weight arrived).
# Whole blocks bound the gain: with 16 blocks the best split, 9 / 7, leaves rank 1 at 7 x 1.35 =
# 9.45 blocks' time where the speeds allow 16 / (1 + 1/1.35) = 9.19, 2.8% over; 24 blocks split
# 14 / 10 come within 0.2%, and ZB-V on them within 1.6 points in simulation (pipepar.h, >>search).
# The same with a searched order ("searched": mlp_gpu --schedule search --search-kind greedy
# --search-layout --vpp 2): the first plan is the search's for equal speeds, and each round searches
# order and split again on the measured costs and speeds (pp_plan_replan), so small first and last
# stages shorten the start-up and drain on the uneven split too.
# Env: SKIP_BUILD=1 uses the binaries in build/; SLOW (1.35), LAYERS ("16 24"), RUNS ("zbv searched"),
# MB (8), T (8192 tokens a microbatch: T=4096 LAYERS=48 is the same work in blocks half the size).
set -u
cd "$(dirname "$0")/.." || exit 1
. bench/gpu_lib.sh
OUTDIR=${1:-${OUT:-bench/out}}
mkdir -p "$OUTDIR"
export NCCL_NVLS_ENABLE=0
SLOW=${SLOW:-1.35}
RUNS=${RUNS:-zbv searched}   # schedule kinds, and "searched": --schedule search --search-layout
BASE="--hidden 4096 --tokens ${T:-8192} --mb ${MB:-8}"
LOG=$OUTDIR/adapt.log
: > "$LOG"
say() { echo "$@" | tee -a "$LOG"; }
say "== $(date -u +%Y-%m-%dT%H:%MZ)  $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n 1) x $(nvidia-smi -L | wc -l)"
if [ "${SKIP_BUILD:-0}" != 1 ]; then make -s -j16 build/mlp_gpu >"$OUTDIR/build.log" 2>&1 || { cat "$OUTDIR/build.log"; exit 1; }; fi
[ "$(nvidia-smi -L | wc -l)" -ge 2 ] || { say "needs 2 GPUs"; exit 1; }

clocks_start "$OUTDIR"
MODEL="$BASE --layers 16"
tune_picks "$OUTDIR"   # the GEMMs' shapes do not depend on the block count: one set of picks for all
PICKS_FLAG=${MODEL#"$BASE --layers 16"}

for L in ${LAYERS:-16 24}; do
    MODEL="$BASE --layers $L$PICKS_FLAG"
    say "== $L blocks: single GPU, GPU 0 as it is, GPU 1 slowed ${SLOW}x"
    # --single slows the GPU of its LOCAL_RANK (0 here: one visible GPU each)
    CUDA_VISIBLE_DEVICES=0 build/mlp_gpu --single $MODEL >"$OUTDIR/single-L$L-gpu0.log" 2>&1
    CUDA_VISIBLE_DEVICES=1 build/mlp_gpu --single $MODEL --slow-rank 0 --slow-factor "$SLOW" >"$OUTDIR/single-L$L-gpu1.log" 2>&1
    cat "$OUTDIR/single-L$L-gpu0.log" "$OUTDIR/single-L$L-gpu1.log" >>"$LOG"
    T0=$(single_step_ms "$OUTDIR/single-L$L-gpu0.log")
    T1=$(single_step_ms "$OUTDIR/single-L$L-gpu1.log")
    if [ -z "$T0" ] || [ -z "$T1" ]; then say "single-GPU step missing (see $OUTDIR/single-L$L-gpu*.log)"; continue; fi
    BOUND=$(awk -v a="$T0" -v b="$T1" 'BEGIN { printf "%.1f", 1 / (1 / a + 1 / b) }')
    say "single-GPU step, $L blocks: GPU 0 $T0 ms, GPU 1 $T1 ms (slowed" \
        "$(awk -v a="$T0" -v b="$T1" 'BEGIN { printf "%.3f", b / a }')x); the bound the two speeds allow: $BOUND ms"
    for run in $RUNS; do
        if [ "$run" = searched ]; then   # order and split from the costs, searched again on the measured ones
            args="--schedule search --search-kind greedy --search-layout --vpp 2"; what="greedy order, searched split"
        else args="--schedule $run"; what="even split"; fi
        say "-- $run, $L blocks: $what, then --adapt"
        # shellcheck disable=SC2086
        launch2 "adapt-$run-L$L" build/mlp_gpu $MODEL $args --slow-rank 1 --slow-factor "$SLOW" --adapt --check \
            --single-ms "$T0" --timeout 30 || say "adapt, $run, $L blocks: exit $?"
        awk -v bound="$BOUND" -v L="$L" -v run="$run" '/^adapt: step /{ printf "%s, %d blocks, against the bound %.1f ms: " \
            "first plan %.1f%%, adapted %.1f%%\n", run, L, bound, 100 * bound / $3, 100 * bound / $6 }' \
            "$OUTDIR/adapt-$run-L$L.rank0.log" | tee -a "$LOG"
    done
done

say "== summary"
grep -E "^(== |-- |single-GPU step|before --adapt|adapt:|pipeline|  compute busy|  each timed step|gradient check|[0-9]+ blocks, against)" \
    "$LOG" | tee "$OUTDIR/summary.txt"
say "== SM clock (MHz) and power (W) over the run, per GPU: min / median / max"
clocks_summary "$OUTDIR/clocks.csv" | tee -a "$LOG"
