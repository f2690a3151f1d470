#!/usr/bin/env bash
# CLI checks of `pipepar schedule` and `pipepar simulate`: output forms and the one-line errors.
. "$(dirname "$0")/cli_lib.sh"

# --format torch: exactly one line per rank, "rankR: " then the compute actions
out=$($P schedule --kind interleaved --pp 4 --vpp 2 --mb 8 --format torch)
[ "$(echo "$out" | wc -l)" -eq 4 ] && ok || bad "torch: expected 4 lines"
echo "$out" | head -1 | grep -q '^rank0: 0F0 0F1 0F2 0F3 4F0 4F1 4F2 4F3 0F4' && ok || bad "torch rank0 line: $(echo "$out" | head -1)"
echo "$out" | grep -q '_\|SEND\|RECV' && bad "torch output shows idle or communication" || ok

# csv round trip through --from-csv gives the same torch order
$P schedule --kind 1f1b --pp 3 --mb 5 --format csv > /tmp/pp_cli_$$.csv && ok || bad "csv"
a=$($P schedule --kind 1f1b --pp 3 --mb 5 --format torch); b=$($P schedule --from-csv /tmp/pp_cli_$$.csv --format torch)
[ "$a" = "$b" ] && ok || bad "csv round trip: '$a' vs '$b'"
$P simulate --from-csv /tmp/pp_cli_$$.csv --json | grep -q '"makespan": 21' && ok || bad "simulate --from-csv makespan"
# groups that touch are written with an empty cell between them, and read back as two groups
$P schedule --kind 1f1b --pp 2 --mb 3 --format csv | head -1 | grep -q '0SEND_F1,,0RECV_B0' && ok || bad "csv group separator"
# a CSV whose rank-0 group meets two groups of rank 1 is refused, and --relower repairs it
printf '0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n' > /tmp/pp_cli_$$.csv
expect_error 2 "each group must meet exactly one group of each peer" schedule --from-csv /tmp/pp_cli_$$.csv
$P schedule --from-csv /tmp/pp_cli_$$.csv --relower --format csv | head -1 | grep -q '^0F0,0SEND_F0,,0RECV_B0,0B0$' && ok || bad "--relower"
expect_error 2 "--relower: only with --from-csv" schedule --kind 1f1b --pp 2 --mb 2 --relower
rm -f /tmp/pp_cli_$$.csv

# svg and json are well-formed enough for a browser / a parser
$P schedule --kind gpipe --pp 2 --mb 3 --format svg | tail -1 | grep -q '</svg>' && ok || bad "svg"
$P schedule --kind gpipe --pp 2 --mb 3 --format json | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["pp"]==2 and len(d["ranks"])==2' && ok || bad "json"
$P simulate --kind 1f1b --pp 4 --mb 8 --json | python3 -c 'import json,sys; d=json.load(sys.stdin); assert abs(d["bubble_mean"]-3/11)<1e-9' && ok || bad "simulate bubble"
# the bound no order of the same actions beats: 1F1B is the fastest order of its actions (33 =
# 24 of rank 3's compute after its 3 and before the 6 of the backwards below it); DualPipeV here
# is 1.5 above the 25.5 rank 3 allows
$P simulate --kind 1f1b --pp 4 --mb 8 --json | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["bound"] == 33 and d["bound_rank"] == 3 and d["makespan"] == 33' && ok || bad "simulate --json bound of 1F1B"
$P simulate --kind dualpipev --pp 4 --mb 8 | grep -q '^bound  *25.500  (no order of these actions on these ranks is faster; rank 3 sets it; this order is 5.88% above)$' && ok || bad "simulate's bound line for DualPipeV"
$P schedule --kind interleaved --pp 4 --vpp 2 --mb 8 | grep -q 'valid' && ok || bad "text says valid"

# bad flags: non-zero exit and a one-line reason naming the flag
expect_error 2 "--pp=0: must be between 1" schedule --kind 1f1b --pp 0 --mb 4
expect_error 2 "--mb=0: must be between 1" schedule --kind 1f1b --pp 2 --mb 0
expect_error 2 "--vpp=0: must be between 1" schedule --kind interleaved --pp 2 --vpp 0 --mb 4
expect_error 2 "kind 'zigzag': unknown" schedule --kind zigzag --pp 2 --mb 4
expect_error 2 "--pp: expected an integer, got 'four'" schedule --kind 1f1b --pp four --mb 4
expect_error 2 "--kind: required" schedule --pp 2 --mb 4
expect_error 2 "--bogus: unknown flag" schedule --kind 1f1b --pp 2 --mb 4 --bogus 1
expect_error 2 "--format=png: one of text" schedule --kind 1f1b --pp 2 --mb 4 --format png
expect_error 2 "vpp=2: gpipe runs one chunk per rank" schedule --kind gpipe --pp 2 --vpp 2 --mb 4
expect_error 2 "group=2: only interleaved" schedule --kind 1f1b --pp 2 --mb 4 --group 2
expect_error 2 "max_live=2: 1f1b has a fixed memory profile" schedule --kind 1f1b --pp 4 --mb 8 --max-live 2
expect_error 2 "--b: not with --i/--w" simulate --kind 1f1b --pp 4 --mb 8 --b 5 --i 1 --w 1
expect_error 2 "--bandwidth: needs --bytes too" simulate --kind 1f1b --pp 4 --mb 8 --bandwidth 10
expect_error 2 "--f=1e308: out of range" simulate --kind 1f1b --pp 4 --mb 8 --f 1e308
expect_error 2 "--f: expected a number, got '1x'" simulate --kind 1f1b --pp 4 --mb 8 --f 1x
expect_error 2 "--from-csv 'nope.csv': cannot open" schedule --from-csv nope.csv
expect_error 2 "--f=-1: must be at least" simulate --kind 1f1b --pp 2 --mb 4 --f -1
expect_error 2 "unknown command 'shedule'" shedule
expect_error 2 "pp*vpp*mb=68719476736: at most 4194304" schedule --kind 1f1b --pp 4096 --mb 16777216
expect_error 2 "--pp=65536: must be between 1 and 4096" schedule --kind 1f1b --pp 65536 --mb 8
expect_error 2 "--bogus: unknown flag" simulate --kind 1f1b --pp 4 --mb 8 --bogus
expect_error 2 "unexpected argument 'extra'" schedule --kind 1f1b --pp 4 --mb 8 extra
expect_error 2 "--json: unknown flag" schedule --kind 1f1b --pp 4 --mb 8 --json
expect_error 2 "pp*mb=32768, at most 8192 for a search" search --pp 64 --mb 512
printf '1\n2\n\0\n3\n' > /tmp/pp_nul_$$; expect_error 2 "byte 4 is a NUL" pack --capacity 10 /tmp/pp_nul_$$; rm -f /tmp/pp_nul_$$
expect_error 2 "--lengths: entry 1 is empty" pack --capacity 10 --lengths ,
$P schedule --help >/dev/null && ok || bad "--help exits 0"
[ "$($P help schedule | head -n 1)" = "$($P schedule --help | head -n 1)" ] && ok || bad "help schedule is not schedule --help"
expect_error 2 "help: unknown command 'nope'" help nope
expect_error 2 "group=1: below pp=128, outside Megatron-LM's range" schedule --kind interleaved --pp 128 --vpp 2 --mb 128 --group 1
$P simulate --kind 1f1b --pp 2 --mb 2 --p2p 1e-310 >/dev/null && ok || bad "a tiny --p2p (an underflow) refused"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
