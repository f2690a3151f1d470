#!/usr/bin/env bash
# demo.sh — the CPU examples train, check themselves against the single-stage model every step,
# and fail cleanly on bad flags: the lesson (build/mlp_threads, what `make demo` runs) on every
# kind, and mlp_plan (the same trainer on what pp_plan_build makes of a trainer's options: searches,
# CSVs, layouts, microbatch groups, the backward split). Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
BIN=build/mlp_threads
PLAN=build/mlp_plan
pass=0; fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ok()  { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; [ -n "${2:-}" ] && sed 's/^/     /' "$2" | tail -n 15; }

if [ ! -x "$BIN" ] || [ ! -x "$PLAN" ]; then
    echo "FAIL $BIN or $PLAN is not built (make host)"
    echo "0 passed, 1 failed"
    exit 1
fi

# steps NAME FILE: every step line says the gradients match; prints the first and last loss
losses() { awk '/^ *[0-9]+ +[0-9.]+ +(yes|NO)/ { if (!n) first = $2; last = $2; n++; if ($3 != "yes") bad++ }
                END { printf "%d %d %s %s\n", n, bad + 0, first, last }' "$1"; }

# 1. exactly what `make demo` runs
if "$BIN" --pp 4 --vpp 2 --mb 8 --schedule interleaved --steps 20 >"$tmp/demo.txt" 2>&1; then
    read -r n nbad first last < <(losses "$tmp/demo.txt")
    if [ "$n" -eq 20 ] && [ "$nbad" -eq 0 ]; then ok "make demo: 20 steps, every one matches the single-stage gradients"
    else bad "make demo: $n step lines, $nbad not matching" "$tmp/demo.txt"; fi
    if awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.7 * a) }'; then ok "make demo: the loss falls ($first -> $last)"
    else bad "make demo: the loss does not fall enough ($first -> $last)" "$tmp/demo.txt"; fi
    if grep -q '^rank 3 ' "$tmp/demo.txt" && grep -q 'chunk |' "$tmp/demo.txt" && grep -q '^measured ' "$tmp/demo.txt"
    then ok "make demo: draws the schedule and the measured timeline"
    else bad "make demo: no schedule picture or timeline" "$tmp/demo.txt"; fi
    # where the step went (pp_timeline_idle): one line per rank whose parts add up to the step
    if awk '/^  rank [0-9]: / { n++; split($0, a, /[:=+]/); s = a[3] + a[4] + a[5] + a[6] + a[7]
             if (s < a[2] - 0.05 || s > a[2] + 0.05) wrong++ } END { exit !(n == 4 && !wrong) }' "$tmp/demo.txt" &&
       grep -q '^where the step went' "$tmp/demo.txt"
    then ok "make demo: where the step went, per rank, adds up to the step"
    else bad "make demo: no breakdown of the step, or its parts do not add up" "$tmp/demo.txt"; fi
else
    bad "make demo: exit $?" "$tmp/demo.txt"
fi

# 2. every schedule kind, on the lesson's model (a kind this version does not build is skipped)
for kind in gpipe 1f1b interleaved looped-bfs zb-h1 zb-h2 zbv dualpipev interleaved-zb; do
    for pp in 1 3; do
        out="$tmp/$kind-$pp.txt"
        "$BIN" --pp $pp --mb 6 --schedule $kind --steps 3 >"$out" 2>&1; rc=$?
        if [ $rc -eq 2 ] && grep -q 'not built yet' "$out"; then echo "skip $kind: not built in this version"; continue; fi
        if [ $rc -eq 0 ]; then
            read -r n nbad first last < <(losses "$out")
            if [ "$n" -eq 3 ] && [ "$nbad" -eq 0 ]; then ok "$kind pp=$pp: gradients match the single-stage run"
            else bad "$kind pp=$pp: $n steps, $nbad not matching" "$out"; fi
        else bad "$kind pp=$pp: exit $rc" "$out"; fi
    done
done

# 3. a Chrome trace that is valid JSON: the lesson's, and mlp_plan's with several blocks a stage;
#    a trace that cannot be written fails the run
trace_ok() {   # trace_ok NAME PROGRAM ARGS...
    local name=$1 prog=$2; shift 2
    rm -f "$tmp/t.json"
    if "$prog" "$@" --steps 2 --trace "$tmp/t.json" >"$tmp/trace.txt" 2>&1 && [ -s "$tmp/t.json" ]; then
        if ! command -v python3 >/dev/null 2>&1 ||
           python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if any(e.get("ph")=="X" for e in d["traceEvents"]) else 1)' "$tmp/t.json"
        then ok "$name: --trace writes a Chrome trace"
        else bad "$name: --trace: not a Chrome trace" "$tmp/t.json"; fi
    else bad "$name: --trace run" "$tmp/trace.txt"; fi
}
trace_ok "lesson pp 2 vpp 2" "$BIN" --pp 2 --vpp 2 --mb 4
trace_ok "--layers 8 over 4 stages" "$PLAN" --pp 2 --vpp 2 --mb 4 --layers 8 --width 8 --hidden 16 --rows 2
"$BIN" --pp 2 --mb 4 --steps 1 --trace "$tmp/no/such/dir/t.json" >"$tmp/u.out" 2>"$tmp/u.err"; rc=$?
if [ $rc -eq 1 ] && grep -q "mlp_threads: --trace=$tmp/no/such/dir/t.json: could not write it" "$tmp/u.err"
then ok "a trace that cannot be written: exit 1, named"; else bad "unwritable --trace: exit $rc" "$tmp/u.err"; fi

# 4. mlp_plan: uneven stages (--layout) under fixed kinds and under the schedule pp_search picks for them
run_ok() {   # run_ok NAME NEEDLE ARGS...: 3 steps, each matching the single-stage run, and NEEDLE printed
    local name=$1 needle=$2; shift 2
    local out="$tmp/$name.txt"
    if "$PLAN" "$@" --steps 3 --width 16 --hidden 32 --rows 4 >"$out" 2>&1; then
        read -r n nbad first last < <(losses "$out")
        if [ "$n" -eq 3 ] && [ "$nbad" -eq 0 ] && grep -q -- "$needle" "$out"; then ok "$name: gradients match the single-stage run"
        else bad "$name: $n steps, $nbad not matching, or no '$needle'" "$out"; fi
    else bad "$name: exit $?" "$out"; fi
}
run_ok "zbv, stages 1,3,1,3" "4 stages of 1,3,1,3 blocks" --pp 2 --mb 8 --schedule zbv --layout 'Et*1|t*3|t*1|t*3L'
run_ok "search, stages 1,3,1,3" "search: greedy V" --pp 2 --mb 8 --schedule search --layout 'Et*1|t*3|t*1|t*3L'
run_ok "search, even stages" "search: " --pp 3 --mb 6 --schedule search --layers 6
run_ok "interleaved pp 3, stages 2,1,1,1,1,2" "6 stages of 2,1,1,1,1,2 blocks" --pp 3 --mb 6 --schedule interleaved \
    --layout 'Et*2|t|t|t|t|t*2L'
run_ok "1f1b pp 4, Megatron's uneven first stage" "4 stages of 3,2,2,1 blocks" --pp 4 --mb 8 --schedule 1f1b \
    --layout 'Et*3|t*2|t*2|tL'
# interleaved with a microbatch group of 4 on a 1-block first stage: what `pipepar search --layers 16
# --kind interleaved` picks for pp 2, mb 8 (bench/RESULTS.md, 3.6)
run_ok "interleaved group 4, stages 1,2,2,2,2,2,3,2" "interleaved group=4, pp=2 vpp=4 mb=8: 8 stages of 1,2,2,2,2,2,3,2 blocks" --pp 2 --mb 8 \
    --schedule interleaved --group 4 --layout 'Et|t*2|t*2|t*2|t*2|t*2|t*3|t*2L'
run_ok "search with its layout chosen (1107 splits)" "search    1107 splits of 16 blocks; the fastest: " --pp 2 --mb 8 \
    --schedule search --search-layout --layers 16 --vpp 4
run_ok "interleaved group 8 (all microbatches), pp 3" "interleaved group=8, pp=3 vpp=2 mb=8" --pp 3 --mb 8 --schedule interleaved \
    --group 8
# each B as I then W (--split-backward): the B's gradient leaves before its weight gradient
run_ok "interleaved group 4, B as I then W" "interleaved group=4, B as I then W, pp=2 vpp=4 mb=8: 8 stages of 1,2,2,2,2,2,3,2" \
    --pp 2 --mb 8 --schedule interleaved --group 4 --layout 'Et|t*2|t*2|t*2|t*2|t*2|t*3|t*2L' --split-backward
run_ok "1f1b pp 3, B as I then W" "1f1b, B as I then W, pp=3" --pp 3 --mb 6 --schedule 1f1b --split-backward
run_ok "search, interleaved, B as I then W" "search: interleaved vpp=2 group=[0-9]*, B as I then W" --pp 2 --mb 8 \
    --schedule search --search-kind interleaved --layers 8 --vpp 2 --split-backward
run_ok "zbv with --split-backward (no B to split)" "zbv, pp=2" --pp 2 --mb 8 --schedule zbv --split-backward
# a schedule from a file (--schedule-csv): the CLI's search winner, a CSV whose B's are split here,
# and one that holds six W's back, on 1,3,1,3 blocks and on even stages
build/pipepar search --pp 2 --mb 8 --vpp 2 --kind greedy --csv "$tmp/greedy.csv" >/dev/null
build/pipepar schedule --kind interleaved --pp 3 --vpp 2 --mb 6 --format csv >"$tmp/inter.csv"
echo "0F0,1F0,2F0,2I0,1I0,0I0,0F1,1F1,2F1,2I1,1I1,0I1,2W0,1W0,0W0,2W1,1W1,0W1,0F2,1F2,2F2,2B2,1I2,0B2,1W2" >"$tmp/held.csv"
run_ok "--schedule-csv, the search's greedy V" "from greedy.csv, pp=2 vpp=2 mb=8: 4 stages of 1,3,1,3" \
    --schedule-csv "$tmp/greedy.csv" --layout 'Et*1|t*3|t*1|t*3L'
run_ok "--schedule-csv interleaved, B as I then W" "from inter.csv, B as I then W, pp=3 vpp=2 mb=6" \
    --schedule-csv "$tmp/inter.csv" --split-backward --layers 12
run_ok "--schedule-csv holding W's back, pp 1" "from held.csv, pp=1 vpp=3 mb=3" --schedule-csv "$tmp/held.csv"

# 5. bad flags: exit 2 and one line naming the flag (or pp_plan_config's field) and the rule
expect_usage() {   # expect_usage NEEDLE PROGRAM ARGS...
    local needle=$1 prog=$2; shift 2
    "$prog" "$@" >"$tmp/u.out" 2>"$tmp/u.err"; local rc=$?
    if [ $rc -eq 2 ] && grep -q -- "$needle" "$tmp/u.err" && [ "$(wc -l <"$tmp/u.err")" -eq 1 ]; then ok "$prog $* -> exit 2: $(cat "$tmp/u.err")"
    else bad "$prog $* -> exit $rc" "$tmp/u.err"; fi
}
expect_usage "mlp_threads: --pp=0:" "$BIN" --pp 0
expect_usage "mlp_threads: --schedule=nope: kind 'nope': unknown" "$BIN" --schedule nope
expect_usage "mlp_threads: --bogus: unknown flag" "$BIN" --bogus
expect_usage "mlp_threads: --pp=2: unknown flag (see --help)" "$BIN" --pp=2 --steps=1
expect_usage "mlp_threads: --layers: unknown flag (see --help)" "$BIN" --layers 8
expect_usage "mlp_threads: --trace: needs a value" "$BIN" --trace
expect_usage "mlp_threads: pp=3: dualpipe needs an even pp" "$BIN" --pp 3 --schedule dualpipe
expect_usage "mlp_threads: vpp=2: gpipe runs one chunk per rank" "$BIN" --pp 2 --vpp 2 --schedule gpipe
expect_usage "mlp_plan: layers=3: must be a multiple of the 4 model stages" "$PLAN" --pp 2 --vpp 2 --schedule interleaved --layers 3
expect_usage "mlp_plan: --pp=0:" "$PLAN" --pp 0
expect_usage "mlp_plan: --bogus: unknown flag" "$PLAN" --bogus
expect_usage "mlp_plan: layout 't|t': the first layer must be E" "$PLAN" --pp 2 --layout 't|t'
expect_usage "mlp_plan: vpp=2: 1f1b runs one chunk per rank" "$PLAN" --pp 2 --schedule 1f1b --layout 'Et|t|t|tL'
expect_usage "mlp_plan: layout 'Et|t|t|tL': dualpipe runs every model stage twice" "$PLAN" --pp 2 --schedule dualpipe --layout 'Et|t|t|tL'
expect_usage "mlp_plan: layout 'Et||tL': stage 1 holds no layer ('t'): every stage needs one" "$PLAN" --pp 3 --layout 'Et||tL'
expect_usage "mlp_plan: group=4: not with search" "$PLAN" --pp 2 --schedule search --group 4
expect_usage "mlp_plan: search_layout: only with search" "$PLAN" --pp 2 --search-layout --layers 8
expect_usage "mlp_plan: --search-kind: only with --schedule search" "$PLAN" --pp 2 --search-kind interleaved
expect_usage "mlp_plan: --search-kind=bogus:" "$PLAN" --pp 2 --schedule search --search-kind bogus
expect_usage "mlp_plan: search_layout: needs layers" "$PLAN" --pp 2 --schedule search --search-layout
expect_usage "group=2: only interleaved schedules take a microbatch group size" "$PLAN" --pp 2 --schedule 1f1b --group 2
expect_usage "mlp_plan: vpp=3: the layout has 4 stages, so vpp = 2" "$PLAN" --pp 2 --vpp 3 --layout 'Et|t|t|tL'
expect_usage "mlp_plan: --layout: needs a value" "$PLAN" --layout
expect_usage "mlp_plan: --schedule-csv=$tmp/greedy.csv: pp=3: the csv has 2 rank(s), 2 chunk(s) per rank and 8 microbatch(es)" \
    "$PLAN" --schedule-csv "$tmp/greedy.csv" --pp 3
expect_usage "mb=4: the csv has 2 rank(s), 2 chunk(s) per rank and 8 microbatch(es)" "$PLAN" --schedule-csv "$tmp/greedy.csv" --mb 4
expect_usage "vpp=3: the csv has 2 rank(s), 2 chunk(s) per rank" "$PLAN" --schedule-csv "$tmp/greedy.csv" --vpp 3
expect_usage "mlp_plan: --schedule-csv=$tmp/none.csv: cannot open: No such file" "$PLAN" --schedule-csv "$tmp/none.csv"
expect_usage "mlp_plan: --schedule-csv=$tmp: is a directory" "$PLAN" --schedule-csv "$tmp"
build/pipepar schedule --kind 1f1b --pp 65 --mb 65 --format csv >"$tmp/p65.csv"
expect_usage "the file has 65 rank(s), 1 chunk(s) per rank and 65 microbatch(es); this example runs at most 64, 64 and 4096" \
    "$PLAN" --schedule-csv "$tmp/p65.csv"
expect_usage "layout 'Et|tL': 2 stages, but the CSV's schedule has 4" "$PLAN" --schedule-csv "$tmp/greedy.csv" --layout 'Et|tL'
expect_usage "csv: the file is the whole schedule (not with kind)" "$PLAN" --schedule-csv "$tmp/greedy.csv" --schedule zbv
echo "0F0,1F0,2F0,2W0,2I0,1I0,1W0,0I0,0W0,0F1,1F1,2F1,2B1,1B1,0B1" >"$tmp/w-first.csv"
expect_usage "rank 0 position 3: 2W0 comes before its I" "$PLAN" --schedule-csv "$tmp/w-first.csv"
echo "0F0,zz" >"$tmp/garbage.csv"
expect_usage "action 'zz': expected <stage><op><microbatch>" "$PLAN" --schedule-csv "$tmp/garbage.csv"
if "$BIN" --help >"$tmp/h.txt" 2>&1 && grep -q '^usage: mlp_threads' "$tmp/h.txt"; then ok "mlp_threads --help"; else bad "mlp_threads --help" "$tmp/h.txt"; fi
if "$PLAN" --help >"$tmp/h.txt" 2>&1 && grep -q '^usage: mlp_plan' "$tmp/h.txt"; then ok "mlp_plan --help"; else bad "mlp_plan --help" "$tmp/h.txt"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
