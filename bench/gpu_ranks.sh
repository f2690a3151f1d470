#!/usr/bin/env bash
# bench/gpu_ranks.sh — why does one pipeline rank compute slower than the other? On the model of
# bench/gpu_pipeline.sh (H=4096, L=16, 8192 tokens, 8 microbatches, bf16), each run with every GEMM
# of its last step timed (mlp_gpu --gemm-times) and its timeline written (--trace): the single GPU,
# ZB-V, ZB-V with the ranks' GPUs swapped, interleaved vpp 4. A slow rank whose GEMMs take longer
# than the single GPU's points at clocks or contention; one whose GEMMs do not, at gaps between
# them. SM clock and power of both GPUs every 100 ms into OUTDIR/clocks.csv, each run's window
# into OUTDIR/windows.txt (the summary prints each GPU's median clock and power per run).
#     bash bench/gpu_ranks.sh [OUTDIR]        (about 2 minutes on nvidia-h200-x2)
# Env: SKIP_BUILD=1 uses binaries already in build/; EXTRA adds mlp_gpu flags to every pipelined run;
# RUNS="KIND:VPP:MB ..." runs those schedules instead (e.g. RUNS="dualpipev:2:8 zbv:2:16"), each
# against the single GPU's step scaled to its microbatches.
set -u
cd "$(dirname "$0")/.."
. bench/gpu_lib.sh
OUTDIR=${1:-${OUT:-bench/out}}
mkdir -p "$OUTDIR"
export NCCL_NVLS_ENABLE=0
MODEL="--hidden 4096 --layers 16 --tokens 8192 --mb 8"
LOG=$OUTDIR/ranks.log
: > "$LOG"
: > "$OUTDIR/windows.txt"
say() { echo "$@" | tee -a "$LOG"; }
say "== $(date -u +%Y-%m-%dT%H:%MZ)  $(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1) x $(nvidia-smi -L | wc -l)"
if [ "${SKIP_BUILD:-0}" != 1 ]; then make -s -j16 build/mlp_gpu >"$OUTDIR/build.log" 2>&1 || { cat "$OUTDIR/build.log"; exit 1; }; fi
nvidia-smi --query-gpu=timestamp,index,clocks.sm,power.draw --format=csv,noheader -lms 100 >"$OUTDIR/clocks.csv" 2>/dev/null &
smi=$!
trap 'kill $smi 2>/dev/null' EXIT
window() { echo "$1 $2 $(date +%s.%N)" >>"$OUTDIR/windows.txt"; }

tune_picks "$OUTDIR"
window single begin
build/mlp_gpu --single --gemm-times $MODEL >"$OUTDIR/single.log" 2>&1
window single end
cat "$OUTDIR/single.log" >>"$LOG"
SINGLE_MS=$(single_step_ms "$OUTDIR/single.log")
say "single-GPU step: ${SINGLE_MS:-?} ms"

run() {   # run NAME ARGS...
    local name=$1; shift
    say "-- $name"
    window "$name" begin
    ranks_run 2 "$OUTDIR/$name" build/mlp_gpu $MODEL --single-ms "${RUN_SINGLE_MS:-${SINGLE_MS:-0}}" --timeout 30 --gemm-times \
        --trace "$OUTDIR/$name.json" ${EXTRA:-} "$@" || say "$name: exit $?"
    window "$name" end
    grep -hE "^(schedule|pipeline|  efficiency|  simulator with each|  exposed on|  bound:|  compute busy|  where|    rank|  exposed|gemm times)" "$OUTDIR/$name.rank0.log" | tee -a "$LOG"
    grep -h "^gemm times" "$OUTDIR/$name.rank1.log" | tee -a "$LOG"
}
if [ -n "${RUNS:-}" ]; then
    for r in $RUNS; do
        IFS=: read -r kind vpp mb <<<"$r"
        RUN_SINGLE_MS=$(python3 -c "print(${SINGLE_MS:-0} * $mb / 8)") run "$kind-$vpp-mb$mb" --schedule "$kind" --vpp "$vpp" --mb "$mb"
    done
else
    run zbv --schedule zbv
    CUDA_VISIBLE_DEVICES=1,0 run zbv-gpus-swapped --schedule zbv
    run interleaved4 --schedule interleaved --vpp 4
fi
kill $smi 2>/dev/null

say "== per run, per GPU: median SM clock (MHz) and power (W) while above 300 W"
python3 - "$OUTDIR/clocks.csv" "$OUTDIR/windows.txt" <<'PY' | tee -a "$LOG"
import sys, statistics as st, datetime as dt
rows = []
for l in open(sys.argv[1]):
    f = [x.strip() for x in l.split(",")]
    if len(f) < 4: continue
    try:
        t = dt.datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        rows.append((t, f[1], float(f[2].split()[0]), float(f[3].split()[0])))
    except ValueError:
        pass
win = {}
for l in open(sys.argv[2]):
    name, what, t = l.split()
    win.setdefault(name, {})[what] = float(t)
for name, w in win.items():
    out = []
    for g in sorted(set(r[1] for r in rows)):
        sel = [(c, p) for t, gi, c, p in rows if gi == g and w.get("begin", 0) <= t <= w.get("end", 0) and p > 300]
        if sel: out.append(f"GPU {g} {st.median(c for c, _ in sel):.0f} MHz {st.median(p for _, p in sel):.0f} W ({len(sel)} samples)")
    print(f"{name}: " + "; ".join(out))
PY
