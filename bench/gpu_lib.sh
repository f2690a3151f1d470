# bench/gpu_lib.sh — sourced by the bench/gpu_*.sh scripts: what more than one of them does.

# single_step_ms LOG: the step time that `mlp_gpu --single` printed into LOG (empty if none)
single_step_ms() { sed -n 's/^single-gpu *step *\([0-9.]*\) ms.*/\1/p' "$1"; }

# ranks_run N BASE CMD ARGS...: N processes of CMD, one per GPU, with torchrun's variables and a
# fresh NCCL id file; rank r's output in BASE.rankR.log; each under `timeout ${RANK_TIMEOUT:-120}`.
# Returns the exit of the last rank that failed (0 if none).
ranks_run() {
    local n=$1 base=$2 id=/tmp/pipepar_bench_$$_$RANDOM.id pids=() rc=0 r p
    shift 2
    for ((r = 0; r < n; r++)); do
        env RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r PIPEPAR_NCCL_ID_FILE=$id timeout "${RANK_TIMEOUT:-120}" "$@" \
            >"$base.rank$r.log" 2>&1 &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=$?; done
    rm -f "$id"
    return $rc
}

# single_baseline N OUTDIR MODEL...: mlp_gpu --single on each of GPUs 0..N-1 (logs OUTDIR/single-gpuG.log,
# appended to $LOG), then sets SINGLE_MS, the baseline of the pipeline efficiency: the step N GPUs
# would take together with the work split in proportion to their speeds, times N, i.e. the
# harmonic mean of their single-GPU steps (GPUs of one host differ by about 1%; GPU 0's alone
# would flatter a pipeline whose busiest rank sits on a slower GPU, or wrong it on a faster one).
# SINGLE_FASTEST_MS: the fastest GPU's step, the most conservative baseline. SINGLE_GPU_MS: each
# GPU's step, comma-separated in GPU order (what mlp_gpu --gpu-ms takes).
single_baseline() {
    local n=$1 out=$2 g ms inv=0 list=""; shift 2
    SINGLE_FASTEST_MS=0
    SINGLE_GPU_MS=
    for g in $(seq 0 $((n - 1))); do
        clocks_during "$out/single-gpu$g.clocks.csv" env CUDA_VISIBLE_DEVICES=$g build/mlp_gpu --single "$@" >"$out/single-gpu$g.log" 2>&1
        clocks_brief "$out/single-gpu$g.clocks.csv" >>"$out/single-gpu$g.log"
        cat "$out/single-gpu$g.log" >>"$LOG"
        ms=$(single_step_ms "$out/single-gpu$g.log")
        if [ -z "$ms" ]; then
            SINGLE_MS=0; SINGLE_GPU_MS=""; say "single-GPU step on GPU $g: none (see $out/single-gpu$g.log)"; return 1
        fi
        list="$list GPU $g $ms ms;"
        SINGLE_GPU_MS="$SINGLE_GPU_MS${SINGLE_GPU_MS:+,}$ms"
        inv=$(awk -v a="$inv" -v b="$ms" 'BEGIN { print a + 1 / b }')
        SINGLE_FASTEST_MS=$(awk -v a="$SINGLE_FASTEST_MS" -v b="$ms" 'BEGIN { print (a == 0 || b < a) ? b : a }')
    done
    SINGLE_MS=$(awk -v n="$n" -v i="$inv" 'BEGIN { printf "%.1f", n / i }')
    say "single-GPU step:$list baseline $SINGLE_MS ms (their harmonic mean), fastest $SINGLE_FASTEST_MS ms"
}

# single_concurrent N OUTDIR MODEL...: mlp_gpu --single on GPUs 0..N-1 at the same time (logs
# OUTDIR/single-together-gpuG.log, appended to $LOG); sets SINGLE_TOGETHER_MS, their harmonic mean.
# A pipeline keeps every GPU busy at once, and GPUs under their power cap run slower warm and
# beside a busy neighbour than alone after a rest: this baseline has the pipeline's conditions.
# The scripts print both.
single_concurrent() { single_together_ "$1" "$2" together "" "${@:3}"; SINGLE_TOGETHER_MS=$TOGETHER_MS; }

# single_warm N OUTDIR MODEL...: the same after 12 warm-up steps; sets SINGLE_WARM_MS. Under the
# power cap a GPU's clock falls as it warms (leakage grows with temperature, leaving less of the
# same power to the SMs), and a pipeline's timed steps come after its set-up and warm-up, where a
# short single-GPU run still runs cooler. This baseline times the single step nearer the temperature
# the pipeline's steps run at (every run prints its clocks and temperature).
single_warm() { single_together_ "$1" "$2" warm "--warmup 12" "${@:3}"; SINGLE_WARM_MS=$TOGETHER_MS; }

# single_linked N OUTDIR MODEL...: single_warm with every GPU's link carrying a pipeline's traffic:
# GPUs 2k and 2k+1 (an odd last one with GPU 0) copy 64 MiB each way every 20 ms
# (build/bench_link_traffic both, logs OUTDIR/link-traffic-G.txt) through the runs; sets
# SINGLE_LINKED_MS (0 with one GPU). Under the power cap any traffic over NVLink lowers the SM clock
# (RESULTS 3.15): every pipeline rank pays that all the time and the single step alone never. Against this baseline a pipeline's efficiency is what its schedule and runtime lose.
single_linked() {
    local n=$1 out=$2 g peer pids=() p; shift 2
    SINGLE_LINKED_MS=0
    [ "$n" -ge 2 ] || { say "single step with the links busy: needs 2 GPUs"; return 0; }
    for ((g = 0; g < n; g += 2)); do
        peer=$((g + 1 < n ? g + 1 : 0))
        CUDA_VISIBLE_DEVICES=$g,$peer build/bench_link_traffic 20 900 both >"$out/link-traffic-$g.txt" 2>&1 &
        pids+=($!)
    done
    sleep 2   # the copies running before the timed steps start
    single_together_ "$n" "$out" linked "--warmup 12" "$@" && SINGLE_LINKED_MS=$TOGETHER_MS
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    for ((g = 0; g < n; g += 2)); do say "  GPU $g's link: $(cat "$out/link-traffic-$g.txt")"; done
}

single_together_() {   # N OUTDIR TAG EXTRA MODEL...: single_concurrent and single_warm
    local n=$1 out=$2 tag=$3 extra=$4 g ms inv=0 list=""; shift 4
    TOGETHER_MS=0
    clocks_during "$out/single-$tag.clocks.csv" single_launch_ "$n" "$out" "$tag" "$extra" "$@"
    for g in $(seq 0 $((n - 1))); do
        cat "$out/single-$tag-gpu$g.log" >>"$LOG"
        ms=$(single_step_ms "$out/single-$tag-gpu$g.log")
        if [ -z "$ms" ]; then say "single-GPU step on GPU $g ($tag): none"; return 1; fi
        list="$list GPU $g $ms ms;"
        inv=$(awk -v a="$inv" -v b="$ms" 'BEGIN { print a + 1 / b }')
    done
    TOGETHER_MS=$(awk -v n="$n" -v i="$inv" 'BEGIN { printf "%.1f", n / i }')
    say "single-GPU step, every GPU at once${extra:+ ($extra)}:$list harmonic mean $TOGETHER_MS ms"
    clocks_brief "$out/single-$tag.clocks.csv" | tee -a "$LOG"
}

single_launch_() {   # N OUTDIR TAG EXTRA MODEL...: the N runs at once
    local n=$1 out=$2 tag=$3 extra=$4 g p pids=(); shift 4
    for g in $(seq 0 $((n - 1))); do
        # shellcheck disable=SC2086
        CUDA_VISIBLE_DEVICES=$g timeout "${RANK_TIMEOUT:-120}" build/mlp_gpu --single "$@" $extra >"$out/single-$tag-gpu$g.log" 2>&1 &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
}

# efficiency_against LOG N MS LABEL: each run's step against MS / N (nothing when MS is 0: no baseline).
efficiency_against() {
    awk -v f="$3" 'BEGIN { exit !(f > 0) }' || { echo "  (no baseline: $4 did not run)"; return 0; }
    awk -v f="$3" -v n="$2" -v label="$4" '/^-- /{name=$2} /^pipeline /{for(i=1;i<=NF;i++) if($i=="step"){s=$(i+1)}; if (name != "" && s > 0) printf "  %-28s %.1f%% against %s\n", name, 100 * f / n / s, label}' "$1"
}

# efficiency_vs_fastest LOG N: each run's step against the fastest GPU's single step / N.
efficiency_vs_fastest() { efficiency_against "$1" "$2" "$SINGLE_FASTEST_MS" "the fastest GPU alone"; }

# best_against_best LOG TORCH_LOG MEGATRON_LOG: pipepar's fastest run in LOG against the fastest of
# PyTorch's own schedules and of Megatron-LM's (their median steps), each peer's ratio on a line;
# a peer not run (its log given as "") or whose log holds no step is said so. pipepar's plans run in PyTorch's
# runtime are pipepar's orders, not PyTorch's, and are left out.
best_against_best() {
    local ours
    ours=$(awk '/^-- /{name=$2} /^pipeline /{for(i=1;i<=NF;i++) if($i=="step"){s=$(i+1)}; if (name != "" && s > 0 && (best == "" || s < best)) {best=s; who=name}} END {if (best != "") print best, who}' "$1")
    [ -n "$ours" ] || { echo "  (no pipepar run gave a step)"; return 0; }
    echo "  pipepar ${ours#* }: ${ours%% *} ms"
    peer_best_() {   # LABEL FILE REGEX: the peer's fastest median step against ours
        local got
        got=$([ -f "$2" ] && awk -v re="$3" '$0 ~ re {for(i=1;i<=NF;i++) if($i=="step"){s=$(i+1)}; name=$1; for(i=2;i<=NF && $i!="step";i++) name=name" "$i; if (s > 0 && (best == "" || s < best)) {best=s; who=name}} END {if (best != "") print best, who}' "$2")
        if [ -z "$2" ]; then echo "  $1: not run"; return 0; fi
        if [ -z "$got" ]; then echo "  $1: no step in ${2##*/}"; return 0; fi
        awk -v p="${got%% *}" -v o="${ours%% *}" -v who="${got#* }" -v label="$1" \
            'BEGIN { printf "  %s %s: %.1f ms, pipepar %.3fx faster\n", label, who, p, p / o }'
    }
    peer_best_ PyTorch "$2" '^[A-Za-z0-9]+ +v=[0-9]+ step '
    peer_best_ Megatron-LM "$3" '^megatron-[a-z0-9]+ .* step '
}

# clocks_start OUTDIR: SM clock, power and temperature of every GPU once a second into
# OUTDIR/clocks.csv, until the script exits.
clocks_start() {
    nvidia-smi --query-gpu=timestamp,index,clocks.sm,power.draw,temperature.gpu --format=csv -l 1 >"$1/clocks.csv" 2>/dev/null &
    CLOCKS_PID=$!
    trap 'kill $CLOCKS_PID 2>/dev/null' EXIT
}

# clocks_during FILE CMD ARGS...: runs CMD (a command or a function) with every GPU's SM clock,
# power and temperature sampled every 100 ms into FILE; returns CMD's exit. Under the power cap a
# step's time follows the clock, so each run carries its own.
clocks_during() {
    local f=$1 pid rc=0; shift
    nvidia-smi --query-gpu=timestamp,index,clocks.sm,power.draw,temperature.gpu --format=csv -lms 100 >"$f" 2>/dev/null &
    pid=$!
    "$@" || rc=$?
    kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
    return $rc
}

# clocks_brief CSV: one line, per GPU the median SM clock, power and temperature over the samples
# above 300 W (computing), and the spread of the clock over them (10th-90th percentile).
clocks_brief() {
    python3 - "$1" <<'EOF'
import sys, statistics as st
rows = [l.split(",") for l in open(sys.argv[1]).read().splitlines()[1:] if l.count(",") >= 4]
def num(x):
    try: return float(x.split()[0])
    except (ValueError, IndexError): return None
out = []
for g in sorted(set(r[1].strip() for r in rows), key=int):
    s = [(num(r[2]), num(r[3]), num(r[4])) for r in rows if r[1].strip() == g]
    s = sorted((c, p, t) for c, p, t in s if c is not None and p is not None and t is not None and p > 300)
    if not s: out.append(f"GPU {g}: no sample above 300 W"); continue
    c = [x[0] for x in s]
    out.append(f"GPU {g} {st.median(c):.0f} MHz ({c[len(c) // 10]:.0f}-{c[(9 * len(c)) // 10]:.0f}) "
               f"{st.median(x[1] for x in s):.0f} W {st.median(x[2] for x in s):.0f} C")
print("  clocks while computing (median, 10-90%), power, temperature: " + "; ".join(out) + f" ({len(rows)} samples)")
EOF
}

# clocks_summary CSV: per GPU, min / median / max clock and power, and the median clock while it
# drew over 300 W (busy), from clocks_start's file.
clocks_summary() {
    python3 - "$1" <<'EOF'
import sys, statistics as st
rows = [l.split(",") for l in open(sys.argv[1]).read().splitlines()[1:] if l.count(",") >= 4]
for g in sorted(set(r[1].strip() for r in rows)):
    c = [float(r[2].split()[0]) for r in rows if r[1].strip() == g and r[2].split()[0].replace(".", "").isdigit()]
    p = [float(r[3].split()[0]) for r in rows if r[1].strip() == g and r[3].split()[0].replace(".", "").isdigit()]
    busy = [x for x, w in zip(c, p) if w > 300]
    if c: print(f"GPU {g}: clock {min(c):.0f} / {st.median(c):.0f} / {max(c):.0f}; power {min(p):.0f} / {st.median(p):.0f} / {max(p):.0f};"
                f" clock while above 300 W: median {st.median(busy) if busy else 0:.0f} over {len(busy)} s")
EOF
}

# launch2 NAME ARGS...: two processes, one per GPU (ranks_run), logs in $OUTDIR/NAME.rankR.log;
# rank 0's log and rank 1's error lines appended to $LOG.
launch2() {
    local name=$1 rc=0; shift
    ranks_run 2 "$OUTDIR/$name" "$@" || rc=$?
    cat "$OUTDIR/$name.rank0.log" >>"$LOG"
    grep -h "mlp_gpu:" "$OUTDIR/$name.rank1.log" | sed "s/^/rank 1: /" >>"$LOG" 2>/dev/null
    return $rc
}

# tune_picks OUTDIR: the GEMM kernels every later mlp_gpu run of the script takes. One --single run
# on GPU 0 tunes them in place (--tune-in-step 2: each kind's candidates take turns inside real
# steps) and writes OUTDIR/gemm_picks.txt; MODEL then gets --gemm-picks. Each process tuning on its
# own can pick near-ties that run a few percent apart in a step, so a pipeline rank could compute
# slower than the single-GPU baseline by chance. PICKS=0: every run tunes its own, and so does a
# script whose GATE holds --no-tune (untuned runs take no picks). Needs MODEL, LOG and say.
tune_picks() {
    local f=$1/gemm_picks.txt
    rm -f "$f"
    [ "${PICKS:-1}" = 1 ] || { say "GEMM picks: every run tunes its own (PICKS=0)"; return 0; }
    case " ${GATE:-} " in
        *" --no-tune "*) say "GEMM picks: off, as GATE holds --no-tune"; return 0 ;;
    esac
    case "$f" in *[[:space:]]*) say "GEMM picks: off, as the output folder's name has blanks"; return 0 ;; esac
    CUDA_VISIBLE_DEVICES=0 timeout 300 build/mlp_gpu --single $MODEL --tune-in-step 2 --gemm-picks "$f" --warmup 0 \
        --steps 1 >"$1/tune.log" 2>&1
    sed 's/^/tune: /' "$1/tune.log" >>"$LOG"   # prefixed: its one-step single line is no baseline
    if [ -s "$f" ]; then
        MODEL="$MODEL --gemm-picks $f"
        say "GEMM picks for every run, tuned in 2 steps on GPU 0: $(tail -n +2 "$f" | awk '{printf "%s%s %s", n++ ? ", " : "", $5, $4}')"
    else
        say "GEMM picks: the tuning run failed (see $1/tune.log); every run tunes its own"
    fi
}
