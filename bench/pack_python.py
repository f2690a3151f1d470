#!/usr/bin/env python3
"""The baseline bench/pack.c is compared with: first fit decreasing the way NeMo RL's
FirstFitDecreasingPacker does it in Python (nemo_rl/data/packing/algorithms.py): sort the
(length, index) pairs longest first, then put each sequence into the first open bin with room,
scanning the bins from the first. Plain Python, no numpy.

    python3 bench/pack_python.py LENGTHS_FILE --capacity 65536 --sizes 10000,30000,100000 --budget 120

LENGTHS_FILE holds one length a line (build/bench_pack --write-lengths FILE writes the bench's).
For each size n the first n lengths are packed and the time printed with the bin count and the
checksum bench/pack.c prints (the same bins give the same checksum). A size that has not
finished after --budget seconds is stopped and reported with how far it got.
"""
import argparse
import sys
import time


def first_fit_decreasing(lengths, capacity, deadline):
    pairs = [(length, i) for i, length in enumerate(lengths)]
    pairs.sort(reverse=True)
    bins, remaining = [], []
    for done, (length, i) in enumerate(pairs):
        if done % 1024 == 0 and time.perf_counter() > deadline:
            return bins, done
        for b, room in enumerate(remaining):
            if room >= length:
                bins[b].append(i)
                remaining[b] -= length
                break
        else:
            bins.append([i])
            remaining.append(capacity - length)
    return bins, len(pairs)


def checksum(bins):
    h, mask, prime = 1469598103934665603, (1 << 64) - 1, 1099511628211
    for b in bins:
        for i in b:
            h = ((h ^ (i + 1)) * prime) & mask
        h = (h * prime) & mask
    return h


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("lengths")
    ap.add_argument("--capacity", type=int, default=65536)
    ap.add_argument("--sizes", default="10000,30000,100000,1000000")
    ap.add_argument("--budget", type=float, default=120.0, help="seconds allowed per size")
    args = ap.parse_args()
    with open(args.lengths) as f:
        lengths = [int(line) for line in f if line.strip()]
    print("pack_python: first fit decreasing as NeMo RL writes it, CPython %s, one core" % sys.version.split()[0])
    print("%-9s %12s %8s %10s  %s" % ("n", "seconds", "bins", "placed", "checksum"))
    for n in [int(x) for x in args.sizes.split(",")]:
        if n > len(lengths):
            print("%-9d skipped: only %d lengths in %s" % (n, len(lengths), args.lengths))
            continue
        t0 = time.perf_counter()
        bins, placed = first_fit_decreasing(lengths[:n], args.capacity, t0 + args.budget)
        dt = time.perf_counter() - t0
        if placed < n:
            print("%-9d %12s %8s %9.1f%%  stopped after the %.0f s budget (%d of %d sequences placed)" % (
                n, ">%.1f" % dt, "-", 100.0 * placed / n, args.budget, placed, n))
        else:
            print("%-9d %12.3f %8d %9.1f%%  %016x" % (n, dt, len(bins), 100.0, checksum(bins)))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
