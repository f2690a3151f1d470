#!/usr/bin/env bash
# cli_hardening.sh — what every subcommand of the CLI promises under bad input and faults
# (examples/cli.h): one exit-code rule (0 done, 2 refused with one stderr line, 1 the environment
# failed), flags as --flag value or --flag=value and each given once, whole-word numbers, every
# input bounded (files, printed tokens, CSV ranks), NUL bytes refused, long values cut in
# messages, every write checked (a full disk exits 1). make test runs it against the plain and
# the ASan+UBSan build ($PIPEPAR).
set -u
. "$(dirname "$0")/cli_lib.sh"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

# one_line NAME CODE TEXT CMD...: the command exits CODE with exactly one stderr line holding TEXT
one_line() {
    local name=$1 code=$2 want=$3; shift 3
    local err; err=$("$@" 2>&1 >/dev/null); local rc=$?
    if [ $rc -eq "$code" ] && [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] && grep -qF -- "$want" <<<"$err"; then ok
    else bad "$name: exit $rc (want $code), stderr: $(printf '%s' "$err" | head -c 400)"; fi
}

V='vision:offset=0,tp=1,pp=1,dp=2'
L='language:offset=2,tp=1,pp=2,dp=1'
# one request per subcommand that succeeds, and one flag with its value to repeat
ok_args=(
    "schedule|--kind 1f1b --pp 2 --mb 4|--pp 3"
    "simulate|--kind 1f1b --pp 2 --mb 4 --f 1|--f 2"
    "search|--pp 2 --mb 4 --kind 1f1b|--mb 6"
    "grid|--world 8 --tp 2|--tp 4"
    "layers|--layers 8 --pp 2|--layers 4"
    "mimo|--grid $V --grid $L --world 4|--world 4"
    "pack|--capacity 10 --lengths 3,4|--capacity 12"
    "cp|--cp 2 --lengths 5,11|--cp 4"
    "replay|--layers 4 --stage-layers 0:4 --capacity 20 --lengths 5|--layers 6"
)

for entry in "${ok_args[@]}"; do
    IFS='|' read -r cmd args again <<<"$entry"
    # shellcheck disable=SC2086
    {
    # 0: done, something on stdout, nothing on stderr
    out=$($P $cmd $args 2>"$T/err"); rc=$?
    [ $rc -eq 0 ] && [ -n "$out" ] && [ ! -s "$T/err" ] && ok || bad "$cmd $args: exit $rc, stderr $(cat "$T/err")"
    # 1: a full disk (stdout on /dev/full) is a failed write, whatever the output's size
    one_line "$cmd to /dev/full" 1 "stdout: write failed: No space left on device" sh -c "$P $cmd $args >/dev/full"
    one_line "$cmd --help to /dev/full" 1 "stdout: write failed" sh -c "$P $cmd --help >/dev/full"
    # 2: the request is refused: an unknown flag, a flag given twice, a missing value
    one_line "$cmd unknown flag" 2 "--bogus: unknown flag (see 'pipepar $cmd --help')" $P $cmd $args --bogus
    one_line "$cmd flag twice" 2 "${again%% *} given twice" $P $cmd $args $again
    one_line "$cmd missing value" 2 "${again%% *}: needs a value" $P $cmd $args ${again%% *}
    # --flag=value reads as --flag value
    eq=$(echo " $args" | sed -E 's/ (--[a-z-]+) ([^-][^ ]*)/ \1=\2/g')
    a=$($P $cmd $args 2>&1); b=$($P $cmd $eq 2>&1)
    [ "$eq" != " $args" ] && [ "$a" = "$b" ] && ok || bad "$cmd:$eq differs from $args"
    }
done

# a switch takes no value; a value with blanks is not a number
one_line "switch with a value" 2 "--json=1: --json takes no value" $P simulate --kind 1f1b --pp 2 --mb 4 --json=1
one_line "leading blank" 2 "--pp: expected an integer, got ' 4'" $P schedule --kind 1f1b --pp ' 4' --mb 4
one_line "trailing blank" 2 "--pp: expected an integer, got '4 '" $P schedule --kind 1f1b --pp '4 ' --mb 4
one_line "leading blank in a float" 2 "--f: expected a number, got ' 1'" $P simulate --kind 1f1b --pp 2 --mb 4 --f ' 1'
one_line "leading blank in a list" 2 "--costs=' 1,2': expected numbers" $P layers --pp 2 --costs ' 1,2'
one_line "leading blank in a repeat" 2 "a repeat count must be between" $P layers --pp 2 --costs '1* 2'
one_line "signed seed" 2 "--seed=+5: expected a nonnegative" $P pack --capacity 9 --seed +5 --lengths 4
one_line "stage-layers with a blank" 2 "--stage-layers= 0:4: expected A:B" $P replay --layers 4 --stage-layers ' 0:4' --capacity 9 --lengths 4
one_line "a second lengths file" 2 "only one lengths file may be given" $P pack --capacity 9 "$T/a" "$T/b"

# long values are cut in messages (the CLI's at 64 characters and "...", the library's at 80 or less)
long=$(head -c 130000 /dev/zero | tr '\0' x)
for args in "schedule --kind $long --pp 2 --mb 2" "schedule --kind 1f1b --pp $long --mb 2" "simulate --kind 1f1b --pp 2 --mb 2 --f $long" \
            "schedule --from-csv $T/$long" "grid --world 4 --order $long" "grid --world 4 --group $long" "layers --pp 2 --costs 1,$long" \
            "mimo --grid $long" "pack --capacity 9 --algo $long" "pack --capacity 9 --assign $long" "cp --cp 2 --lengths $long" \
            "replay --layers 4 --stage-layers $long --capacity 9 --lengths 4" "search --pp 2 --mb 2 --embedding $long" \
            "schedule --kind 1f1b --pp 2 --mb 2 --format $long" "$long" "--$long" "schedule --$long"; do
    # shellcheck disable=SC2086
    err=$($P $args 2>&1 >/dev/null); rc=$?
    [ $rc -eq 2 ] && [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] && [ ${#err} -lt 700 ] && ! grep -q 'x\{81\}' <<<"$err" && ok ||
        bad "a long value in '$(echo "$args" | cut -c1-40)': exit $rc, ${#err} characters: $(echo "$err" | cut -c1-200)"
done

# inputs that never end stop at the bound, with the bound in the message; NUL bytes are refused
one_line "endless stdin (pack)" 2 "stdin: more than 67108864 bytes (64 MiB" sh -c "yes 1 | $P pack --capacity 10"
one_line "endless CSV on stdin" 2 "--from-csv stdin: more than 67108864 bytes" sh -c "yes 0F0 | $P schedule --from-csv -"
one_line "endless layer costs" 2 "--layer-costs stdin: more than 67108864 bytes" sh -c "yes '#' | $P search --pp 2 --mb 2 --layer-costs -"
mkfifo "$T/fifo"
yes 1 >"$T/fifo" 2>/dev/null &
writer=$!
one_line "endless FIFO" 2 "fifo': more than 67108864 bytes" $P pack --capacity 10 "$T/fifo"
kill "$writer" 2>/dev/null; wait "$writer" 2>/dev/null
one_line "/dev/zero (pack)" 2 "'/dev/zero': byte 0 is a NUL: expected text" $P pack --capacity 10 /dev/zero
one_line "/dev/zero (CSV)" 2 "--from-csv '/dev/zero': byte 0 is a NUL" $P schedule --from-csv /dev/zero
one_line "/dev/zero (layer costs)" 2 "--layer-costs '/dev/zero': byte 0 is a NUL" $P search --pp 2 --mb 2 --layer-costs /dev/zero
one_line "/dev/urandom" 2 "is a NUL: expected text" $P replay --layers 4 --stage-layers 0:4 --capacity 9 /dev/urandom
printf '0F0,0B0\n\0x\n' >"$T/nul.csv"
one_line "a NUL inside a CSV" 2 "'$T/nul.csv': byte 8 is a NUL: expected text" $P simulate --from-csv "$T/nul.csv"
printf '1 1 1\n1 1\0 1\n' >"$T/nul.costs"
one_line "a NUL inside layer costs" 2 "byte 9 is a NUL" $P search --pp 2 --mb 2 --layer-costs "$T/nul.costs"
one_line "a directory" 2 "'$T': is a directory" $P pack --capacity 9 "$T"
head -c 67108865 /dev/zero | tr '\0' ' ' >"$T/big.txt"
one_line "a file past the bound, refused before reading" 2 "67108865 bytes, more than 67108864" $P pack --capacity 9 "$T/big.txt"
rm -f "$T/big.txt"
# pp from a CSV: the cap of --pp (4096 rows), refused at once
yes 0F0 | head -n 4097 >"$T/wide.csv"
one_line "4097 CSV rows" 2 "CSV: more than 4096 rows (ranks): at most PP_CSV_MAX_RANKS=4096" $P schedule --from-csv "$T/wide.csv"
one_line "--pp past the CSV's cap" 2 "--pp=4097: must be between 1 and 4096" $P schedule --kind 1f1b --pp 4097 --mb 2
# tokens that drive the output's size: cp and replay print every token, at most 2^24
one_line "cp: a 20-byte --cu-seqlens of 2^31-1 tokens" 2 "--cu-seqlens: 2147483647 tokens, more than 16777216" \
    $P cp --cp 1 --cu-seqlens 0,2147483647
one_line "cp: --lengths past the bound" 2 "--lengths: more than 16777216 tokens once padded" $P cp --cp 1 --lengths 16777216,1
zeros=0$(printf ',0%.0s' $(seq 16))   # 16 empty sequences: 17 boundaries on each of 2^20 ranks
one_line "cp: ranks times boundaries" 2 "more than 16777216 numbers (pick one with --rank)" $P cp --cp 1048576 --cu-seqlens "$zeros"
$P cp --cp 1048576 --cu-seqlens "$zeros" --rank 5 >/dev/null && ok || bad "cp: one rank of many is printed"
one_line "replay: 2e9 tokens" 2 "2000000000 tokens to print, more than 16777216" \
    $P replay --layers 4 --stage-layers 0:4 --capacity 2000000000 --lengths 2000000000
$P replay --layers 4 --stage-layers 0:1 --first-k-dense 1 --capacity 2000000000 --lengths 2000000000 | grep -q "nothing to replay" &&
    ok || bad "replay: a dense stage prints no token, whatever the count"

# exit 1: failed writes of named outputs; exit 2: an output path that cannot be opened
one_line "schedule --out /dev/full" 1 "--out '/dev/full': write failed: No space left on device" \
    $P schedule --kind 1f1b --pp 2 --mb 4 --format svg --out /dev/full
one_line "schedule --out, large" 1 "--out '/dev/full': write failed" $P schedule --kind 1f1b --pp 64 --mb 256 --format csv --out /dev/full
one_line "schedule, large, stdout full" 1 "stdout: write failed: No space left on device" \
    sh -c "$P schedule --kind 1f1b --pp 64 --mb 256 --format json >/dev/full"
one_line "search --csv /dev/full" 1 "--csv '/dev/full': write failed: No space left on device" \
    $P search --pp 2 --mb 4 --kind 1f1b --csv /dev/full
one_line "layers --json, stdout full" 1 "stdout: write failed" sh -c "$P layers --layers 4096 --pp 64 --json >/dev/full"
one_line "schedule --out, no such directory" 2 "--out '/nonexistent/x.svg': cannot open for writing" \
    $P schedule --kind 1f1b --pp 2 --mb 4 --format svg --out /nonexistent/x.svg
one_line "help to /dev/full" 1 "stdout: write failed" sh -c "$P help >/dev/full"
one_line "--version to /dev/full" 1 "stdout: write failed" sh -c "$P --version >/dev/full"

# mimo: a pipeline asked for (--program, --schedule, --mb) that cannot be built is refused (2);
# without the question, the listing says "not available" and is done (0)
mixed="--grid vision:dp=2 --grid audio:tp=2 --grid language:offset=2,pp=2"
# shellcheck disable=SC2086
{
one_line "mimo --program, no pipeline" 2 "--program: no pipeline for these modules: layout mixed" $P mimo $mixed --rank 2 --program
one_line "mimo --schedule, no pipeline" 2 "--schedule, --mb: no pipeline for these modules" $P mimo $mixed --schedule gpipe
$P mimo $mixed | grep -q "pipeline: not available: layout mixed" && ok || bad "mimo listing of a mixed layout"
}
one_line "mimo --program --schedule dualpipe" 2 "--schedule=dualpipe: a MIMO pipeline runs one stage per rank" \
    $P mimo --grid "$V" --grid "$L" --rank 2 --program --schedule dualpipe

# schedule --kind greedy: built (the greedy scheduler's default policy), lowered, proven
$P schedule --kind greedy --pp 3 --mb 6 | grep -q "^greedy schedule, pp=3, vpp=1, mb=6: valid" && ok || bad "schedule --kind greedy"
$P schedule --kind greedy --pp 2 --vpp 2 --mb 4 --format csv >"$T/g.csv" && $P schedule --from-csv "$T/g.csv" | grep -q valid &&
    ok || bad "schedule --kind greedy --vpp 2: its CSV reads back valid"
$P simulate --kind greedy --pp 3 --mb 6 --i 1 --w 1 --groups --json | grep -q '"kind": "greedy"' && ok || bad "simulate --kind greedy --groups"
one_line "greedy takes no group" 2 "group=2: only interleaved takes a group, not greedy" $P schedule --kind greedy --pp 2 --mb 4 --group 2
one_line "greedy's cap" 2 "max_live=1: a greedy schedule needs room" $P schedule --kind greedy --pp 2 --vpp 2 --mb 4 --max-live 1

# times with a fixed precision: 1F1B pp 4 mb 8, F 1 B 2: (mb + pp - 1) * 3 = 33
$P simulate --kind 1f1b --pp 4 --mb 8 | grep -q '^step time (makespan)  33\.000$' && ok || bad "simulate: 33.000"
$P search --pp 4 --mb 8 --kind 1f1b | grep -q '^best: 1f1b, step time 33\.000 (1f1b 33\.000: 1\.000x)$' && ok || bad "search: 33.000"

# --version: the header's version macros
v=$(sed -n 's/^#define PIPEPAR_VERSION_STRING "\(.*\)"$/\1/p' pipepar.h)
maj=$(sed -n 's/^#define PIPEPAR_VERSION_MAJOR \([0-9]*\)$/\1/p' pipepar.h)
min=$(sed -n 's/^#define PIPEPAR_VERSION_MINOR \([0-9]*\)$/\1/p' pipepar.h)
pat=$(sed -n 's/^#define PIPEPAR_VERSION_PATCH \([0-9]*\)$/\1/p' pipepar.h)
[ -n "$v" ] && [ "$v" = "$maj.$min.$pat" ] && [ "$($P --version)" = "pipepar $v" ] && head -n 1 pipepar.h | grep -q "v$v\$" &&
    ok || bad "--version: '$($P --version)', header '$v' ($maj.$min.$pat), first line '$(head -n 1 pipepar.h)'"
one_line "--version takes no arguments" 2 "--version: takes no arguments" $P --version x

finish
