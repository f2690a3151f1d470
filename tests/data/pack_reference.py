#!/usr/bin/env python3
"""Reference packers for pipepar's tests, written the slow, obvious way.

Each function follows the behaviour of NeMo RL's nemo_rl/data/packing/algorithms.py (first fit
decreasing, first fit shuffle, modified first fit decreasing, concatenative, the bin-count
adjustment) or Megatron-LM's examples/multimodal/data_loading/knapsacks.py (greedy and balanced
greedy knapsack) step by step, scanning every bin like the originals, so the C packers in
pipepar.h >>pack can be checked against outcomes computed the same way the Python computes them.
best_fit_decreasing has no NeMo RL original; it is the textbook rule on first fit decreasing's
order: the bin with the least room that still fits, the earliest bin on ties.

    python3 tests/data/pack_reference.py > tests/data/pack_vectors.txt

writes the vectors that tests/test_pack.c reads.
"""
import random
import sys


def decreasing_pairs(lengths):
    # Python's sort of (length, index) tuples with reverse=True: longer first, higher index first.
    return sorted(((l, i) for i, l in enumerate(lengths)), reverse=True)


def first_fit(pairs, capacity, max_seqs):
    bins, room = [], []
    for length, i in pairs:
        for b in range(len(bins)):
            if room[b] >= length and (max_seqs is None or len(bins[b]) < max_seqs):
                bins[b].append(i)
                room[b] -= length
                break
        else:
            bins.append([i])
            room.append(capacity - length)
    return bins


def best_fit(pairs, capacity, max_seqs):
    bins, room = [], []
    for length, i in pairs:
        best = None
        for b in range(len(bins)):
            if room[b] >= length and (max_seqs is None or len(bins[b]) < max_seqs):
                if best is None or room[b] < room[best]:
                    best = b
        if best is None:
            bins.append([i])
            room.append(capacity - length)
        else:
            bins[best].append(i)
            room[best] -= length
    return bins


def first_fit_shuffle(lengths, capacity, max_seqs, seed):
    pairs = [(l, i) for i, l in enumerate(lengths)]
    random.seed(seed)
    random.shuffle(pairs)
    return first_fit(pairs, capacity, max_seqs)


def concatenative(lengths, capacity, max_seqs):
    bins, current, used = [], [], 0
    for i, length in enumerate(lengths):
        full = max_seqs is not None and len(current) >= max_seqs
        if used + length > capacity or full:
            if current:
                bins.append(current)
            current, used = [i], length
        else:
            current.append(i)
            used += length
    if current:
        bins.append(current)
    return bins


def mffd(lengths, capacity, max_seqs):
    if max_seqs is not None:
        return first_fit(decreasing_pairs(lengths), capacity, max_seqs)
    large, medium, small, tiny = [], [], [], []
    for i, size in enumerate(lengths):
        if size > capacity / 2:
            large.append((i, size))
        elif size > capacity / 3:
            medium.append((i, size))
        elif size > capacity / 6:
            small.append((i, size))
        else:
            tiny.append((i, size))
    large.sort(key=lambda x: x[1], reverse=True)
    medium.sort(key=lambda x: x[1], reverse=True)
    small.sort(key=lambda x: x[1])
    tiny.sort(key=lambda x: x[1])
    bins = [[item] for item in large]
    for b in bins:                                   # one medium per large bin
        room = capacity - sum(s for _, s in b)
        for k, (_, size) in enumerate(medium):
            if size <= room:
                b.append(medium.pop(k))
                break
    for b in reversed(bins):                         # two smalls where there is no medium
        if any(capacity / 3 < s <= capacity / 2 for _, s in b) or len(small) < 2:
            continue
        room = capacity - sum(s for _, s in b)
        if small[0][1] + small[1][1] > room:
            continue
        first = small.pop(0)
        second = None
        for j in range(len(small) - 1, -1, -1):
            if small[j][1] <= room - first[1]:
                second = j
                break
        if second is not None:
            b.extend([first, small.pop(second)])
    rest = sorted(medium + small + tiny, key=lambda x: x[1], reverse=True)
    for b in bins:                                   # largest remaining that fits, repeatedly
        while rest:
            room = capacity - sum(s for _, s in b)
            if room < rest[-1][1]:
                break
            pick = None
            for k, (_, size) in enumerate(rest):
                if size <= room:
                    pick = k
                    break
            if pick is None:
                break
            b.append(rest.pop(pick))
    leftover_bins, loads = [[]], [0]                 # NeMo RL's sorted-by-load leftover phase
    for i, size in sorted(rest, key=lambda x: x[1], reverse=True):
        if size <= capacity - loads[0]:
            b, load = leftover_bins.pop(0), loads.pop(0)
        else:
            b, load = [], 0
        b.append((i, size))
        load += size
        k = 0
        while k < len(loads) and loads[k] <= load:   # bisect_right
            k += 1
        leftover_bins.insert(k, b)
        loads.insert(k, load)
    bins.extend(leftover_bins)
    return [[i for i, _ in b] for b in bins if b]


def greedy_knapsack(lengths, capacity, max_seqs):
    items = sorted(((l, i) for i, l in enumerate(lengths)), key=lambda x: x[0])
    bins = []
    while items:
        b, room = [], capacity
        while True:
            pick = -1
            for k, (l, _) in enumerate(items):       # last item with length <= room
                if l <= room:
                    pick = k
            if pick < 0:
                break
            l, i = items.pop(pick)
            room -= l
            b.append(i)
            if max_seqs is not None and len(b) >= max_seqs:
                break
        bins.append(b)
    return bins


def balanced_greedy_knapsack(lengths, capacity, max_seqs, delta):
    items = sorted(((l, i) for i, l in enumerate(lengths)), key=lambda x: x[0], reverse=True)
    count = -(-sum(lengths) // capacity) + delta
    bins, loads = [[] for _ in range(count)], [0] * count
    for l, i in items:
        open_bins = [b for b in range(len(bins)) if max_seqs is None or len(bins[b]) < max_seqs]
        best = None
        for b in open_bins:                           # least filled, earliest on ties
            if best is None or loads[b] < loads[best]:
                best = b
        if best is None or loads[best] + l > capacity:
            bins.append([])
            loads.append(0)
            best = len(bins) - 1
        bins[best].append(i)
        loads[best] += l
    return [b for b in bins if b]


def adjust_bin_count(bins, min_bins, multiple):
    target = len(bins)
    if min_bins:
        target = max(target, min_bins)
    if multiple and target % multiple:
        target += multiple - target % multiple
    if target == len(bins):
        return bins
    total = sum(len(b) for b in bins)
    if total < target:
        raise ValueError("too few sequences")
    out = [list(b) for b in bins] + [[] for _ in range(target - len(bins))]
    sizes = sorted(((len(b), k) for k, b in enumerate(bins)), reverse=True)
    src = 0
    for new in range(len(bins), target):
        while len(out[sizes[src][1]]) <= 1:
            src += 1
        out[new].append(out[sizes[src][1]].pop())
    return out


def pack(algo, lengths, capacity, min_bins=0, multiple=0, max_seqs=None, seed=0, delta=0):
    if algo == "first_fit_decreasing":
        bins = first_fit(decreasing_pairs(lengths), capacity, max_seqs)
    elif algo == "best_fit_decreasing":
        bins = best_fit(decreasing_pairs(lengths), capacity, max_seqs)
    elif algo == "first_fit_shuffle":
        bins = first_fit_shuffle(lengths, capacity, max_seqs, seed)
    elif algo == "modified_first_fit_decreasing":
        bins = mffd(lengths, capacity, max_seqs)
    elif algo == "concatenative":
        bins = concatenative(lengths, capacity, max_seqs)
    elif algo == "greedy_knapsack":
        bins = greedy_knapsack(lengths, capacity, max_seqs)
    elif algo == "balanced_greedy_knapsack":
        d = 20 if delta == 0 else max(delta, 0)
        bins = balanced_greedy_knapsack(lengths, capacity, max_seqs, d)
    else:
        raise ValueError(algo)
    return adjust_bin_count(bins, min_bins, multiple)


ALGOS = ["first_fit_decreasing", "best_fit_decreasing", "first_fit_shuffle",
         "modified_first_fit_decreasing", "concatenative", "greedy_knapsack", "balanced_greedy_knapsack"]


def main():
    rng = random.Random(20260501)
    out = sys.stdout
    out.write("# generated by tests/data/pack_reference.py: case, its parameters, lengths, expected bins\n")
    case = 0

    def emit(algo, lengths, capacity, min_bins=0, multiple=0, max_seqs=None, seed=0, delta=0):
        nonlocal case
        try:
            bins = pack(algo, lengths, capacity, min_bins, multiple, max_seqs, seed, delta)
        except ValueError:
            bins = None
        out.write("case %d %s capacity=%d min=%d multiple=%d maxseq=%d seed=%d delta=%d\n" % (
            case, algo, capacity, min_bins, multiple, max_seqs or 0, seed, delta))
        out.write("lengths" + "".join(" %d" % l for l in lengths) + "\n")
        if bins is None:
            out.write("error\n")
        else:
            for b in bins:
                out.write("bin" + "".join(" %d" % i for i in b) + "\n")
        out.write("end\n")
        case += 1

    # Hand-made inputs with many ties (tie order is where implementations differ).
    emit("concatenative", [4, 1, 3, 2, 1, 3, 4, 5], 5)     # NeMo RL's docstring example
    emit("concatenative", [4, 1, 3, 2, 1, 3, 4, 5], 8)
    for algo in ALGOS:
        emit(algo, [5, 5, 5, 5, 3, 3, 3, 2, 2, 2, 2, 1], 10)
        emit(algo, [6, 6, 4, 4, 4, 3, 3, 2, 2, 1, 1, 1], 12, min_bins=8)
        emit(algo, [7, 7, 7, 7, 7, 7], 10, multiple=4)
        emit(algo, [3, 3], 10, min_bins=3)                   # too few sequences
    for trial in range(24):
        algo = ALGOS[trial % len(ALGOS)]
        n = rng.choice([1, 2, 5, 17, 40, 120])
        capacity = rng.choice([7, 16, 60, 100, 4096])
        kind = trial % 3
        if kind == 0:
            lengths = [rng.randint(1, capacity) for _ in range(n)]
        elif kind == 1:
            lengths = [rng.choice([1, capacity // 7 + 1, capacity // 3, capacity // 2, capacity]) or 1
                       for _ in range(n)]
        else:
            lengths = [max(1, min(capacity, int(capacity / 20 / (1 - rng.random()) ** 0.8))) for _ in range(n)]
        min_bins = rng.choice([0, 0, 3, n // 2])
        multiple = rng.choice([0, 0, 2, 4])
        max_seqs = rng.choice([None, None, None, 1, 3])
        seed = rng.randrange(0, 1 << 40) if algo == "first_fit_shuffle" else 0
        delta = rng.choice([0, 0, 1, 5, -1]) if algo == "balanced_greedy_knapsack" else 0
        emit(algo, lengths, capacity, min_bins, multiple, max_seqs, seed, delta)
    # MFFD exercised across its phases: every size class present.
    for trial in range(6):
        capacity = 600
        lengths = [rng.choice([rng.randint(301, 600), rng.randint(201, 300), rng.randint(101, 200),
                               rng.randint(1, 100)]) for _ in range(rng.choice([30, 80, 150]))]
        emit("modified_first_fit_decreasing", lengths, capacity)
    # Shuffle with seeds 0 and 2^32 + 5 (one and two 32-bit key words).
    emit("first_fit_shuffle", [rng.randint(1, 50) for _ in range(60)], 64, seed=0)
    emit("first_fit_shuffle", [rng.randint(1, 50) for _ in range(60)], 64, seed=(1 << 32) + 5)


if __name__ == "__main__":
    main()
