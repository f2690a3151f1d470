"""pipepar plans, PyTorch runs: every schedule pipepar writes for PyTorch loads into PyTorch's own
pipeline runtime (torch.distributed.pipelining.schedules._PipelineScheduleRuntime) in both of its
CSV formats and trains one step with the gradients of one process.

    python3 tests/torch_interop.py [--pipepar build/pipepar] [--pp 2,4] [--kinds 1f1b,zbv] [--backend nccl]

For each pp and each kind (plus the search's winners, read back through pipepar's own CSV), the
pipepar CLI writes `--format torch-compute-only` and `--format torch-compute-comms`; pp processes
(gloo on this machine's CPU; with --backend nccl, one GPU each) load each file with
sched._load_csv(path, format=...) and run sched.step() on a small residual MLP, one stage module
per virtual stage. Every parameter's gradient is compared with the same model run in one process
on the same microbatches (the mean of the microbatch losses, as PyTorch's scale_grads=True
gives): max |g - g_ref| / max |g_ref| per tensor must stay below 1e-5 (float32; the two runs may
differ in summation order). A control case, a compute_comms file stripped of its REDUCE_GRAD
cells, must differ by exactly mb - 1 (the runtime then leaves the gradients summed over the
microbatches): the comparison can fail. Prints one line per case and ends with
"N passed, N failed"; exits 1 on a failure. It downloads nothing.
"""
import argparse
import datetime
import os
import subprocess
import sys
import tempfile
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining import schedules as S

HIDDEN, ROWS = 16, 4          # features, rows per microbatch
TOLERANCE = 1e-5              # relative, per gradient tensor
TIMEOUT_S = 60                # a case that hangs fails after this, instead of hanging the test

# kind, extra flags, microbatches at pp (a function of pp)
KINDS = [
    ("1f1b", [], lambda pp: 2 * pp),
    ("gpipe", [], lambda pp: 2 * pp),
    ("interleaved", ["--vpp", "2"], lambda pp: 2 * pp),
    ("interleaved-zb", ["--vpp", "2"], lambda pp: 2 * pp),
    ("zb-h1", [], lambda pp: 2 * pp),
    ("zbv", [], lambda pp: 2 * pp),
    ("dualpipev", [], lambda pp: 2 * pp),
    ("search", ["--kind", "greedy"], lambda pp: 2 * pp),                # the greedy search's winner
    ("search-v", ["--kind", "greedy", "--vpp", "2"], lambda pp: 2 * pp),  # its V-shaped winner
]
FORMATS = ["compute_only", "compute_comms"]


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(HIDDEN, HIDDEN)
        self.l2 = nn.Linear(HIDDEN, HIDDEN)

    def forward(self, x):
        return x + self.l2(torch.tanh(self.l1(x)))


def loss_fn(out, target):
    return ((out - target) ** 2).mean()


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()}")
    return p.stdout


def write_case(pipepar, kind, flags, pp, mb, d):
    """Writes d/<kind>.<format>.csv for both formats; returns the file names."""
    if kind.startswith("search"):
        # the search's winner is written in pipepar's own CSV; pipepar reads it back and writes it for
        # PyTorch, as a user who keeps the winner would
        plan = os.path.join(d, f"{kind}.pipepar.csv")
        run([pipepar, "search", "--pp", str(pp), "--mb", str(mb), "--csv", plan] + flags)
        source = ["--from-csv", plan]
    else:
        source = ["--kind", kind, "--pp", str(pp), "--mb", str(mb)] + flags
    names = {}
    for fmt in FORMATS:
        path = os.path.join(d, f"{kind}.{fmt}.csv")
        run([pipepar, "schedule"] + source + ["--format", "torch-" + fmt.replace("_", "-"), "--out", path])
        names[fmt] = path
    return names


def num_stages_of(path):
    top = -1
    for row in open(path).read().splitlines():
        for cell in row.split(","):
            a = S._Action.from_str(cell)
            if a is None:
                continue
            for b in a.sub_actions or (a,):
                top = max(top, b.stage_index)
    return top + 1


def one_case(rank, path, fmt, mb, device):
    """Runs path in PyTorch's runtime on this rank; returns the worst relative gradient error."""
    n = num_stages_of(path)
    torch.manual_seed(0)
    model = nn.ModuleList([Block() for _ in range(n)]).to(device)
    x = torch.randn(mb * ROWS, HIDDEN).to(device)
    y = torch.randn(mb * ROWS, HIDDEN).to(device)

    # the reference: one process, the mean of the microbatch losses
    for m in range(mb):
        h = x[m * ROWS:(m + 1) * ROWS]
        for block in model:
            h = block(h)
        (loss_fn(h, y[m * ROWS:(m + 1) * ROWS]) / mb).backward()
    want = {i: [p.grad.clone() for p in model[i].parameters()] for i in range(n)}
    model.zero_grad(set_to_none=True)

    # the stages this rank holds, as the file places them (the runtime reads the same map from it)
    holder = {}
    for r, row in enumerate(open(path).read().splitlines()):
        for cell in row.split(","):
            a = S._Action.from_str(cell)
            for b in (a.sub_actions or (a,)) if a is not None else ():
                if b.computation_type in (S.F, S.B, S.I, S.W):
                    holder.setdefault(b.stage_index, r)
    mine = sorted(i for i in range(n) if holder[i] == rank)
    stages = [PipelineStage(model[i], i, n, device) for i in mine]
    sched = S._PipelineScheduleRuntime(stages, mb, loss_fn=loss_fn)
    sched._load_csv(path, format=fmt)
    args = (x,) if holder[0] == rank else ()
    kwargs = {"target": y, "losses": []} if holder[n - 1] == rank else {}
    sched.step(*args, **kwargs)

    worst = 0.0
    for i in mine:
        for p, g in zip(model[i].parameters(), want[i]):
            if p.grad is None:
                return float("inf")
            worst = max(worst, ((p.grad - g).abs().max() / g.abs().max().clamp_min(1e-30)).item())
    return worst


def skip_self_sends_at_init():
    """PyTorch 2.11 opens each stage's links before the first step with a send and a receive to the
    neighbouring stages' ranks (_PipelineStageBase._get_init_p2p_neighbors_ops), one to its own rank
    too where two neighbouring stages share a rank, as in every V placement. NCCL takes a send to
    oneself; gloo refuses it ("Pair is not connected"), so PyTorch's own ScheduleZBVZeroBubble fails
    the same way on gloo. On gloo we leave those out: a rank needs no link to itself, and the
    runtime passes same-rank neighbours' tensors in place."""
    from torch.distributed.pipelining import stage as stage_module
    base = stage_module._PipelineStageBase
    original = base._get_init_p2p_neighbors_ops

    def ops(self):
        return [op for op in original(self) if op.group_peer != self.group_rank]
    base._get_init_p2p_neighbors_ops = ops


def worker(rank, world, d, cases, verbose, backend):
    """One rank: runs the cases in order; writes d/<case>.<rank> with the error or the exception.
    Stops at the first failure: a rank that failed may leave transfers posted that would feed the
    next case, so the launcher starts fresh processes for the cases after it."""
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method="file://" + os.path.join(d, "rendezvous"), rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=TIMEOUT_S))
    if backend == "gloo":
        skip_self_sends_at_init()
    try:
        for case in cases:
            try:
                result = f"{one_case(rank, case.path, case.fmt, case.mb, device):.6e}"
            except Exception as e:  # noqa: BLE001 (reported, then the processes stop)
                result = f"error {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
                if verbose:
                    traceback.print_exc()
            with open(os.path.join(d, f"{case.name}.{rank}"), "w") as f:
                f.write(result)
            if result.startswith("error"):
                return
            dist.barrier()
    finally:
        dist.destroy_process_group()


class Case:
    def __init__(self, pp, kind, fmt, path, mb, control=False):
        self.name = f"pp{pp}.{kind}.{fmt}" + (".control" if control else "")
        self.pp, self.kind, self.fmt, self.path, self.mb = pp, kind, fmt, path, mb
        self.control = control   # must differ from one process, by the factor mb
        self.error, self.worst = "not run", None


def launch(world, d, cases, verbose, backend):
    """Runs the cases on world processes; sets each case's error (None when it ran) and worst."""
    todo = list(cases)
    while todo:
        run_dir = tempfile.mkdtemp(dir=d)
        try:
            mp.start_processes(worker, args=(world, run_dir, todo, verbose, backend), nprocs=world, start_method="spawn")
        except Exception:  # noqa: BLE001 (a rank died: its case is read below)
            pass
        done = 0
        for case in todo:
            got = []
            for r in range(world):
                p = os.path.join(run_dir, f"{case.name}.{r}")
                got.append(open(p).read() if os.path.exists(p) else "error: did not finish (another rank failed)")
            done += 1
            errors = [g for g in got if g.startswith("error")]
            if errors:   # the first cause, not a peer's "connection closed" that followed it
                case.error = min(errors, key=lambda g: ("did not finish" in g, "onnection" in g))
                break
            case.error, case.worst = None, max(float(g) for g in got)
        todo = todo[done:]


def verdict(case):
    """(passed, the line to print) for a case that launch ran."""
    label = f"pp={case.pp} mb={case.mb} {case.kind:15s} {case.fmt:14s}"
    if case.error is not None:
        return False, f"FAIL {label} {case.error}"
    if case.control:
        ok = abs(case.worst - (case.mb - 1)) < 1e-3
        return ok, (f"{'ok  ' if ok else 'FAIL'} {label} control without REDUCE_GRAD: worst relative error "
                    f"{case.worst:.3g} (must be mb - 1 = {case.mb - 1})")
    ok = case.worst < TOLERANCE
    return ok, f"{'ok  ' if ok else 'FAIL'} {label} worst relative gradient error {case.worst:.1e}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pipepar", default="build/pipepar")
    ap.add_argument("--pp", default="2,4", help="pipeline sizes to run, comma-separated (default 2,4)")
    ap.add_argument("--kinds", default=",".join(k for k, _, _ in KINDS), help="kinds to run, comma-separated")
    ap.add_argument("--verbose", action="store_true", help="print each failing rank's traceback")
    ap.add_argument("--backend", default="gloo", choices=["gloo", "nccl"],
                    help="gloo: processes on this CPU (default); nccl: one GPU per process, pp GPUs")
    opt = ap.parse_args()
    kinds = [k for k in KINDS if k[0] in opt.kinds.split(",")]
    where = "gloo on CPU" if opt.backend == "gloo" else "nccl, one GPU per rank"
    print(f"torch {torch.__version__}: pipepar's CSVs in _PipelineScheduleRuntime, {where}, "
          f"gradients against one process (relative tolerance {TOLERANCE:g})", flush=True)
    passed = failed = 0
    with tempfile.TemporaryDirectory() as d:
        for pp in (int(v) for v in opt.pp.split(",")):
            cases = []
            for kind, flags, mb_of in kinds:
                mb = mb_of(pp)
                try:
                    names = write_case(opt.pipepar, kind, flags, pp, mb, d)
                except RuntimeError as e:
                    print(f"FAIL pp={pp} {kind}: pipepar could not write it: {e}")
                    failed += len(FORMATS)
                    continue
                cases += [Case(pp, kind, fmt, names[fmt], mb) for fmt in FORMATS]
                if kind == kinds[0][0]:
                    # the control: without its REDUCE_GRAD cells the runtime leaves the gradients
                    # summed over the microbatches, mb times too large; the comparison must see it
                    control = os.path.join(d, f"{kind}.no-reduce-grad.csv")
                    with open(control, "w") as f:
                        for row in open(names["compute_comms"]).read().splitlines():
                            f.write(",".join(c for c in row.split(",") if "REDUCE_GRAD" not in c) + "\n")
                    cases.append(Case(pp, kind, "compute_comms", control, mb, control=True))
            launch(pp, d, cases, opt.verbose, opt.backend)
            for case in cases:
                ok, line = verdict(case)
                passed += ok
                failed += not ok
                print(line, flush=True)
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
