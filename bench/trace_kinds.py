#!/usr/bin/env python3
"""trace_kinds.py: each rank's forward, input-gradient and weight-gradient time per block, from the
trace of mlp_gpu --trace (the last timed step), beside a reference such as a pipeline of one rank.

    python3 bench/trace_kinds.py TRACE.json LAYOUT [--ref F I W | --by-stage]

LAYOUT: the stages' blocks in stage order, as mlp_gpu --layout takes them ('Et|t|t|t*2|t*2|t*3|t*3|t*3L';
'Et*2|t*2|...' for even stages). The first stage (the input, and block 0 with no input gradient)
and the last (the loss) are left out, so that every action counted is whole blocks of one shape.
Per rank and kind: the median ms per block over its actions; with --ref (ms per block, e.g. from
a one-rank run's middle stages) also the ratio to it. --by-stage: instead, every stage's medians
(the first and last too), as for a pipeline of one rank. Exit 2 on a bad argument or file."""
import json
import re
import statistics
import sys


def fail(msg):
    print("trace_kinds: " + msg, file=sys.stderr)
    sys.exit(2)


def blocks_per_stage(layout, least):
    stages = []
    for piece in layout.split("|"):
        m = re.fullmatch(r"E?t(?:\*(\d+))?L?", piece)
        if not m:
            fail("LAYOUT=%s: stage '%s' is not t or t*N (E first, L last)" % (layout, piece))
        n = int(m.group(1) or 1)
        if n < 1:
            fail("LAYOUT=%s: stage '%s' holds no block" % (layout, piece))
        stages.append(n)
    if len(stages) < least:
        fail("LAYOUT=%s: needs %d stages or more (the first and last are left out)" % (layout, least))
    return stages


def main(argv):
    by_stage = len(argv) == 4 and argv[3] == "--by-stage"
    if not by_stage and (len(argv) not in (3, 7) or (len(argv) == 7 and argv[3] != "--ref")):
        fail("usage: trace_kinds.py TRACE.json LAYOUT [--ref F I W | --by-stage]")
    stages = blocks_per_stage(argv[2], 1 if by_stage else 3)
    ref = None
    if len(argv) == 7:
        try:
            ref = dict(zip("FIW", (float(v) for v in argv[4:7])))
        except ValueError:
            fail("--ref: F, I and W must be numbers (ms per block)")
        if min(ref.values()) <= 0:
            fail("--ref: F, I and W must be > 0")
    try:
        with open(argv[1]) as f:
            events = json.load(f)["traceEvents"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        fail("%s: not a trace of mlp_gpu --trace (%s)" % (argv[1], e))
    per = {}
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in ("F", "I", "W"):
            continue
        s = e["args"]["stage"]
        if s >= len(stages):
            fail("%s: an action of stage %d, where LAYOUT has %d stages" % (argv[1], s, len(stages)))
        if s in (0, len(stages) - 1) and not by_stage:
            continue
        per.setdefault(s if by_stage else e["pid"], {}).setdefault(e["cat"], []).append(e["dur"] / 1000.0 / stages[s])
    if not per:
        fail("%s: no action %s" % (argv[1], "in it" if by_stage else "outside the first and last stage"))
    if by_stage:
        print("  ".join("s%d%s %.3f" % (s, k, statistics.median(per[s][k])) for s in sorted(per) for k in "FIW"
                        if per[s].get(k)))
        return
    for rank in sorted(per):
        cols = []
        for kind in "FIW":
            v = per[rank].get(kind)
            if not v:
                continue
            med = statistics.median(v)
            cols.append("%s %.3f%s" % (kind, med, " (%+.1f%%)" % (100 * (med / ref[kind] - 1)) if ref else ""))
        print("rank %d: %s ms per block, %d actions" % (rank, "  ".join(cols), sum(len(v) for v in per[rank].values())))


if __name__ == "__main__":
    main(sys.argv)
