#!/usr/bin/env bash
# bench/gpu_one_rank.sh — what pipepar's runtime costs on one GPU: the comparison model (H=4096,
# L=16, 8192 tokens, 8 microbatches, bf16) run whole (mlp_gpu --single) and as a pipeline of one
# rank (--threads 1: the executor walks the schedule, records its events and calls the trainer's
# callbacks, with no transfer and no peer to wait for). A pipeline of one does the same GEMMs as
# the single step, so any gap between the two is the runtime's own cost, which every rank of a
# real pipeline pays too; and any gap between the pipeline's summed compute and the single step
# is time the GEMMs themselves lose inside the executor (the 0.5-3% a pipelined rank computes
# over half the single step on 2 H200s, bench/RESULTS.md session 10).
#
#     bash bench/gpu_one_rank.sh [OUTDIR]   (OUTDIR defaults to $OUT, else bench/out)
#
# Runs, alternating: single; 1F1B (one stage); interleaved vpp 4 (four chunks, whole B's);
# interleaved vpp 4 with each B as I then W; ZB-V (vpp 2); single again. Each with --gemm-times
# (every GEMM of the last step timed with events) and the first single step as the efficiency's
# baseline. First, tune_picks (bench/gpu_lib.sh) tunes the GEMMs inside two real steps and writes
# OUTDIR/gemm_picks.txt; every run reads it (--gemm-picks), so all run the same kernels. Each
# process tuning on its own picked near-ties that ran 2-3% apart in the steps (session 11: 99.2%
# and 99.4% for the runs whose dx, dh or dW2 pick differed from the single run's, 99.8-99.9% for
# those whose did not; with shared picks 100.0-100.1%).
# The GPU's SM clock and power are logged once a second to OUTDIR/clocks.csv.
# Env: SKIP_BUILD=1 uses binaries already in build/; PICKS=0 lets every run tune on its own.
set -u
cd "$(dirname "$0")/.."
. bench/gpu_lib.sh
OUTDIR=${1:-${OUT:-bench/out}}
mkdir -p "$OUTDIR"
export NCCL_NVLS_ENABLE=0
MODEL="--hidden 4096 --layers 16 --tokens 8192 --mb 8 --gemm-times"
LOG=$OUTDIR/one_rank.log
: > "$LOG"
say() { echo "$@" | tee -a "$LOG"; }
say "== $(date -u +%Y-%m-%dT%H:%MZ)  $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n 1)"
if [ "${SKIP_BUILD:-0}" != 1 ]; then make -s -j16 build/mlp_gpu >"$OUTDIR/build.log" 2>&1 || { cat "$OUTDIR/build.log"; exit 1; }; fi
clocks_start "$OUTDIR"

tune_picks "$OUTDIR"
CUDA_VISIBLE_DEVICES=0 build/mlp_gpu --single $MODEL >"$OUTDIR/single-a.log" 2>&1
cat "$OUTDIR/single-a.log" >>"$LOG"
SINGLE_MS=$(single_step_ms "$OUTDIR/single-a.log")
say "single (first): ${SINGLE_MS:-none} ms"
[ -n "$SINGLE_MS" ] || exit 1

one() {   # one NAME ARGS...: a pipeline of one rank; prints its step, efficiency and compute
    local name=$1; shift
    CUDA_VISIBLE_DEVICES=0 timeout 300 build/mlp_gpu --threads 1 $MODEL --single-ms "$SINGLE_MS" "$@" >"$OUTDIR/$name.log" 2>&1
    local rc=$?
    cat "$OUTDIR/$name.log" >>"$LOG"
    local step eff busy
    step=$(sed -n 's/^pipeline .* step *\([0-9.]*\) ms.*/\1/p' "$OUTDIR/$name.log")
    eff=$(sed -n 's/^  efficiency \([0-9.]*\)%.*/\1/p' "$OUTDIR/$name.log")
    busy=$(sed -n 's/^  compute busy per rank (ms of [0-9.]*): *\([0-9.]*\).*/\1/p' "$OUTDIR/$name.log")
    say "$name (exit $rc): step ${step:-?} ms, ${eff:-?}% of the single step; compute ${busy:-?} ms"
}
one 1f1b --schedule 1f1b
one interleaved4 --schedule interleaved --vpp 4
one interleaved4-split --schedule interleaved --vpp 4 --split-backward
one zbv --schedule zbv

CUDA_VISIBLE_DEVICES=0 build/mlp_gpu --single $MODEL >"$OUTDIR/single-b.log" 2>&1
cat "$OUTDIR/single-b.log" >>"$LOG"
say "single (again): $(single_step_ms "$OUTDIR/single-b.log") ms"
# each run's GEMMs side by side (--gemm-times: count and mean of each kind, launch gaps)
for f in single-a 1f1b interleaved4 interleaved4-split zbv single-b; do
    say "$f: $(grep -m1 '^gemm times' "$OUTDIR/$f.log" | sed 's/^gemm times, //')"
done
[ -f "$OUTDIR/gemm_picks.txt" ] && say "GEMM picks: $(tail -n +2 "$OUTDIR/gemm_picks.txt" | awk '{printf "%s%s %s", n++ ? ", " : "", $5, $4}')"
say "clocks (SM MHz, W): $(clocks_summary "$OUTDIR/clocks.csv" | tr '\n' ' ')"
