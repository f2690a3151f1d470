#!/usr/bin/env bash
# CLI checks of `pipepar pack`, `pipepar cp` and `pipepar replay`: what they print, their exit
# codes and messages (bad flags exit 2 with one line, bad data exit 1 with pipepar's message).
set -u
cd "$(dirname "$0")/.."
P=${PIPEPAR:-build/pipepar}
pass=0; fail=0
ok()  { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
# expect_out NAME EXPECTED_SUBSTRING CMD ARGS...: exit 0 and stdout contains the text (stdin: $IN)
expect_out() {
    local name=$1 want=$2; shift 2
    local out; out=$(printf '%s' "${IN:-}" | "$P" "$@" 2>&1); local rc=$?
    if [ $rc -eq 0 ] && grep -qF -- "$want" <<<"$out"; then ok; else bad "$name: rc=$rc, output: $out"; fi
}
# expect_fail NAME CODE EXPECTED_STDERR CMD ARGS...: exit CODE, one line on stderr containing the text
expect_fail() {
    local name=$1 code=$2 want=$3; shift 3
    local err; err=$(printf '%s' "${IN:-}" | "$P" "$@" 2>&1 >/dev/null); local rc=$?
    if [ $rc -eq "$code" ] && grep -qF -- "$want" <<<"$err" && [ "$(wc -l <<<"$err")" -eq 1 ]; then ok
    else bad "$name: rc=$rc (want $code), stderr: $err"; fi
}
# expect_json NAME CMD ARGS...: exit 0 and stdout is valid JSON (checked where python3 exists)
expect_json() {
    local name=$1; shift
    command -v python3 >/dev/null 2>&1 || return 0
    if printf '%s' "${IN:-}" | "$P" "$@" 2>/dev/null | python3 -m json.tool >/dev/null 2>&1; then ok; else bad "$name: not JSON"; fi
}

# --- pack ---
IN="5 11"
expect_out "hand example cu_seqlens" "cu_seqlens [0 5 16]  cu_seqlens_padded [0 8 20]" pack --capacity 20 --cp 2 --algo concatenative
expect_out "hand example summary" "2 sequences, 16 tokens (20 after padding each to a multiple of 4) -> 1 bin of capacity 20" \
    pack --capacity 20 --cp 2 --algo concat
IN="5,5,5,5,3,3,3,2,2,2,2,1"
expect_out "ffd ties: higher index first" "bin 2  rank 0  microbatch 2  seqs [6 5 4 11]" pack --capacity 10
expect_out "lower bound" "lower bound ceil(38 / 10) = 4" pack --capacity 10 --quiet
expect_out "dp round robin" "bin 1  rank 1  microbatch 0" pack --capacity 10 --dp 2
expect_out "vpp makes dp*pp bins" "dp 2 x 4 microbatches each" pack --capacity 10 --dp 2 --pp 4 --vpp 2
expect_json "json" pack --capacity 10 --dp 2 --json
IN=""
expect_out "inline lengths" "seqs [1 0]" pack --capacity 16 --lengths 4,12
expect_out "comments and newlines in the input" "3 sequences" pack --capacity 16 --lengths $'4 # first\n5,\n6'
expect_out "help" "usage: pipepar pack" pack --help
expect_fail "capacity required" 2 "pipepar: --capacity: required" pack --lengths 4
expect_fail "capacity range" 2 "--capacity=0: must be between 1 and" pack --capacity 0 --lengths 4
expect_fail "unknown algorithm" 2 "--algo=next_fit: algo=next_fit: unknown packing algorithm" pack --capacity 9 --algo next_fit --lengths 4
expect_fail "unknown flag" 2 "--frobnicate: unknown flag" pack --capacity 9 --frobnicate --lengths 4
expect_fail "pads and does not" 2 "--same-shape: not with --variable-shapes" pack --capacity 9 --lengths 4 --variable-shapes --same-shape
expect_fail "bad assign" 2 "--assign=best: must be round-robin, tokens or attention" pack --capacity 9 --assign best --lengths 4
expect_fail "zero length" 2 "pipepar: lengths[1]=0: a sequence needs at least 1 token" pack --capacity 9 --lengths 4,0
expect_fail "negative length" 2 "lengths[0]=-3" pack --capacity 9 --lengths -3
expect_fail "too long" 2 "lengths[1]=10: exceeds the bin capacity (9)" pack --capacity 9 --lengths 4,10
expect_fail "too long once padded" 2 "lengths[0]=9: padded to a multiple of 4 it is 12 tokens, more than the bin capacity (10)" \
    pack --capacity 10 --cp 2 --lengths 9
expect_fail "too few sequences" 2 "3 bins are needed but there are only 2 sequences" pack --capacity 9 --min-bins 3 --lengths 4,4
expect_fail "multiple of dp" 2 "bin_count_multiple=3: must be a multiple of dp (2)" pack --capacity 9 --dp 2 --bin-multiple 3 --lengths 4,4,4
expect_fail "not an integer" 2 "--lengths: entry 1, '4x', is not a 32-bit integer" pack --capacity 9 --lengths 4x
IN=$'3\n4x' expect_fail "not an integer in a file" 2 "stdin, line 2: '4x' is not a 32-bit integer" pack --capacity 9
expect_fail "empty entry" 2 "--lengths: entry 2 is empty (a comma with no number after it)" pack --capacity 9 --lengths 1,,2
expect_fail "leading comma" 2 "--lengths: entry 1 is empty (a comma with no number before it)" pack --capacity 9 --lengths ,1
expect_fail "trailing comma" 2 "--lengths: entry 3 is empty" pack --capacity 9 --lengths 1,2,
IN=$'1,2,\n' expect_fail "trailing comma in a file" 2 "stdin, line 1: an empty entry (a comma with no number after it)" pack --capacity 9
IN=$'1,\n,\n2\n' expect_fail "a line of only a comma" 2 "stdin, line 2: an empty entry" pack --capacity 9
expect_fail "seq-multiple only with lengths" 2 "--seq-multiple: only with --lengths" cp --cp 2 --seq-len 8 --seq-multiple 4
expect_fail "shapes either order" 2 "--variable-shapes: not with --same-shape" pack --capacity 9 --lengths 4 --same-shape --variable-shapes
expect_fail "empty cu_seqlens entry" 2 "--cu-seqlens: entry 2 is empty" cp --cp 2 --cu-seqlens 0,,8
expect_fail "missing file" 2 "'no/such/file': cannot open" pack --capacity 9 no/such/file

# --- cp ---
expect_out "cp2 rank 0 of 5 and 11" "index [0 1 6 7 8 9 10 17 18 19]" cp --cp 2 --lengths 5,11
expect_out "cp2 rank 1 of 5 and 11" "index [2 3 4 5 11 12 13 14 15 16]" cp --cp 2 --lengths 5,11
expect_out "cp2 padding marks" "token [s0:0 s0:1 s0:6* s0:7* s1:0 s1:1 s1:2 s1:9 s1:10 s1:11*]" cp --cp 2 --lengths 5,11
expect_out "bshd" "index [0 1 14 15]" cp --cp 4 --seq-len 16 --rank 0
expect_out "thd boundaries" "local cu_seqlens_padded [0 4 10]" cp --cp 2 --cu-seqlens 0,8,20
expect_out "gather" "[0 1 10 11 12 13 2 3 4 5 6 14 15 16 17 18 19 7 8 9]" cp --cp 2 --cu-seqlens 0,8,20
expect_json "cp json" cp --cp 2 --lengths 5,11 --json
expect_fail "cp required" 2 "--cp: required" cp --seq-len 8
expect_fail "one input" 2 "give exactly one of them" cp --cp 2 --seq-len 8 --lengths 4
expect_fail "tp only with lengths" 2 "--tp: only with --lengths" cp --cp 2 --seq-len 8 --tp 2
expect_fail "rank range" 2 "--rank=2: must be below --cp=2" cp --cp 2 --seq-len 8 --rank 2
expect_fail "bshd multiple" 2 "sequence 0: padded length 10 is not a multiple of 2*cp=4" cp --cp 2 --seq-len 10
expect_fail "thd multiple" 2 "sequence 1: padded length 6 is not a multiple of 2*cp=4" cp --cp 2 --cu-seqlens 0,8,14
expect_fail "thd order" 2 "cu_seqlens_padded[2]=4: smaller than the entry before it (8)" cp --cp 2 --cu-seqlens 0,8,4
expect_fail "thd start" 2 "cu_seqlens_padded[0]=4: must be 0" cp --cp 2 --cu-seqlens 4,8
expect_fail "seq multiple" 2 "--seq-multiple=6: must be a multiple of 2*cp=4" cp --cp 2 --lengths 5 --seq-multiple 6

# --- replay ---
R="replay --layers 27 --first-k-dense 1 --capacity 20 --cp 2 --algo concat --lengths 5,11"
expect_out "27 layers, first stage 13" "stage layers [0, 13): 12 MoE layers [1 2 3 4 5 6 7 8 9 10 11 12] at slots [0 1 2 3 4 5 6 7 8 9 10 11]" \
    $R --stage-layers 0:13
expect_out "27 layers, second stage" "stage layers [13, 27): 14 MoE layers [13 14 15 16 17 18 19 20 21 22 23 24 25 26] at slots [12 13" \
    $R --stage-layers 13:27
expect_out "full payload" "at slots [13 14 15" $R --stage-layers 13:27 --payload full
expect_out "rows cp rank 0" "cp rank 0: 10 tokens  rows [0 1 -1 -1 5 6 7 14 15 -1]" $R --stage-layers 0:13
expect_out "rows cp rank 1" "cp rank 1: 10 tokens  rows [2 3 4 -1 8 9 10 11 12 13]" $R --stage-layers 0:13
expect_out "sequence parallel" "cp rank 1 tp rank 1: 5 tokens  rows [9 10 11 12 13]" $R --stage-layers 0:13 --tp 2 --sequence-parallel \
    --seq-multiple 4
expect_out "uneven split rank 0" "stage layers [0, 13): 12 MoE layers" $R --pp 2 --first-stage-layers 13 --pp-rank 0
expect_out "uneven split rank 1" "stage layers [13, 27): 14 MoE layers" $R --pp 2 --first-stage-layers 13 --pp-rank 1
expect_fail "uneven split rule" 2 "does not divide evenly over pp=2" $R --pp 2 --pp-rank 1
expect_fail "rank outside the split" 2 "--pp-rank=2, --chunk=0: the split has --pp=2 ranks" $R --pp 2 --first-stage-layers 13 --pp-rank 2
expect_fail "stage twice" 2 "give one of them, not both" $R --pp 2 --pp-rank 0 --stage-layers 0:13
expect_out "dense stage" "no MoE layer on this stage: nothing to replay" $R --stage-layers 0:1
expect_json "replay json" $R --stage-layers 0:13 --json
expect_fail "layers required" 2 "--layers: required" replay --stage-layers 0:1 --capacity 9 --lengths 4
expect_fail "stage required" 2 "--stage-layers: required" replay --layers 4 --capacity 9 --lengths 4
expect_fail "stage syntax" 2 "--stage-layers=3: expected A:B" replay --layers 4 --stage-layers 3 --capacity 9 --lengths 4
expect_fail "stage range" 2 "layers [0, 5): must lie within [0, num_layers=4)" replay --layers 4 --stage-layers 0:5 --capacity 9 --lengths 4
expect_fail "cp rank range" 2 "--cp-rank=2: must be below --cp=2" $R --stage-layers 0:13 --cp-rank 2
expect_fail "tp rank needs sp" 2 "--tp-rank=0: only with --sequence-parallel" $R --stage-layers 0:13 --tp-rank 0
expect_fail "payload" 2 "--payload=half: must be compressed or full" $R --stage-layers 0:13 --payload half

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
