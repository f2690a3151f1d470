#!/usr/bin/env bash
# examples/mlp_gpu.cu on one GPU (a pipeline of one rank, --threads 1): the I->W buffers counted
# from the program (pp_schedule_rank_peaks), a schedule read from a CSV (--schedule-csv), and
# both under compute-sanitizer. Every run checks its gradients against the single-GPU model.
#     bash tests/gpu/mlp_one_gpu.sh [BUILD]          ends with "N passed, N failed"
set -u
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
BIN=$BUILD/mlp_gpu
export NCCL_NVLS_ENABLE=0
SMALL="--threads 1 --hidden 512 --layers 6 --tokens 1024 --mb 4 --warmup 1 --steps 2 --timeout 60"
log=$(mktemp -d)
pass=0; fail=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
for b in "$BIN" "$BUILD/pipepar"; do   # the CLI writes the CSV cases' schedules (make test-gpu builds both)
    if [ ! -x "$b" ]; then echo "FAIL: $b not built"; echo "0 passed, 1 failed"; exit 1; fi
done

run() {   # run NAME ARGS...: mlp_gpu's output in $log/NAME, exit status returned
    local name=$1; shift
    timeout 180 "$BIN" "$@" >"$log/$name" 2>&1
}
expect_match() {   # expect_match NAME RC: exit 0 and "gradients match"
    if [ "$2" -eq 0 ] && grep -q "ok, gradients match" "$log/$1"; then ok "$1: $(grep -o 'worst relative error [^ ]*' "$log/$1")"
    else bad "$1 (exit $2)"; sed 's/^/    /' "$log/$1" | tail -n 20; fi
}
iw_is() {   # iw_is NAME "K of N block(s)": rank 0's I->W buffer line
    grep -q "^rank 0 I->W buffers (each I's dh and dy until its W): $2, for the most" "$log/$1" && ok "$1: I->W buffers $2" ||
        bad "$1: I->W buffers not $2: $(grep 'I->W' "$log/$1" || echo none)"
}
expect_error() {   # expect_error NAME TEXT ARGS...: exit 2, TEXT in the output
    local name=$1 text=$2 rc; shift 2
    run "$name" "$@"; rc=$?
    [ "$rc" -eq 2 ] && grep -qF -- "$text" "$log/$name" && ok "$name: $text" ||
        { bad "$name: exit $rc, expected 2 and '$text'"; sed 's/^/    /' "$log/$name" | tail -n 5; }
}

# A CSV that holds back W's: the first two microbatches' I's of all three stages before any W (six
# awaiting at once), then whole B's mixed with I's and W's
cat >"$log/held.csv" <<'EOF'
0F0,1F0,2F0,2I0,1I0,0I0,0F1,1F1,2F1,2I1,1I1,0I1,2W0,1W0,0W0,2W1,1W1,0W1,0F2,1F2,2F2,2B2,1I2,0B2,0F3,1F3,2F3,2I3,1B3,0I3,1W2,2W3,0W3
EOF
run held $SMALL --schedule-csv "$log/held.csv" --check; expect_match held $?
iw_is held "6 of 2 blocks"
grep -q "^schedule from held.csv pp 1 vpp 3 mb 4" "$log/held" && ok "held: named after its file" ||
    bad "held: $(grep '^schedule' "$log/held")"
run held-train $SMALL --schedule-csv "$log/held.csv" --train 3 --optimizer adamw
rc=$?; [ "$rc" -eq 0 ] && [ "$(grep -c '^train step' "$log/held-train")" -eq 3 ] && ok "held: trains 3 steps (AdamW)" ||
    { bad "held-train (exit $rc)"; tail -n 5 "$log/held-train"; }

# (Stages of different sizes on one rank need a layout, and a layout of several chunks per rank
# needs pp >= 2, Megatron's rule: nccl_pipeline.sh checks them on two GPUs.)

# the built kinds: one buffer where each W follows its I at once (at pp 1 every I/W kind does)
run zbv $SMALL --schedule zbv --check; expect_match zbv $?
iw_is zbv "1 of 3 blocks"
run split $SMALL --schedule interleaved --vpp 3 --split-backward --check; expect_match split $?
iw_is split "1 of 2 blocks"
run izb $SMALL --schedule interleaved-zb --vpp 3 --check; expect_match izb $?
run 1f1b $SMALL --schedule 1f1b --check; expect_match 1f1b $?
grep -q "I->W" "$log/1f1b" && bad "1f1b: I->W buffers without I's" || ok "1f1b: no I->W buffers"

# a CSV of whole B's, split by --split-backward
"$BUILD/pipepar" schedule --kind interleaved --pp 1 --vpp 3 --mb 4 --format csv >"$log/whole.csv"
run whole-split $SMALL --schedule-csv "$log/whole.csv" --split-backward --check; expect_match whole-split $?
grep -q "^schedule from whole.csv, B as I then W" "$log/whole-split" && ok "whole-split: B as I then W" ||
    bad "whole-split: $(grep '^schedule' "$log/whole-split")"

# what a wrong file gets: the file, the rule, exit 2; never a crash
expect_error csv-missing "--schedule-csv=$log/none.csv: cannot open: No such file" $SMALL --schedule-csv "$log/none.csv"
expect_error csv-mb "4 microbatches, 3 chunks per rank; the run has pp=1 and --mb=8" \
    ${SMALL/--mb 4/--mb 8} --schedule-csv "$log/held.csv"
expect_error csv-vpp "and --vpp=2" $SMALL --vpp 2 --schedule-csv "$log/held.csv"
echo "0F0,1F0,zz" >"$log/garbage.csv"
expect_error csv-garbage "--schedule-csv=$log/garbage.csv: " $SMALL --schedule-csv "$log/garbage.csv"
: >"$log/empty.csv"
expect_error csv-empty "--schedule-csv=$log/empty.csv: " $SMALL --schedule-csv "$log/empty.csv"
expect_error csv-and-schedule "the file is the whole schedule (not with --schedule)" $SMALL --schedule zbv --schedule-csv "$log/held.csv"
# a W before its I: the validator names it, the run stops before any step
echo "0F0,1F0,2F0,2W0,2I0,1I0,1W0,0I0,0W0,0F1,1F1,2F1,2B1,1B1,0B1,0F2,1F2,2F2,2B2,1B2,0B2,0F3,1F3,2F3,2B3,1B3,0B3" >"$log/w-first.csv"
expect_error w-first "rank 0 position 3: 2W0 comes before its I" $SMALL --schedule-csv "$log/w-first.csv"

# --gemm-picks: the first run tunes and writes the file, the next runs its kernels without tuning;
# a file for another model, GPU or library, or one that does not parse, stops the run with exit 2
run picks-write $SMALL --schedule 1f1b --gemm-picks "$log/picks.txt"; rc=$?
[ "$rc" -eq 0 ] && [ "$(wc -l <"$log/picks.txt")" -eq 7 ] && head -n 1 "$log/picks.txt" | grep -q "^# mlp_gpu GEMM picks: " &&
    ok "picks: written ($(head -n 1 "$log/picks.txt"))" || { bad "picks-write (exit $rc)"; cat "$log/picks.txt"; }
run picks-read $SMALL --schedule zbv --gemm-picks "$log/picks.txt" --check; expect_match picks-read $?
[ "$(grep -c "from $log/picks.txt)" "$log/picks-read")" -ge 6 ] && ok "picks: every GEMM from the file" ||
    bad "picks-read: $(grep -c 'from ' "$log/picks-read") GEMMs from the file"
sed '1s/.*/# mlp_gpu GEMM picks: some other GPU, cuBLASLt 1, SM target 0/' "$log/picks.txt" >"$log/picks-other.txt"
expect_error picks-other "holds \"# mlp_gpu GEMM picks: some other GPU" $SMALL --gemm-picks "$log/picks-other.txt"
expect_error picks-model "in this run (its --hidden, --tokens and --send-parts must match)" \
    ${SMALL/--hidden 512/--hidden 256} --gemm-picks "$log/picks.txt"
{ head -n 1 "$log/picks.txt"; echo "garbage"; } >"$log/picks-bad.txt"
expect_error picks-bad "line 2: expected \"m n k candidate name\"" $SMALL --gemm-picks "$log/picks-bad.txt"
head -n 3 "$log/picks.txt" >"$log/picks-short.txt"
expect_error picks-short "no line for GEMM 'dW2'" $SMALL --gemm-picks "$log/picks-short.txt"
expect_error picks-no-tune "--gemm-picks: not with --no-tune" $SMALL --gemm-picks "$log/picks.txt" --no-tune
# numbers that overflow an int, a GEMM twice, a folder: refused; blanks after a name and a blank
# last line: read
awk 'NR == 2 { $4 = 4294967296 } { print }' "$log/picks.txt" >"$log/picks-big.txt"
expect_error picks-big "line 2: expected \"m n k candidate name\" (numbers from 0 to 2147483647" $SMALL --gemm-picks "$log/picks-big.txt"
{ cat "$log/picks.txt"; sed -n 2p "$log/picks.txt"; } >"$log/picks-twice.txt"
expect_error picks-twice "line 8: a second line for GEMM 'fwd1 gelu_aux'" $SMALL --gemm-picks "$log/picks-twice.txt"
mkdir "$log/picks-folder"
expect_error picks-dir "--gemm-picks=$log/picks-folder: Is a directory" $SMALL --gemm-picks "$log/picks-folder"
{ sed 's/$/  /' "$log/picks.txt" | sed '1s/  $//'; echo; } >"$log/picks-blanks.txt"
run picks-blanks $SMALL --schedule 1f1b --gemm-picks "$log/picks-blanks.txt"; rc=$?
[ "$rc" -eq 0 ] && [ "$(grep -c "from $log/picks-blanks.txt)" "$log/picks-blanks")" -ge 6 ] && ok "picks: trailing blanks and a blank line read" ||
    { bad "picks-blanks (exit $rc)"; tail -n 3 "$log/picks-blanks"; }
# two runs started together on a file neither finds: both tune, one writes, and the other must run
# the written picks (it read the file, or it lost the race and says so), never its own
ONE_P="--single --hidden 512 --layers 6 --tokens 1024 --mb 4 --warmup 1 --steps 2 --gemm-picks $log/race.txt"
timeout 180 "$BIN" $ONE_P >"$log/race-a" 2>&1 & pa=$!
timeout 180 "$BIN" $ONE_P >"$log/race-b" 2>&1 & pb=$!
wait $pa; ra=$?; wait $pb; rb=$?
took=0
for f in race-a race-b; do
    grep -q "from $log/race.txt)\|running its picks" "$log/$f" && took=$((took + 1))
done
[ "$ra" -eq 0 ] && [ "$rb" -eq 0 ] && [ "$took" -eq 1 ] &&
    ok "picks: two runs at once, one writes, the other runs its picks$(grep -h -o 'written by another run' "$log"/race-? | head -n 1 | sed 's/^/ (/; s/$/)/')" ||
    { bad "picks race: exits $ra $rb, $took run(s) took the file's picks (expected 1)"; tail -n 3 "$log/race-a" "$log/race-b"; }

# --tune-in-step: the candidates take turns inside real steps; the picks written are those, and a
# pipeline reading them runs them
ONE="--hidden 512 --layers 6 --tokens 1024 --mb 4 --warmup 1 --steps 2"
run tis $ONE --single --tune-in-step 2 --gemm-picks "$log/tis.txt"; rc=$?
line=$(grep "^in-step tuning (2 steps)" "$log/tis")
[ "$rc" -eq 0 ] && [ -n "$line" ] && [ "$(wc -l <"$log/tis.txt")" -eq 7 ] && ok "tune-in-step: $(echo "$line" | cut -c1-120)" ||
    { bad "tune-in-step (exit $rc)"; tail -n 5 "$log/tis"; }
want=$(echo "$line" | grep -o -- '-> [0-9]*' | awk '{printf "%s ", $2}')
got=$(tail -n +2 "$log/tis.txt" | awk '{printf "%s ", $4}')
[ -n "$want" ] && [ "$want" = "$got" ] && ok "tune-in-step: the file holds its picks ($got)" || bad "tune-in-step: picks '$want', file '$got'"
run tis-read $SMALL --schedule 1f1b --gemm-picks "$log/tis.txt" --check; expect_match tis-read $?
expect_error tis-pipeline "--tune-in-step: only with --single" $SMALL --tune-in-step 2
expect_error via-host-nccl "--via-host: stages the copy engines' transfers between processes (not with --no-copy-engine)" \
    $SMALL --via-host --no-copy-engine
expect_error via-host-threads "--via-host: stages the copy engines' transfers between processes (not with --threads)" \
    $SMALL --via-host

# compute-sanitizer memcheck on the held W's (NCCL's init probes report API errors: not counted)
SAN=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
if [ -x "$SAN" ]; then
    "$SAN" --tool memcheck --report-api-errors no --error-exitcode 99 "$BIN" ${SMALL/--hidden 512/--hidden 256} \
        --steps 1 --schedule-csv "$log/held.csv" --check >"$log/memcheck" 2>&1; rc=$?
    summary=$(grep 'ERROR SUMMARY' "$log/memcheck" | tail -n 1)
    [ "$rc" -eq 0 ] && echo "$summary" | grep -q ' 0 errors' && grep -q "ok, gradients match" "$log/memcheck" &&
        ok "memcheck, held W's: $summary" || { bad "memcheck (exit $rc): ${summary:-no summary}"; grep '^=========' "$log/memcheck" | head -n 20; }
else
    bad "compute-sanitizer not found"
fi

rm -rf "$log"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
