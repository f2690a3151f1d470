# bench/megatron_gpt_bench.py — Megatron-LM's GPTModel (megatron.core, the local layer spec: no
# TransformerEngine) beside examples/gpt_gpu.cu on the same GPUs: the same model and sizes, Megatron's
# own pipeline schedules (get_forward_backward_func: 1F1B, interleaved 1F1B with overlap_p2p_comm),
# bf16, one process per GPU.
#
#     PYTHONPATH=.megatron torchrun --nproc_per_node=2 bench/megatron_gpt_bench.py
#
# (.megatron holds megatron/core of a fetched Megatron-LM, carried to the machine, never committed.)
# Env: LAYERS (24), HIDDEN (2048), HEADS (16), SEQ (4096), VOCAB (32768), MB (8 microbatches),
# STEPS (5 timed), WARMUP (2), CONFIGS (comma-separated, of "single", "1f1b", "interleaved", "1f1b-first";
# default all four), FIRST (the first stage's layers in "1f1b-first", default LAYERS/2 + 1: the last
# stage also holds the output layer and the loss, Megatron's num_layers_in_first_pipeline_stage).
#
# The model is gpt_gpu's: learned absolute positions, RMSNorm (eps 1e-5), causal self-attention, a
# GELU MLP (tanh form) of 4*HIDDEN, no biases, the output layer tied to the token embedding, the
# cross-entropy of the next token; weights and activations bf16. The local spec's attention
# (DotProductAttention) takes no packed sequences (it asserts packed_seq_params is None), so each
# microbatch is one sequence of SEQ tokens, and gpt_gpu runs the same way (bins of SEQ tokens, one
# sequence each). Its softmax is Megatron's fused causal kernel when the extension is installed
# (scaled_upper_triang_masked_softmax_cuda), else PyTorch's; the first line says which. Gradients
# accumulate in each parameter's bf16 .grad (no DistributedDataParallel wrapper: Megatron's cheaper
# path; gpt_gpu accumulates fp32). The step timed is forward_backward_func's, every microbatch's
# forward and backward, and then the tied weight's two copies summed over the first and last
# stage (finalize_model_grads' part for them), from a synchronised start to a synchronised end.
#
# "single": every process runs the whole model on its own GPU (pp 1, each GPU a replica that never
# communicates), so one run gives each GPU's single-GPU step under the same conditions as the
# pipeline's (every GPU busy at once); the efficiency baseline is their harmonic mean.
import os, time, statistics
from functools import partial
import torch
import torch.distributed as dist
import torch.nn.functional as F
from megatron.core import parallel_state as ps
from megatron.core import tensor_parallel
from megatron.core.transformer.transformer_config import TransformerConfig
from megatron.core.models.gpt.gpt_model import GPTModel
from megatron.core.transformer.module import Float16Module
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.pipeline_parallel import get_forward_backward_func
import megatron.core.package_info as pi

LAYERS = int(os.environ.get("LAYERS", 24)); HIDDEN = int(os.environ.get("HIDDEN", 2048))
HEADS = int(os.environ.get("HEADS", 16)); SEQ = int(os.environ.get("SEQ", 4096))
VOCAB = int(os.environ.get("VOCAB", 32768)); MB = int(os.environ.get("MB", 8))
STEPS = int(os.environ.get("STEPS", 5)); WARMUP = int(os.environ.get("WARMUP", 2))
CONFIGS = os.environ.get("CONFIGS", "single,1f1b,interleaved,1f1b-first").split(",")
FIRST = int(os.environ.get("FIRST", LAYERS // 2 + 1))

rank = int(os.environ["RANK"]); world = int(os.environ["WORLD_SIZE"])
torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
dist.init_process_group("nccl")

try:
    import scaled_upper_triang_masked_softmax_cuda  # noqa: F401  (Megatron's fused causal softmax)
    FUSED_SOFTMAX = True
except ImportError:
    FUSED_SOFTMAX = False


def build(pp, vpp, first=None):
    """The model chunks of this rank for pp pipeline ranks with vpp chunks each (vpp 1: one); first:
    the first stage's layers (the rest split evenly over the others), None: all even."""
    ps.destroy_model_parallel()
    ps.initialize_model_parallel(tensor_model_parallel_size=1, pipeline_model_parallel_size=pp,
                                 virtual_pipeline_model_parallel_size=vpp if vpp > 1 else None)
    tensor_parallel.model_parallel_cuda_manual_seed(1234)
    cfg = TransformerConfig(
        num_layers=LAYERS, hidden_size=HIDDEN, num_attention_heads=HEADS, ffn_hidden_size=4 * HIDDEN,
        normalization="RMSNorm", layernorm_epsilon=1e-5, add_bias_linear=False, gated_linear_unit=False,
        activation_func=partial(F.gelu, approximate="tanh"), hidden_dropout=0.0, attention_dropout=0.0,
        masked_softmax_fusion=FUSED_SOFTMAX, bf16=True, params_dtype=torch.bfloat16,
        pipeline_dtype=torch.bfloat16, pipeline_model_parallel_size=pp,
        virtual_pipeline_model_parallel_size=vpp if vpp > 1 else None,
        overlap_p2p_comm=vpp > 1, batch_p2p_comm=vpp == 1, deallocate_pipeline_outputs=True,
        num_layers_in_first_pipeline_stage=first,
        num_layers_in_last_pipeline_stage=(LAYERS - first) if first is not None and pp == 2 else None)
    spec = get_gpt_layer_local_spec(normalization="RMSNorm")
    chunks = []
    for v in range(vpp):
        vp = v if vpp > 1 else None
        model = GPTModel(
            config=cfg, transformer_layer_spec=spec, vocab_size=VOCAB, max_sequence_length=SEQ,
            pre_process=ps.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp),
            post_process=ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp),
            share_embeddings_and_output_weights=True, position_embedding_type="learned_absolute",
            vp_stage=vp).cuda()
        # As Megatron's own trainer does (training.get_model): the torch norms of the local spec are
        # built fp32 whatever params_dtype says; Float16Module casts every parameter to bf16.
        chunks.append(Float16Module(cfg, model))
    return cfg, chunks


def batches():
    """MB microbatches of one sequence each: random tokens, the next token as the label."""
    g = torch.Generator(device="cuda").manual_seed(1)
    out = []
    for _ in range(MB):
        seq = torch.randint(1, VOCAB, (1, SEQ + 1), device="cuda", generator=g)
        pos = torch.arange(SEQ, device="cuda").unsqueeze(0)
        out.append((seq[:, :SEQ].contiguous(), seq[:, 1:].contiguous(), pos))
    return out


def forward_step(data_iterator, model):
    tokens, labels, pos = next(data_iterator)
    losses = model(tokens, pos, None, labels=labels)          # [1, SEQ] per-token loss (last stage)

    def loss_func(out):
        loss = out.float().mean()
        return loss, {"loss": loss.detach()}
    return losses, loss_func


def tied_grad_sum(chunks, pp):
    """The tied weight's two copies summed over the embedding group (the first and the last stage),
    as finalize_model_grads does after forward_backward_func; its own _allreduce_word_embedding_grads
    wants a DistributedDataParallel wrapper, which this bench leaves off. gpt_gpu's step sums its
    copies too (fp32 there, bf16 here), so both steps end with complete gradients."""
    if pp == 1:
        return
    first = ps.is_pipeline_first_stage(ignore_virtual=True)
    if not (first or ps.is_pipeline_last_stage(ignore_virtual=True)):
        return
    w = (chunks[0] if first else chunks[-1]).module.shared_embedding_or_output_weight()
    if w is not None and w.grad is not None:
        dist.all_reduce(w.grad, group=ps.get_embedding_group())


def run(name, pp, vpp, first=None):
    cfg, chunks = build(pp, vpp, first)
    data = batches()
    fb = get_forward_backward_func()
    times = []
    for step in range(WARMUP + STEPS):
        its = [iter(data) for _ in range(vpp)]
        for c in chunks:
            c.zero_grad(set_to_none=True)
        torch.cuda.synchronize(); dist.barrier(); t0 = time.perf_counter()
        fb(forward_step_func=forward_step, data_iterator=its if vpp > 1 else its[0],
           model=chunks if vpp > 1 else chunks[0], num_microbatches=MB, seq_length=SEQ,
           micro_batch_size=1, forward_only=False)
        tied_grad_sum(chunks, pp)
        torch.cuda.synchronize()
        if step >= WARMUP:
            times.append(time.perf_counter() - t0)
    mine = statistics.median(times)
    all_ms = [torch.zeros(1, device="cuda") for _ in range(world)]
    dist.all_gather(all_ms, torch.tensor([mine * 1e3], device="cuda"))
    peak = torch.tensor([torch.cuda.max_memory_allocated() / 2**30], device="cuda")
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    ms = [t.item() for t in all_ms]
    if rank == 0:
        tokens = MB * SEQ
        if name == "single":        # every GPU its own replica: each one's step, their harmonic mean
            hm = len(ms) / sum(1.0 / m for m in ms)
            each = ", ".join(f"GPU {r} {m:.1f} ms" for r, m in enumerate(ms))
            print(f"megatron single-gpu: {each}; harmonic mean {hm:.1f} ms  tokens/s/gpu {tokens / (hm * 1e-3):.0f}"
                  f"  peak {peak.item():.2f} GiB", flush=True)
        else:                       # one pipeline: its step is its slowest rank's
            step = max(ms)
            print(f"megatron {name}: step {step:.1f} ms (min over steps {min(times) * 1e3:.1f} on rank 0)  "
                  f"tokens/s/gpu {tokens / (step * 1e-3) / world:.0f}  peak {peak.item():.2f} GiB", flush=True)
    del chunks, data
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()


if rank == 0:
    print(f"megatron-core {pi.__version__} torch {torch.__version__} {torch.cuda.get_device_name()} x {world}: "
          f"GPTModel local spec, {LAYERS} layers, hidden {HIDDEN}, {HEADS} heads, sequence {SEQ}, vocab {VOCAB}, "
          f"{MB} microbatches of 1 sequence; softmax: "
          f"{'fused (scaled_upper_triang_masked_softmax_cuda)' if FUSED_SOFTMAX else 'PyTorch (no fused kernel installed)'}",
          flush=True)
for name in CONFIGS:
    pp, vpp = {"single": (1, 1), "1f1b": (world, 1), "interleaved": (world, 2), "1f1b-first": (world, 1)}[name]
    first = FIRST if name == "1f1b-first" else None
    if first is None and LAYERS % (pp * vpp) or first is not None and (world != 2 or not 0 < first < LAYERS):
        continue
    label = "single" if name == "single" else f"{name.split('-')[0]} pp {pp}"
    label += f" vpp {vpp} overlap_p2p_comm" if vpp > 1 else ""
    label += f" first stage {first} layers" if first is not None else ""
    try:
        run(label, pp, vpp, first)
    except Exception as e:  # an out-of-memory or an API mismatch: say so and stop every process
        # A rank that fails mid-pipeline leaves its peer blocked in a receive; going on to the next
        # configuration would meet that peer in a different collective and hang.
        print(f"megatron {name} FAILED on rank {rank}: {type(e).__name__}: {str(e)[:400]}", flush=True)
        os._exit(1)
ps.destroy_model_parallel()
dist.destroy_process_group()
