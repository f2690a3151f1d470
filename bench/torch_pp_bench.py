# Anchor measurement: PyTorch's own pipeline schedules (torch.distributed.pipelining) on a
# residual-MLP stack, plus raw NCCL send/recv bandwidth through torch.distributed.
# Run: python3 -m torch.distributed.run --nproc_per_node=2 bench/torch_pp_bench.py
# (pipepar's copy of ../shared/bench/torch_pp_bench.py; one addition: GELU=tanh selects
#  gelu(approximate="tanh"), the GELU of cuBLASLt's epilogue that examples/mlp_gpu.cu uses, so
#  both sides time the same model; unset, PyTorch's exact erf GELU as in the original; and
#  CONFIGS=Name:v,... runs a subset of the schedules, CONFIGS=none none of them; and on one GPU
#  (--nproc_per_node=1) only the single-GPU step runs, for bench/gpu_single.sh; and PIPEPAR_CSVS=name=path,...
#  times pipepar's plans, written with --format torch-compute-comms, in PyTorch's own runtime.)
import os, sys, time, statistics, traceback
import torch, torch.nn as nn, torch.nn.functional as Fn, torch.distributed as dist
from torch.distributed.pipelining import PipelineStage
import torch.distributed.pipelining.schedules as S

H = int(os.environ.get("H", 4096)); L = int(os.environ.get("L", 16))
T = int(os.environ.get("T", 8192)); M = int(os.environ.get("M", 8))
STEPS = int(os.environ.get("STEPS", 5)); WARM = 2
GELU = os.environ.get("GELU", "none")

class Block(nn.Module):
    def __init__(s):
        super().__init__(); s.l1 = nn.Linear(H, 4 * H, bias=False); s.l2 = nn.Linear(4 * H, H, bias=False)
    def forward(s, x):
        return x + s.l2(Fn.gelu(s.l1(x), approximate=GELU))

def make_blocks(idx):
    out = []
    for i in idx:
        torch.manual_seed(1000 + i)
        out.append(Block())
    return nn.Sequential(*out).to(dev, torch.bfloat16)

def loss_fn(o, t):
    return Fn.mse_loss(o, t)

def timed(fn):
    ts = []
    for i in range(WARM + STEPS):
        torch.cuda.synchronize(); dist.barrier(); t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize(); dist.barrier(); t1 = time.perf_counter()
        if i >= WARM: ts.append(t1 - t0)
    return statistics.median(ts), min(ts)

dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank))); torch.cuda.set_device(dev)
g = torch.Generator(device=dev).manual_seed(7)
x = torch.randn(M * T, H, device=dev, dtype=torch.bfloat16, generator=g)
y = torch.randn(M * T, H, device=dev, dtype=torch.bfloat16, generator=g)
flop_step = 3 * 2 * (2 * T * H * 4 * H) * L * M  # fwd+bwd(2x) matmul flops, whole model
if rank == 0:
    print(f"torch {torch.__version__} nccl {torch.cuda.nccl.version()} dev {torch.cuda.get_device_name()} H={H} L={L} T={T} M={M} world={world} gelu={GELU}", flush=True)

# P2P bandwidth (pipepar addition: skipped on one GPU, where there is no peer)
for nbytes in ([1 << 20, 16 << 20, 64 << 20, 256 << 20] if world > 1 else []):
    buf = torch.empty(nbytes // 2, device=dev, dtype=torch.bfloat16).normal_()
    rbuf = torch.empty_like(buf)
    def uni():
        for _ in range(10):
            if rank == 0: dist.send(buf, 1)
            elif rank == 1: dist.recv(rbuf, 0)
    def bi():
        for _ in range(10):
            ops = [dist.P2POp(dist.isend, buf, (rank + 1) % world), dist.P2POp(dist.irecv, rbuf, (rank - 1) % world)]
            for r in dist.batch_isend_irecv(ops): r.wait()
    med, _ = timed(uni); medb, _ = timed(bi)
    if rank == 0:
        print(f"p2p {nbytes>>20:4d} MiB  uni {10*nbytes/med/1e9:7.1f} GB/s   bidir(per dir) {10*nbytes/medb/1e9:7.1f} GB/s", flush=True)

# single-GPU reference: whole model on rank 0, same microbatches
if rank == 0:
    full = make_blocks(range(L))
def single():
    if rank != 0: return
    for i in range(M):
        o = full(x[i * T:(i + 1) * T]); loss_fn(o, y[i * T:(i + 1) * T]).backward()
    full.zero_grad(set_to_none=True)
torch.cuda.reset_peak_memory_stats()
med1, _ = timed(single)
if rank == 0:
    print(f"single-gpu       step {med1*1e3:8.1f} ms  {flop_step/med1/1e12:6.1f} TFLOP/s  ideal pp{world} {med1/world*1e3:8.1f} ms"
          f"  peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB", flush=True)   # pipepar addition: the peak
    del full; torch.cuda.empty_cache()

def placement(name, v):
    n = world * v
    if name in ("ZBVZeroBubble", "DualPipeV"):
        return [rank, 2 * world - 1 - rank], n
    return [rank + k * world for k in range(v)], n

configs = [("GPipe", 1), ("1F1B", 1), ("Interleaved1F1B", 2), ("Interleaved1F1B", 4), ("LoopedBFS", 2),
           ("InterleavedZeroBubble", 2), ("ZBVZeroBubble", 2), ("DualPipeV", 2)]
if os.environ.get("CONFIGS"):   # pipepar addition: e.g. CONFIGS=GPipe:1,1F1B:1,ZBVZeroBubble:2
    want = [(c.split(":")[0], int(c.split(":")[1])) for c in os.environ["CONFIGS"].split(",") if ":" in c]
    configs = [c for c in configs if c in want]
if world < 2:   # pipepar addition: one GPU times the single-GPU step alone
    configs = []

def csv_stages(path):
    """A pipepar CSV for PyTorch (pipepar schedule --format torch-compute-comms): the number of
    stages, and the stages each rank's row computes."""
    holder, top = {}, -1
    for r, row in enumerate(open(path).read().splitlines()):
        for cell in row.split(","):
            a = S._Action.from_str(cell)
            for b in (a.sub_actions or (a,)) if a is not None else ():
                top = max(top, b.stage_index)
                if b.computation_type in (S.F, S.B, S.I, S.W):
                    holder.setdefault(b.stage_index, r)
    return top + 1, sorted(i for i in range(top + 1) if holder.get(i) == rank)

# pipepar addition: PIPEPAR_CSVS=name=path,... times pipepar's plans inside PyTorch's own runtime
# (_PipelineScheduleRuntime._load_csv, format compute_comms) next to PyTorch's schedules
for item in [c for c in os.environ.get("PIPEPAR_CSVS", "").split(",") if "=" in c]:
    label, path = item.split("=", 1)
    configs.append(("csv:" + label, path))
for name, v in configs:
    if name.startswith("csv:"):
        try:
            n, sidx = csv_stages(v)
            per = L // n
            stages = [PipelineStage(make_blocks(range(s * per, (s + 1) * per)), s, n, dev) for s in sidx]
            sch = S._PipelineScheduleRuntime(stages, M, loss_fn=loss_fn)
            sch._load_csv(v, format="compute_comms")
            has_first = 0 in sidx; has_last = (n - 1) in sidx
            def step():
                sch.step(*((x,) if has_first else ()), **({"target": y, "losses": []} if has_last else {}))
                for st in stages: st.submod.zero_grad(set_to_none=True)
            torch.cuda.reset_peak_memory_stats()
            med, mn = timed(step)
            pk = torch.tensor([torch.cuda.max_memory_allocated() / 2**30], device=dev)
            dist.all_reduce(pk, op=dist.ReduceOp.MAX)
            if rank == 0:
                print(f"pipepar plan in PyTorch: {name[4:]:14s} n={n} step {med*1e3:8.1f} ms (min {mn*1e3:7.1f})  "
                      f"{flop_step/med/1e12/world:6.1f} TFLOP/s/gpu  eff {med1/world/med*100:5.1f}%  peak {pk.item():5.1f} GiB",
                      flush=True)
            del sch, stages; torch.cuda.empty_cache()
        except Exception as e:
            if rank == 0: print(f"pipepar plan in PyTorch: {name[4:]} FAILED: {type(e).__name__}: {str(e)[:300]}", flush=True)
            torch.cuda.empty_cache()
        continue
    try:
        cls = getattr(S, "Schedule" + name)
        sidx, n = placement(name, v)
        per = L // n
        stages = [PipelineStage(make_blocks(range(s * per, (s + 1) * per)), s, n, dev) for s in sidx]
        sch = cls(stages[0] if v == 1 else stages, n_microbatches=M, loss_fn=loss_fn)
        has_first = 0 in sidx; has_last = (n - 1) in sidx
        def step():
            args = (x,) if has_first else ()
            kw = {}
            if has_last: kw = {"target": y, "losses": []}
            sch.step(*args, **kw)
            for st in stages: st.submod.zero_grad(set_to_none=True)
        torch.cuda.reset_peak_memory_stats()
        med, mn = timed(step)
        peak = torch.cuda.max_memory_allocated() / 2**30
        pk = torch.tensor([peak], device=dev); dist.all_reduce(pk, op=dist.ReduceOp.MAX)
        if rank == 0:
            print(f"{name:22s} v={v} step {med*1e3:8.1f} ms (min {mn*1e3:7.1f})  {flop_step/med/1e12/world:6.1f} TFLOP/s/gpu  eff {med1/world/med*100:5.1f}%  peak {pk.item():5.1f} GiB", flush=True)
        del sch, stages; torch.cuda.empty_cache()
    except Exception as e:
        if rank == 0:
            print(f"{name:22s} v={v} FAILED: {type(e).__name__}: {str(e)[:300]}", flush=True)
        torch.cuda.empty_cache()
dist.barrier()
dist.destroy_process_group()
