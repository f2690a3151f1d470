#!/bin/sh
# dualpipe_cli.sh — DeepSeek's bidirectional DualPipe end to end: the CLI draws, simulates and
# round-trips it, and the CPU example trains with it, its gradients (two weight copies of every
# model stage, summed) equal to the single-stage run's.
. "$(dirname "$0")/cli_lib.sh"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT

out=$($P schedule --kind dualpipe --pp 4 --mb 8) && case "$out" in
    *"dualpipe schedule, pp=4, vpp=2, mb=8: valid"*"rank3: 4F4 4F5 4F6 3F0 3I0 3W0 3F1"*) ok ;;
    *) bad "schedule --kind dualpipe: $out" ;; esac || bad "schedule --kind dualpipe failed"
$P schedule --kind dualpipe --pp 4 --mb 8 --format svg > "$T/dp.svg" && grep -q ">dualpipe, pp=4, vpp=2, mb=8: simulated bubble" "$T/dp.svg" &&
    grep -q "</svg>" "$T/dp.svg" && ok || bad "schedule --format svg"
# the CSV carries no placement; reading it back finds the two routes and proves the schedule
$P schedule --kind dualpipe --pp 4 --mb 8 --format csv --out "$T/dp.csv" &&
    $P schedule --from-csv "$T/dp.csv" | grep -q "valid" && ok || bad "csv round trip"
$P schedule --from-csv "$T/dp.csv" --format json | grep -q '"placement": "dual"' && ok || bad "csv -> json placement"
# simulate: F=1, I=1, W=0.5 per whole model stage: README bubble (pp/2-1)(F&B+B-3W) = 2.5
out=$($P simulate --kind dualpipe --pp 4 --mb 8 --f 1 --i 1 --w 0.5 --json) &&
    case "$out" in *'"peak_live": [5, 5, 5, 5]'*) ok ;; *) bad "simulate peak: $out" ;; esac || bad "simulate failed"
$P search --pp 4 --mb 8 --top 0 | grep -q " dualpipe " && ok || bad "search lists dualpipe"
expect_error 2 "pp=3: dualpipe needs an even pp" schedule --kind dualpipe --pp 3 --mb 6
expect_error 2 "mb=7: dualpipe needs an even mb" simulate --kind dualpipe --pp 4 --mb 7

# the CPU example: every step must match the single-stage run (mlp_threads exits 1 otherwise)
for cfg in "--pp 2 --mb 4" "--pp 4 --mb 8 --layers 8" "--pp 4 --mb 6"; do
    # shellcheck disable=SC2086
    if out=$(build/mlp_threads $cfg --schedule dualpipe --steps 3 --width 8 --hidden 16 --rows 2 2>&1); then
        n=$(printf '%s\n' "$out" | grep -c "^ *[0-9]   [0-9.]*   yes")
        [ "$n" -eq 3 ] && ok || bad "mlp_threads $cfg: $n of 3 steps match: $out"
    else
        bad "mlp_threads $cfg --schedule dualpipe: $out"
    fi
done
err=$(build/mlp_threads --pp 3 --schedule dualpipe 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] && case "$err" in *"even pp"*) ok ;; *) bad "mlp_threads pp=3: $err" ;; esac || bad "mlp_threads pp=3: exit $rc"
finish
