#!/usr/bin/env bash
# bench/gpu_interleaved.sh — interleaved 1F1B (vpp 4) on 2 GPUs: Megatron's defaults against the
# layout and microbatch group that `pipepar search --layers` picks.
#
#     bash bench/gpu_interleaved.sh [OUTDIR]   (OUTDIR defaults to $OUT, else bench/out)
#
# The model of bench/gpu_pipeline.sh (H=4096, L=16, 8192 tokens, 8 microbatches, bf16). On even
# stages of 2 blocks, rank 1 waits for rank 0's first 2-block F at the start and rank 0 runs
# stage 0's last 2-block B alone at the end, which no order of even stages hides. A 1-block first
# stage halves both; with Megatron's default group (pp = 2 microbatches per chunk round) the order
# then stalls elsewhere, with a group of 4 it does not. Each B run as its I then its W
# (--split-backward) sends the B's gradient before its weight gradients. Runs, each against the
# single-GPU steps of the same run: Megatron's defaults (even, group 2); the layout
# 1,2,2,2,2,2,3,2 with group 4 ("tuned"), whole B's; tuned with B as I then W, as launched, GPUs
# swapped, placed by speed (--place-by-speed: the rank with the most GEMMs on the GPU that
# measures faster); stages 1,2,2,2,2,3,3,1 with Megatron's group of 2, B as I then W (what the
# search picks from measured per-block costs); what `--schedule search --search-kind interleaved
# --search-layout --split-backward` picks, placed; Megatron's defaults with B as I then W; tuned
# split again; the group-2 stages again; Megatron's defaults again. Baselines: each GPU's single
# step alone (their harmonic mean, and the faster alone), both at once (single_concurrent), and
# alone again at the end (a GPU's single step moves by a percent or two within one pass).
# The GPUs' SM clocks and power are logged once a second to OUTDIR/clocks.csv.
# Env: SKIP_BUILD=1 uses binaries already in build/.
set -u
cd "$(dirname "$0")/.."
. bench/gpu_lib.sh
OUTDIR=${1:-${OUT:-bench/out}}
mkdir -p "$OUTDIR"
export NCCL_NVLS_ENABLE=0
MODEL="--hidden 4096 --layers 16 --tokens 8192 --mb 8"
LOG=$OUTDIR/interleaved.log
: > "$LOG"
say() { echo "$@" | tee -a "$LOG"; }
say "== $(date -u +%Y-%m-%dT%H:%MZ)  $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n 1) x $(nvidia-smi -L | wc -l)"
if [ "${SKIP_BUILD:-0}" != 1 ]; then make -s -j16 build/mlp_gpu >"$OUTDIR/build.log" 2>&1 || { cat "$OUTDIR/build.log"; exit 1; }; fi

clocks_start "$OUTDIR"

tune_picks "$OUTDIR"
# The baseline on each GPU (single_baseline, bench/gpu_lib.sh): GPUs of one host differ by about
# 1%, so the efficiency is against what these two would take with the work split in proportion to
# their speeds, and the summary gives it against the faster GPU alone too.
say "== single GPU, on GPU 0 and on GPU 1"
single_baseline 2 "$OUTDIR" $MODEL
say "== single GPU, on both GPUs at once (the pipeline's thermal and power conditions)"
single_concurrent 2 "$OUTDIR" $MODEL

run() {   # run NAME ARGS...
    local name=$1; shift
    say "-- $name"
    launch2 "$name" build/mlp_gpu $MODEL --single-ms "$SINGLE_MS" --timeout 30 "$@" || say "$name: exit $?"
}
T1='Et|t*2|t*2|t*2|t*2|t*2|t*3|t*2L'
run megatron-default     --schedule interleaved --vpp 4
run tuned-check          --schedule interleaved --layout "$T1" --group 4 --check
# each B as I then W (--split-backward): the B's output gradient leaves before its weight gradients
run split-check          --schedule interleaved --layout "$T1" --group 4 --split-backward --check
CUDA_VISIBLE_DEVICES=1,0 run split-gpus-swapped --schedule interleaved --layout "$T1" --group 4 --split-backward
# placement by speed: the rank with the most GEMMs on the GPU that measures faster, whichever
# process order the launcher gave (so the swapped launch must land where the plain one does)
run split-placed         --schedule interleaved --layout "$T1" --group 4 --split-backward --place-by-speed
# Megatron's default group (pp = 2) on stages 1,2,2,2,2,3,3,1: what `pipepar search --kind interleaved
# --vpp 4 --split-backward` picks from measured per-block costs (block 0's I shorter: it skips its
# input gradient), about as fast as T1 with group 4 in simulation for less activation memory
# (with unit costs T1 and group 4 win)
T2='Et|t*2|t*2|t*2|t*2|t*3|t*3|tL'
run split-g2-check       --schedule interleaved --layout "$T2" --group 2 --split-backward --check
run searched-split-placed --schedule search --search-kind interleaved --search-layout --vpp 4 --split-backward --place-by-speed
run megatron-split       --schedule interleaved --vpp 4 --split-backward
run split-again          --schedule interleaved --layout "$T1" --group 4 --split-backward
run split-g2-again       --schedule interleaved --layout "$T2" --group 2 --split-backward
run megatron-again       --schedule interleaved --vpp 4

say "== summary (step ms, efficiency = single / 2 / step)"
grep -E "^(-- |single-gpu|single-GPU|search:|placement by speed|schedule |pipeline|  efficiency|  simulator|  exposed on|  bound:|  compute busy|  peak|gradient check)" "$LOG" | tee "$OUTDIR/summary.txt"
say "== against the faster GPU's single step alone (the most conservative baseline)"
efficiency_vs_fastest "$LOG" 2 | tee -a "$LOG"
say "== against both GPUs' single steps run at once (harmonic mean $SINGLE_TOGETHER_MS ms)"
efficiency_against "$LOG" 2 "$SINGLE_TOGETHER_MS" "single steps run together" | tee -a "$LOG"
say "== single GPU again at the end, one GPU at a time (warm GPUs)"
mkdir -p "$OUTDIR/end"
single_baseline 2 "$OUTDIR/end" $MODEL || true
say "== SM clock (MHz) and power (W) over the run, per GPU: min / median / max"
clocks_summary "$OUTDIR/clocks.csv" | tee -a "$LOG"
