#!/usr/bin/env bash
# Packs the same long-tailed lengths with pipepar (C, tournament-tree first fit decreasing) and
# with first fit decreasing as NeMo RL writes it in Python, in one run, and checks that both give
# the same bins (same checksum) wherever both finish.
#
#     bash bench/pack.sh                       sizes 10k, 30k, 100k, 1M; Python gets 300 s a size
#     PYTHON_BUDGET=60 bash bench/pack.sh      a shorter budget for the Python run at 1M
#
# Prints the machine, the date and the commands, then one table (bench/RESULTS.md, 2.2, records
# the latest).
set -eu
cd "$(dirname "$0")/.."
BENCH_PACK=${BENCH_PACK:-build/bench_pack}
BUDGET=${PYTHON_BUDGET:-300}
SIZES=${SIZES:-10000 30000 100000 1000000}
[ "$BENCH_PACK" = build/bench_pack ] && make -s build/bench_pack
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "date:    $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "python:  $(python3 --version 2>&1)"
max=0; for n in $SIZES; do [ "$n" -gt "$max" ] && max=$n; done
"$BENCH_PACK" --n "$max" --repeat 1 --algo ffd --write-lengths "$tmp/lengths.txt" > /dev/null
echo
echo "C:      $BENCH_PACK --n N --algo ffd --repeat 5"
echo "Python: python3 bench/pack_python.py LENGTHS --sizes N --budget $BUDGET"
echo
printf '%-9s %8s %12s %12s %10s %8s %s\n' n bins c_wall_ms c_cpu_ms python_s speedup same_bins
for n in $SIZES; do
    c=$("$BENCH_PACK" --n "$n" --repeat 5 --algo ffd | tail -n 1)
    c_wall=$(echo "$c" | awk '{print $2}'); c_cpu=$(echo "$c" | awk '{print $3}')
    c_bins=$(echo "$c" | awk '{print $4}'); c_sum=$(echo "$c" | awk '{print $NF}')
    py=$(python3 bench/pack_python.py "$tmp/lengths.txt" --sizes "$n" --budget "$BUDGET" | tail -n 1)
    if echo "$py" | grep -q stopped; then
        py_s=$(echo "$py" | awk '{print $2}'); placed=$(echo "$py" | awk '{print $4}')
        printf '%-9s %8s %12s %12s %10s %8s %s\n' "$n" "$c_bins" "$c_wall" "$c_cpu" "$py_s" \
            "$(awk -v p="${py_s#>}" -v c="$c_wall" 'BEGIN{printf ">%.0fx", p*1000/c}')" "python stopped at $placed placed"
    else
        py_s=$(echo "$py" | awk '{print $2}'); py_sum=$(echo "$py" | awk '{print $NF}')
        same=no; [ "$py_sum" = "$c_sum" ] && same=yes
        printf '%-9s %8s %12s %12s %10s %8s %s\n' "$n" "$c_bins" "$c_wall" "$c_cpu" "$py_s" \
            "$(awk -v p="$py_s" -v c="$c_wall" 'BEGIN{printf "%.0fx", p*1000/c}')" "$same"
    fi
done
echo
echo "all algorithms at the largest size:"
"$BENCH_PACK" --n "$max" --repeat 5
