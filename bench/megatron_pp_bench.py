# pipepar's copy of the project's Megatron-LM driver (../shared/bench/megatron_pp_bench.py), carried to
# the device with the repo; bench/gpu_pipeline.sh runs it beside PyTorch when .megatron/megatron/core exists.
# Megatron-LM's own pipeline schedules (megatron.core.pipeline_parallel.schedules) on the model of
# torch_pp_bench.py: residual MLP blocks x + W2 gelu(W1 x), bf16, H, L blocks, T tokens/microbatch,
# M microbatches. Run with PYTHONPATH holding megatron/core:
#   torchrun --nproc_per_node=P megatron_pp_bench.py   (PYTHONPATH: a folder holding megatron/core)
# Env: H, L, T, M, CONFIGS (e.g. "1:0,2:0,2:1,4:0,4:1" = vpp:overlap_p2p), STEPS, WARMUP.
import os, time, statistics
import torch, torch.nn as nn, torch.nn.functional as Fn, torch.distributed as dist
from megatron.core import parallel_state as ps
from megatron.core.model_parallel_config import ModelParallelConfig
from megatron.core.pipeline_parallel import get_forward_backward_func
from megatron.core.enums import ModelType
import megatron.core.package_info as pi

H = int(os.environ.get("H", 4096)); L = int(os.environ.get("L", 16))
T = int(os.environ.get("T", 8192)); M = int(os.environ.get("M", 8))
STEPS = int(os.environ.get("STEPS", 6)); WARMUP = int(os.environ.get("WARMUP", 2))
GELU = os.environ.get("GELU", "none")
rank = int(os.environ["RANK"]); world = int(os.environ["WORLD_SIZE"])
torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
dist.init_process_group("nccl")

class Block(nn.Module):
    def __init__(s):
        super().__init__()
        s.l1 = nn.Linear(H, 4 * H, bias=False, dtype=torch.bfloat16, device="cuda")
        s.l2 = nn.Linear(4 * H, H, bias=False, dtype=torch.bfloat16, device="cuda")
    def forward(s, x): return x + s.l2(Fn.gelu(s.l1(x), approximate=GELU))

class Chunk(nn.Module):
    def __init__(s, n, config, pre, post):
        super().__init__()
        s.blocks = nn.ModuleList([Block() for _ in range(n)])
        s.config, s.pre, s.post, s.inp = config, pre, post, None
        s.model_type = ModelType.encoder_or_decoder
    def set_input_tensor(s, t): s.inp = t[0] if isinstance(t, (list, tuple)) else t
    def forward(s, x):
        h = x if s.pre else s.inp
        for b in s.blocks: h = b(h)
        return h

def run(vpp, overlap):
    ps.destroy_model_parallel()
    ps.initialize_model_parallel(tensor_model_parallel_size=1, pipeline_model_parallel_size=world,
                                 virtual_pipeline_model_parallel_size=vpp if vpp > 1 else None)
    cfg = ModelParallelConfig(pipeline_model_parallel_size=world,
                              virtual_pipeline_model_parallel_size=vpp if vpp > 1 else None,
                              pipeline_dtype=torch.bfloat16, params_dtype=torch.bfloat16, bf16=True,
                              overlap_p2p_comm=bool(overlap), batch_p2p_comm=not overlap)
    cfg.hidden_size = H
    nst = world * vpp; per = L // nst
    torch.manual_seed(0)
    chunks = [Chunk(per, cfg, pre=(c * world + rank == 0), post=(c * world + rank == nst - 1)) for c in range(vpp)]
    xs = [torch.randn(T, 1, H, dtype=torch.bfloat16, device="cuda") for _ in range(M)]
    def fstep(it, model):
        x = next(it) if model.pre else None
        out = model(x)
        def loss_func(o):
            l = o.float().pow(2).mean()
            return l, {"loss": l.detach()}
        return out, loss_func
    fb = get_forward_backward_func()
    times = []
    for s in range(WARMUP + STEPS):
        its = [iter(xs) for _ in range(vpp)]
        for c in chunks: c.zero_grad(set_to_none=True)
        torch.cuda.synchronize(); dist.barrier(); t0 = time.perf_counter()
        fb(forward_step_func=fstep, data_iterator=its if vpp > 1 else its[0],
           model=chunks if vpp > 1 else chunks[0], num_microbatches=M, seq_length=T,
           micro_batch_size=1, forward_only=False)
        torch.cuda.synchronize(); t = torch.tensor([time.perf_counter() - t0], device="cuda")
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        if s >= WARMUP: times.append(t.item())
    med = statistics.median(times)
    flop = 3 * 2 * (2 * T * H * 4 * H) * L * M   # as torch_pp_bench.py
    peak = torch.cuda.max_memory_allocated() / 2**30
    pk = torch.tensor([peak], device="cuda"); dist.all_reduce(pk, op=dist.ReduceOp.MAX)
    if rank == 0:
        name = "megatron-1F1B" if vpp == 1 else f"megatron-interleaved"
        print(f"{name:22s} v={vpp} overlap_p2p={overlap} step {med*1e3:8.1f} ms (min {min(times)*1e3:7.1f})"
              f"  {flop/med/world/1e12:6.1f} TFLOP/s/gpu  peak {pk.item():5.1f} GiB", flush=True)
    del chunks; torch.cuda.empty_cache(); torch.cuda.reset_peak_memory_stats()

if rank == 0:
    print(f"megatron-core {pi.__version__} torch {torch.__version__} dev {torch.cuda.get_device_name()} "
          f"H={H} L={L} T={T} M={M} world={world} gelu={GELU}", flush=True)
for c in os.environ.get("CONFIGS", "1:0,2:0,2:1,4:0,4:1").split(","):
    v, o = (int(a) for a in c.split(":"))
    if L % (world * v): continue
    try:
        run(v, o)
    except Exception as e:
        if rank == 0: print(f"vpp={v} overlap={o} FAILED: {type(e).__name__}: {str(e)[:300]}", flush=True)
dist.destroy_process_group()
