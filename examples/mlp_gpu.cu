/* mlp_gpu.cu — train a residual MLP pipeline-parallel on GPUs with pipepar and NCCL.
 *
 * The model: L blocks, each  x <- x + W2 · gelu(W1 · x)  with hidden H and inner width F = 4H,
 * bf16 weights and activations, fp32 accumulation, the mean-squared error against a random
 * target as the loss. It is the model of ../bench/torch_pp_bench.py, so the two can be timed side
 * by side (GELU is the tanh form, cuBLASLt's epilogue; the bench runs PyTorch with
 * gelu(approximate="tanh") to match).
 *
 *     build/mlp_gpu --single                                   whole model on one GPU (baseline)
 *     RANK=0 WORLD_SIZE=2 ... build/mlp_gpu --schedule 1f1b    one process per GPU (torchrun,
 *     torchrun --nproc-per-node 2 --no-python build/mlp_gpu    mpirun, srun, or by hand)
 *     build/mlp_gpu --threads 2 --schedule interleaved --vpp 4 one process, one thread per GPU
 *     ... --layout 'Et*2|t*6|t*2|t*6L' --schedule search     stages of unequal size, in the order
 *                                                              pp_search picks for their costs
 *     ... --schedule-csv best.csv                              a schedule from a file ('pipepar
 *                                                              search --csv', or any tool's CSV)
 *
 * Transfers between processes on one host go through the copy engines
 * (pp_nccl_transport_copy_engine) unless --no-copy-engine: one copy from the send buffer into
 * the receive buffer that needs no SM on either GPU, so a transfer does not wait for GEMMs to
 * end. The rest go through NCCL, whose groups pass the arrival gate (pp_nccl_transport_gate)
 * unless --no-gate: a group launches only once its peer has reached the matching one, so no
 * NCCL kernel sits on SMs waiting for it.
 *
 * What a rank does (run_rank, one function per phase):
 *   1. connect     NCCL communicators: pp_nccl_init, then ncclCommSplit by the rank grid
 *   2. schedule    pp_plan_build: --layout's stages (or --layers evenly); the schedule built,
 *                  searched (--schedule search) or read (--schedule-csv), lowered, split, proven
 *   3. place       (--place-by-speed) each GPU on the rank where the simulated step is shortest
 *   4. build       this rank's blocks, the transport and executor, and every buffer of a step:
 *                  the executor's boundary tensors, activation slots and I->W buffers counted
 *                  from this rank's program (pp_schedule_rank_peaks)
 *   5. time        warm-up, then timed steps (fwd + bwd of every microbatch, as PyTorch's bench
 *                  times); the callbacks run each stage's GEMMs, one cuBLASLt call each with its
 *                  epilogue fused (gemm_tune.h)
 *   6. report      step time, TFLOP/s per GPU, pipeline efficiency against the single-GPU step,
 *                  the simulator's prediction from the measured times, where the step went
 *                  (compute, waiting for the peer, for transfers), peak memory; (--check) the
 *                  gradients against a single-GPU run; (--trace FILE) Perfetto JSON
 *   7. train       (--train N) N steps of SGD or AdamW with the gradient norm clipped over all
 *                  pipeline ranks (pp_cuda_l2norm + pp_nccl_grad_norm), printing the loss
 * With --adapt, between 5 and 6: each rank's speed from the last step's timeline, the blocks
 * re-split for the speeds and moved to their new ranks, the steps timed again (mlp_gpu_adapt.h);
 * --slow-rank R makes rank R's GPU slow on purpose, to see it.
 *
 * Shapes (row-major, as PyTorch stores them; cuBLASLt sees the same bytes column-major):
 *   x, y, dy        [T, H]     a microbatch's activation and its gradient
 *   h, g, dh        [T, F]     pre-activation (kept for GELU's backward), gelu(h), dL/dh
 *   W1 [F, H], W2 [H, F]  bf16;  dW1, dW2 same shapes, fp32 (summed over microbatches)        */
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cublasLt.h>
#include <cublas_v2.h>
#include <pthread.h>
#include <errno.h>
#include <signal.h>
#include <unistd.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <string>
#include <time.h>
#include <algorithm>
#include <functional>
#include <vector>
#include "../pipepar.h"

typedef __nv_bfloat16 bf16;

#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    fprintf(stderr, "mlp_gpu: %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); exit(1); } } while (0)
#define CKLT(call) do { cublasStatus_t s_ = (call); if (s_ != CUBLAS_STATUS_SUCCESS) { \
    fprintf(stderr, "mlp_gpu: %s:%d: %s: cuBLAS status %d\n", __FILE__, __LINE__, #call, (int)s_); exit(1); } } while (0)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n == 0 ? 0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#include "mlp_gpu_options.h"   /* Options, --help, parse_args, check_args */
#include "text_file.h"         /* text_file_read: --schedule-csv's text */

/* ============================================================================================
 * Kernels: deterministic random init, the loss, optimizers, comparison
 * ============================================================================================ */

/* Counter-based random numbers (splitmix64): element i of a tensor is the same on every rank
 * and every run, so the pipeline stages and the single-GPU reference hold identical weights. */
__device__ __forceinline__ uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
__device__ __forceinline__ float uniform01(uint64_t seed, uint64_t i)
{
    return ((mix64(seed * 0x632be59bd9b4e019ull ^ i) >> 40) + 0.5f) * (1.0f / 16777216.0f);
}

/* bound > 0: uniform(-bound, bound) (nn.Linear's init); bound == 0: standard normal. */
__global__ void init_kernel(bf16 *p, size_t n, uint64_t seed, float bound)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float v;
        if (bound > 0) v = (2.0f * uniform01(seed, i) - 1.0f) * bound;
        else {
            float u1 = uniform01(seed, 2 * i), u2 = uniform01(seed, 2 * i + 1);
            v = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
        }
        p[i] = __float2bfloat16(v);
    }
}

/* dy = scale * (o - t), 8 elements per thread (16-byte loads); *loss += sum((o - t)^2) * inv.
 * scale = 2 / (T*H*M): the loss is the mean over microbatches of each microbatch's MSE. */
__global__ void mse_kernel(const bf16 *__restrict__ o, const bf16 *__restrict__ t, bf16 *__restrict__ dy,
                           size_t n8, float scale, float inv, float *loss)
{
    float acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n8; i += (size_t)gridDim.x * blockDim.x) {
        uint4 ov = ((const uint4 *)o)[i], tv = ((const uint4 *)t)[i], dv;
        const __nv_bfloat162 *o2 = (const __nv_bfloat162 *)&ov, *t2 = (const __nv_bfloat162 *)&tv;
        __nv_bfloat162 *d2 = (__nv_bfloat162 *)&dv;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float2 a = __bfloat1622float2(o2[k]), b = __bfloat1622float2(t2[k]);
            float e0 = a.x - b.x, e1 = a.y - b.y;
            acc += e0 * e0 + e1 * e1;
            d2[k] = __floats2bfloat162_rn(scale * e0, scale * e1);
        }
        ((uint4 *)dy)[i] = dv;
    }
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    __shared__ float part[32];
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x < 32) {
        acc = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0;
        for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
        if (threadIdx.x == 0) atomicAdd(loss, acc * inv);
    }
}

/* w -= lr * clip * g (weights bf16, gradients fp32). */
__global__ void sgd_kernel(bf16 *w, const float *g, size_t n, float lr, const float *clip)
{
    float s = lr * (clip ? *clip : 1.0f);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        w[i] = __float2bfloat16(__bfloat162float(w[i]) - s * g[i]);
}

/* AdamW (Loshchilov & Hutter) with PyTorch's defaults betas (0.9, 0.999), eps 1e-8, wd 0.01. */
__global__ void adamw_kernel(bf16 *w, const float *g, float *m, float *v, size_t n, float lr, int t, const float *clip)
{
    const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f;
    float c = clip ? *clip : 1.0f, bc1 = 1.0f - powf(b1, (float)t), bc2 = 1.0f - powf(b2, (float)t);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float gi = g[i] * c, wi = __bfloat162float(w[i]);
        float mi = b1 * m[i] + (1 - b1) * gi, vi = b2 * v[i] + (1 - b2) * gi * gi;
        m[i] = mi; v[i] = vi;
        wi -= lr * (wd * wi + (mi / bc1) / (sqrtf(vi / bc2) + eps));
        w[i] = __float2bfloat16(wi);
    }
}

/* out[0] += sum (a - b)^2, out[1] += sum b^2 (fp64). */
__global__ void diff_kernel(const float *a, const float *b, size_t n, double *out)
{
    double d2 = 0, b2 = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        double d = (double)a[i] - (double)b[i];
        d2 += d * d;
        b2 += (double)b[i] * (double)b[i];
    }
    for (int off = 16; off > 0; off >>= 1) {
        d2 += __shfl_xor_sync(0xffffffffu, d2, off);
        b2 += __shfl_xor_sync(0xffffffffu, b2, off);
    }
    if ((threadIdx.x & 31) == 0) { atomicAdd(&out[0], d2); atomicAdd(&out[1], b2); }
}

static int grid_for(size_t n) { size_t b = (n + 255) / 256; return (int)(b > 132 * 16 ? 132 * 16 : (b ? b : 1)); }

#include "gemm_tune.h"          /* the six GEMMs: plans, tuning, the picks file */

/* ============================================================================================
 * The model on one rank: its blocks, the activations it keeps for backward, the GEMM calls
 * ============================================================================================ */
struct Model {
    int H, F, T, L, M, S, nb;       /* nb = the most blocks a stage holds (L / S unless --layout) */
    std::vector<int> first, count;  /* [S] stage s holds blocks [first[s], first[s] + count[s]) */
    /* Between an I and its W, the I's dh and dy of every block wait for the W in one of this
     * rank's I->W buffers: dh[j] [T, F] for j < iw_nb, then dy[j] [T, H] for j < iw_nb - 1 (the
     * last block's dy is the grad_out), iw_nb = the rank's largest stage. There are as many as the
     * most I's awaiting their W at once in the rank's program (pp_schedule_rank_peaks): one after
     * pp_schedule_split_backward, where each W follows its I at once; ZB-V's held W's need more,
     * but fewer than its live activations, which is why they are not kept in the slots. */
    int iw_nb = 0;
    std::vector<bf16 *> iw_bufs;
    std::vector<int> iw_free;       /* buffers not awaiting a W */
    std::vector<int> iw_of;         /* [num_chunks * M] buffer of (chunk, mb) between its I and W, or -1 */
    cudaStream_t stream;
    Gemms G;
    std::vector<bf16 *> W1, W2;     /* [L], NULL where another rank holds the block */
    std::vector<float *> dW1, dW2;  /* [L] */
    std::vector<float *> m1, v1, m2, v2;   /* AdamW state */
    std::vector<char> fresh;        /* [L] the block's gradient was not written yet this step */
    /* Saved activations of one (stage, microbatch) of nb blocks, in one slot of slot_size(nb):
     *   h[j], g[j]  [T, F] for j < nb;  x[j] [T, H] for 1 <= j < nb (x[0] is the stage input).
     * Slots are kept by their stage size (stages of a --layout differ), so a small stage's
     * activations do not take a large stage's room. */
    size_t slot_bytes = 0;                      /* slot_size(nb), the largest */
    std::vector<char *> slots;
    std::vector<int> slot_nb;                   /* [slot] the stage size it was made for */
    std::vector<std::vector<int>> free_slots;   /* [nb] free slots of that size */
    std::vector<int> saved;         /* [num_chunks * M] slot of (chunk, mb), or -1 */
    bf16 *dh = nullptr, *work[2] = { nullptr, nullptr };
    bf16 *inputs = nullptr, *targets = nullptr;  /* [M, T, H] on the first / last stage's rank */
    float *d_loss = nullptr;
    size_t bytes = 0, peak_bytes = 0;            /* what this program allocated */
    int kill_step = -1, step_no = 0;             /* failure test */
    /* --slow-rank: this GPU runs slow_extra more GEMMs per GEMM of the model (0.35 for 1.35x), each
     * a forward's second GEMM into burn [T, H], counted in slow_debt until a whole one is due */
    double slow_extra = 0, slow_debt = 0;
    bf16 *burn = nullptr;
    /* --send-parts: a sent output's last GEMM in send_parts parts, each said written to the
     * executor (pp_executor_output_ready), which lets it leave before the rest is computed */
    int send_parts = 1;
    pp_executor *ex = nullptr;
    int parts_refused = 0;
};

static void *dev_alloc(Model &m, size_t bytes)
{
    void *p = nullptr;
    CK(cudaMalloc(&p, bytes ? bytes : 1));
    m.bytes += bytes;
    m.peak_bytes = std::max(m.peak_bytes, m.bytes);
    return p;
}

static bf16 *sub(char *slot, size_t offset_elems) { return (bf16 *)slot + offset_elems; }

/* Slot layout offsets, in bf16 elements, for a stage of nb blocks. */
static size_t off_h(const Model &m, int j) { return (size_t)j * 2 * m.T * m.F; }
static size_t off_g(const Model &m, int j) { return off_h(m, j) + (size_t)m.T * m.F; }
static size_t off_x(const Model &m, int nb, int j) { return (size_t)nb * 2 * m.T * m.F + (size_t)(j - 1) * m.T * m.H; }
static size_t slot_size(const Model &m, int nb) { return 2 * off_x(m, nb, nb); }
/* Where the I leaves block j's dh and dy for the W: in its I->W buffer (a smaller stage uses the
 * start of each half). */
static size_t iw_size(const Model &m) { return ((size_t)m.iw_nb * m.T * m.F + (size_t)(m.iw_nb - 1) * m.T * m.H) * 2; }
static bf16 *iw_dh(const Model &m, bf16 *iw, int j) { return iw + (size_t)j * m.T * m.F; }
static bf16 *iw_dy(const Model &m, bf16 *iw, int j) { return iw + (size_t)m.iw_nb * m.T * m.F + (size_t)j * m.T * m.H; }

static int slot_get(Model &m, int nb)
{
    std::vector<int> &fl = m.free_slots[nb];
    if (fl.empty()) {
        m.slots.push_back((char *)dev_alloc(m, slot_size(m, nb)));
        m.slot_nb.push_back(nb);
        return (int)m.slots.size() - 1;
    }
    int s = fl.back();
    fl.pop_back();
    return s;
}

/* The blocks' weights, gradients and (adamw) optimizer state; init: their initial values (else
 * they arrive from another rank: --adapt). */
static void model_init_blocks(Model &m, const std::vector<int> &blocks, bool adamw, bool init = true)
{
    size_t wn = (size_t)m.F * m.H;
    for (int b : blocks) {
        m.W1[b] = (bf16 *)dev_alloc(m, wn * 2);
        m.W2[b] = (bf16 *)dev_alloc(m, wn * 2);
        m.dW1[b] = (float *)dev_alloc(m, wn * 4);
        m.dW2[b] = (float *)dev_alloc(m, wn * 4);
        /* nn.Linear's default init: uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)) */
        if (init) init_kernel<<<grid_for(wn), 256, 0, m.stream>>>(m.W1[b], wn, 1000 + 2 * b, 1.0f / sqrtf((float)m.H));
        if (init) init_kernel<<<grid_for(wn), 256, 0, m.stream>>>(m.W2[b], wn, 1001 + 2 * b, 1.0f / sqrtf((float)m.F));
        if (adamw) {
            m.m1[b] = (float *)dev_alloc(m, wn * 4); m.v1[b] = (float *)dev_alloc(m, wn * 4);
            m.m2[b] = (float *)dev_alloc(m, wn * 4); m.v2[b] = (float *)dev_alloc(m, wn * 4);
            if (init) {
                CK(cudaMemsetAsync(m.m1[b], 0, wn * 4, m.stream)); CK(cudaMemsetAsync(m.v1[b], 0, wn * 4, m.stream));
                CK(cudaMemsetAsync(m.m2[b], 0, wn * 4, m.stream)); CK(cudaMemsetAsync(m.v2[b], 0, wn * 4, m.stream));
            }
        }
    }
    CK(cudaGetLastError());
}

/* The split: counts = blocks of each of the S stages (NULL: L / S each). */
static void model_split(Model &m, int S, const int *counts)
{
    m.S = S;
    m.first.assign(S, 0); m.count.assign(S, 0);
    m.nb = 0;
    for (int s = 0, b = 0; s < S; s++) {
        m.first[s] = b;
        m.count[s] = counts ? counts[s] : m.L / S;
        b += m.count[s];
        m.nb = std::max(m.nb, m.count[s]);
    }
    m.slot_bytes = slot_size(m, m.nb);
    m.free_slots.assign(m.nb + 1, std::vector<int>());
}

static void model_setup(Model &m, const Options &o, int S, const int *counts, cudaStream_t stream, int verbose)
{
    m.H = o.hidden; m.F = 4 * o.hidden; m.T = o.tokens; m.L = o.layers; m.M = o.mb;
    model_split(m, S, counts);
    m.stream = stream;
    m.W1.assign(m.L, nullptr); m.W2.assign(m.L, nullptr);
    m.dW1.assign(m.L, nullptr); m.dW2.assign(m.L, nullptr);
    m.m1.assign(m.L, nullptr); m.v1.assign(m.L, nullptr); m.m2.assign(m.L, nullptr); m.v2.assign(m.L, nullptr);
    m.fresh.assign(m.L, 1);
    size_t th = (size_t)m.T * m.H;
    m.dh = (bf16 *)dev_alloc(m, (size_t)m.T * m.F * 2);
    m.work[0] = (bf16 *)dev_alloc(m, th * 2);
    m.work[1] = (bf16 *)dev_alloc(m, th * 2);
    m.d_loss = (float *)dev_alloc(m, sizeof(float));
    if (m.slow_extra > 0) m.burn = (bf16 *)dev_alloc(m, th * 2);
    m.send_parts = o.send_parts;
    gemms_create(m.G, m.H, m.T, o.send_parts, o.tune, stream, verbose, o.gemm_picks, o.single && o.tune_in_step > 0);
    /* Load every kernel of this file now (CUDA loads modules lazily by default): a first launch
     * in the middle of a step would load it while NCCL kernels may be waiting on a peer. */
    cudaFuncAttributes fa;
    CK(cudaFuncGetAttributes(&fa, init_kernel)); CK(cudaFuncGetAttributes(&fa, mse_kernel));
    CK(cudaFuncGetAttributes(&fa, sgd_kernel));  CK(cudaFuncGetAttributes(&fa, adamw_kernel));
    CK(cudaFuncGetAttributes(&fa, diff_kernel));
}

static void model_data(Model &m, bool first, bool last)
{
    size_t n = (size_t)m.M * m.T * m.H;
    if (first) {
        m.inputs = (bf16 *)dev_alloc(m, n * 2);
        init_kernel<<<grid_for(n), 256, 0, m.stream>>>(m.inputs, n, 7, 0.0f);
    }
    if (last) {
        m.targets = (bf16 *)dev_alloc(m, n * 2);
        init_kernel<<<grid_for(n), 256, 0, m.stream>>>(m.targets, n, 8, 0.0f);
    }
    CK(cudaGetLastError());
}

static float grad_beta(Model &m, int b)
{
    float beta = m.fresh[b] ? 0.0f : 1.0f;
    m.fresh[b] = 0;
    return beta;
}

/* A streamed output's last GEMM (--send-parts): kind `part` (fwd2 or dx on T / P tokens) on each
 * part of the tokens, D = A op B + C with B [T, F] and C, D [T, H] (row-major), each part said
 * written to the executor once issued (out: the output it knows). */
static void gemm_in_parts(Model &m, int part, const bf16 *A, const bf16 *B, const bf16 *C, bf16 *D, const bf16 *out)
{
    const size_t rows = (size_t)m.T / m.send_parts;
    pp_error e;
    for (int p = 0; p < m.send_parts; p++) {
        const size_t r0 = rows * p;
        gemm_run(m.G, part, A, B + r0 * m.F, C + r0 * m.H, D + r0 * m.H, 1.0f, nullptr, m.stream);
        if (pp_executor_output_ready(m.ex, out, (r0 + rows) * m.H * sizeof(bf16), &e) != PP_OK && !m.parts_refused++)
            fprintf(stderr, "mlp_gpu: %s\n", e.message);
    }
}

/* Forward of blocks [b0, b0 + nb) for one microbatch: in -> out, keeping h, g, x in the slot.
 * stream: out is sent, its last GEMM in parts (gemm_in_parts). */
static void forward_blocks(Model &m, int b0, int nb, const bf16 *in, bf16 *out, char *slot, bool stream = false)
{
    const bf16 *x = in;
    for (int j = 0; j < nb; j++) {
        int b = b0 + j;
        bf16 *h = sub(slot, off_h(m, j)), *g = sub(slot, off_g(m, j));
        bf16 *y = j + 1 < nb ? sub(slot, off_x(m, nb, j + 1)) : out;
        gemm_run(m.G, G_FWD1, m.W1[b], x, g, g, 0.0f, h, m.stream);           /* g = gelu(x W1^T), h kept */
        if (stream && j + 1 == nb) gemm_in_parts(m, G_FWD2_PART, m.W2[b], g, x, y, out);
        else gemm_run(m.G, G_FWD2, m.W2[b], g, x, y, 1.0f, nullptr, m.stream);    /* y = x + g W2^T */
        x = y;
    }
}

/* Full backward of the blocks (B): weight gradients accumulated, grad_in = dL/d(stage input)
 * (not computed when grad_in is NULL: the first stage's input needs none). stream: grad_in is
 * sent, computed before the first block's dW1 and in parts (gemm_in_parts). */
static void backward_blocks(Model &m, int b0, int nb, const bf16 *in, const bf16 *grad_out, bf16 *grad_in, char *slot,
                            bool stream = false)
{
    const bf16 *dy = grad_out;
    for (int j = nb - 1; j >= 0; j--) {
        int b = b0 + j;
        const bf16 *x = j > 0 ? sub(slot, off_x(m, nb, j)) : in;
        bf16 *h = sub(slot, off_h(m, j)), *g = sub(slot, off_g(m, j));
        float beta = grad_beta(m, b);
        gemm_run(m.G, G_DW2, g, dy, m.dW2[b], m.dW2[b], beta, nullptr, m.stream);    /* dW2 += dy^T g */
        gemm_run(m.G, G_DH, m.W2[b], dy, m.dh, m.dh, 0.0f, h, m.stream);             /* dh = dy W2 * gelu'(h) */
        if (stream && j == 0) {   /* the stage's input-gradient first, in parts; then its dW1 */
            gemm_in_parts(m, G_DX_PART, m.W1[b], m.dh, dy, grad_in, grad_in);
            gemm_run(m.G, G_DW1, x, m.dh, m.dW1[b], m.dW1[b], beta, nullptr, m.stream);
            break;
        }
        gemm_run(m.G, G_DW1, x, m.dh, m.dW1[b], m.dW1[b], beta, nullptr, m.stream);  /* dW1 += dh^T x */
        if (j == 0 && !grad_in) break;
        bf16 *dx = j > 0 ? m.work[j & 1] : grad_in;
        gemm_run(m.G, G_DX, m.W1[b], m.dh, dy, dx, 1.0f, nullptr, m.stream);         /* dx = dy + dh W1 */
        dy = dx;
    }
}

/* The input-gradient half (I): dh and dy of every block are left in the I->W buffer iw for W.
 * stream: grad_in is sent, its GEMM in parts (gemm_in_parts). */
static void backward_input_blocks(Model &m, const bf16 *grad_out, bf16 *grad_in, int b0, int nb, char *slot, bf16 *iw,
                                  bool stream = false)
{
    const bf16 *dy = grad_out;
    for (int j = nb - 1; j >= 0; j--) {
        int b = b0 + j;
        bf16 *h = sub(slot, off_h(m, j)), *dh = iw_dh(m, iw, j);
        gemm_run(m.G, G_DH, m.W2[b], dy, dh, dh, 0.0f, h, m.stream);
        if (j == 0 && !grad_in) break;
        bf16 *dx = j > 0 ? iw_dy(m, iw, j - 1) : grad_in;
        if (stream && j == 0) gemm_in_parts(m, G_DX_PART, m.W1[b], dh, dy, dx, grad_in);
        else gemm_run(m.G, G_DX, m.W1[b], dh, dy, dx, 1.0f, nullptr, m.stream);
        dy = dx;
    }
}

/* The weight-gradient half (W). */
static void backward_weight_blocks(Model &m, const bf16 *in, const bf16 *grad_out, int b0, int nb, char *slot,
                                   const bf16 *iw)
{
    for (int j = nb - 1; j >= 0; j--) {
        int b = b0 + j;
        const bf16 *x = j > 0 ? sub(slot, off_x(m, nb, j)) : in;
        const bf16 *dy = j == nb - 1 ? grad_out : iw_dy(m, (bf16 *)iw, j);
        float beta = grad_beta(m, b);
        gemm_run(m.G, G_DW2, sub(slot, off_g(m, j)), dy, m.dW2[b], m.dW2[b], beta, nullptr, m.stream);
        gemm_run(m.G, G_DW1, x, iw_dh(m, (bf16 *)iw, j), m.dW1[b], m.dW1[b], beta, nullptr, m.stream);
    }
}

/* --slow-rank: the extra GEMMs due for `gemms` GEMMs of the model (same shape and kernel as theirs:
 * w2 [H, F] of a block the rank holds times dh [T, F], into burn), so this GPU computes slower by
 * the same factor whatever it runs. */
static void slow_burn(Model &m, int gemms, const bf16 *w2)
{
    if (m.slow_extra <= 0) return;
    for (m.slow_debt += gemms * m.slow_extra; m.slow_debt >= 1; m.slow_debt -= 1)
        gemm_run(m.G, G_FWD2, w2, m.dh, m.burn, m.burn, 0.0f, nullptr, m.stream);
}

static void loss_grad(Model &m, const bf16 *out, int mb, bf16 *grad_out)
{
    size_t n = (size_t)m.T * m.H;
    float inv = 1.0f / ((float)n * (float)m.M);
    mse_kernel<<<grid_for(n / 8), 256, 0, m.stream>>>(out, m.targets + (size_t)mb * n, grad_out, n / 8, 2.0f * inv, inv,
                                                      m.d_loss);
}

static void model_begin_step(Model &m)
{
    std::fill(m.fresh.begin(), m.fresh.end(), 1);
    CK(cudaMemsetAsync(m.d_loss, 0, sizeof(float), m.stream));
}

/* ============================================================================================
 * The single-GPU step: every microbatch forward through all L blocks, loss, backward
 * (exactly what the PyTorch bench's single() does).
 * ============================================================================================ */
struct Single {
    Model m;
    bf16 *out = nullptr, *dy = nullptr;
    char *slot = nullptr;
};

static void single_setup(Single &s, const Options &o, cudaStream_t stream, bool adamw, int verbose)
{
    model_setup(s.m, o, 1, nullptr, stream, verbose);
    std::vector<int> all(o.layers);
    for (int b = 0; b < o.layers; b++) all[b] = b;
    model_init_blocks(s.m, all, adamw);
    model_data(s.m, true, true);
    size_t th = (size_t)s.m.T * s.m.H;
    s.out = (bf16 *)dev_alloc(s.m, th * 2);
    s.dy = (bf16 *)dev_alloc(s.m, th * 2);
    s.slot = (char *)dev_alloc(s.m, s.m.slot_bytes);
}

static void single_step(Single &s)
{
    Model &m = s.m;
    size_t th = (size_t)m.T * m.H;
    model_begin_step(m);
    for (int mb = 0; mb < m.M; mb++) {
        const bf16 *x = m.inputs + (size_t)mb * th;
        forward_blocks(m, 0, m.L, x, s.out, s.slot);
        loss_grad(m, s.out, mb, s.dy);
        backward_blocks(m, 0, m.L, x, s.dy, nullptr, s.slot);
        slow_burn(m, 6 * m.L - 1, m.W2[0]);   /* 2 GEMMs a block forward, 4 backward, block 0's dx skipped */
    }
}

/* Everything the single-GPU run allocated on the device: the gradient check runs it on a
 * pipeline rank's GPU, and the pipeline goes on after it (--train). */
static void single_free(Single &s)
{
    Model &m = s.m;
    CK(cudaStreamSynchronize(m.stream));
    for (int b = 0; b < m.L; b++) {
        void *t[8] = { m.W1[b], m.W2[b], m.dW1[b], m.dW2[b], m.m1[b], m.v1[b], m.m2[b], m.v2[b] };
        for (void *p : t) CK(cudaFree(p));
    }
    void *bufs[9] = { m.dh, m.work[0], m.work[1], m.d_loss, m.burn, m.inputs, m.targets, s.out, s.dy };
    for (void *p : bufs) CK(cudaFree(p));
    CK(cudaFree(s.slot));
    gemms_free(m.G);
    m = Model();
    s.out = s.dy = nullptr;
    s.slot = nullptr;
}

/* ============================================================================================
 * Pipeline rank: callbacks for the executor
 * ============================================================================================ */
struct Rank {
    const Options *o;
    int rank, world;
    Model m;
    pp_schedule *sched = nullptr;
    char sched_name[160] = "";      /* what runs: the plan's name */
    pp_nccl *world_comm = nullptr, *pipe = nullptr;
    pp_transport tp;
    pp_executor *ex = nullptr;
    pp_timer timer;
    cudaStream_t stream;
    bool lead = false;              /* world rank 0: the process that prints */
    int pp = 0, S = 0, vpp = 0;     /* pipeline ranks, stages, chunks per rank */
    int maxlen = 0;                 /* the longest rank program */
    int split = 0;                  /* the program has I's and W's */
    bool first = false, last = false;   /* this rank holds stage 0 / the last stage */
    bool adamw = false;
    std::vector<int> blocks;        /* this rank's blocks */
    /* The executor's boundary tensors come from one arena allocated at set-up: no cudaMalloc
     * runs while NCCL kernels are in flight (a cudaMalloc then can wait on a kernel that waits on
     * the peer, whose NCCL connection set-up waits on this rank: a cross-rank deadlock). */
    char *arena = nullptr;
    size_t arena_bytes = 0, arena_used = 0;
    std::string slot_summary;       /* this rank's activation slots by stage size, for the log */
    std::vector<void *> retired;    /* --adapt: weights sent to another rank, freed after the transport */
};

static size_t cb_tensor_bytes(void *user, int boundary, const pp_mb_info *info)
{
    (void)boundary; (void)info;
    Rank *r = (Rank *)user;
    return (size_t)r->m.T * r->m.H * sizeof(bf16);
}

static int cb_input(void *user, const pp_mb_info *info, void *x)
{
    Rank *r = (Rank *)user;
    size_t th = (size_t)r->m.T * r->m.H;
    return cudaMemcpyAsync(x, r->m.inputs + (size_t)info->mb * th, th * 2, cudaMemcpyDeviceToDevice, r->stream) != cudaSuccess;
}

static void maybe_die(Rank *r, const pp_mb_info *info)
{
    /* failure test: die in the middle of a step, with transfers in flight on both sides */
    if (r->o->kill_rank == r->rank && r->m.step_no == r->o->kill_step && info->mb == r->m.M / 2) {
        fprintf(stderr, "mlp_gpu: rank %d: killing itself in step %d (failure test)\n", r->rank, r->m.step_no);
        fflush(stderr);
        kill(getpid(), SIGKILL);
    }
}

/* --send-parts: whether the output for stage `to` goes to another rank (a V's turn and the last
 * stage's loss stay here): only then its last GEMM runs in parts. */
static bool streams(const Rank *r, const pp_mb_info *info, int to)
{
    return r->m.send_parts > 1 && to >= info->first_stage && to <= info->last_stage &&
           pp_stage_rank(r->sched, to) != info->rank;
}

static int cb_forward(void *user, const pp_mb_info *info, const void *in, void *out)
{
    Rank *r = (Rank *)user;
    Model &m = r->m;
    maybe_die(r, info);
    int k = info->chunk * m.M + info->mb;
    if (m.saved[k] >= 0) return 2;   /* a forward twice without its backward */
    m.saved[k] = slot_get(m, m.count[info->stage]);
    forward_blocks(m, m.first[info->stage], m.count[info->stage], (const bf16 *)in, (bf16 *)out, m.slots[m.saved[k]],
                   streams(r, info, info->stage + 1));
    slow_burn(m, 2 * m.count[info->stage], m.W2[m.first[info->stage]]);
    return m.parts_refused ? 5 : cudaGetLastError() != cudaSuccess;
}

static int cb_loss(void *user, const pp_mb_info *info, const void *out, void *grad_out, pp_loss *loss)
{
    Rank *r = (Rank *)user;
    loss_grad(r->m, (const bf16 *)out, info->mb, (bf16 *)grad_out);
    /* The loss stays on the device (reading it here would stall the host every microbatch);
     * weight 0 tells the executor there is nothing to average. The trainer reads d_loss. */
    loss->loss = 0;
    loss->weight = 0;
    return cudaGetLastError() != cudaSuccess;
}

static int take_slot(Model &m, const pp_mb_info *info, char **slot, int release)
{
    int k = info->chunk * m.M + info->mb;
    if (m.saved[k] < 0) return 0;
    *slot = m.slots[m.saved[k]];
    if (release) {   /* reuse is stream-ordered */
        m.free_slots[m.slot_nb[m.saved[k]]].push_back(m.saved[k]);
        m.saved[k] = -1;
    }
    return 1;
}

static int cb_backward(void *user, const pp_mb_info *info, const void *in, const void *grad_out, void *grad_in)
{
    Rank *r = (Rank *)user;
    char *slot;
    if (!take_slot(r->m, info, &slot, 1)) return 3;
    backward_blocks(r->m, r->m.first[info->stage], r->m.count[info->stage], (const bf16 *)in, (const bf16 *)grad_out,
                    (bf16 *)grad_in, slot, grad_in && streams(r, info, info->stage - 1));
    slow_burn(r->m, 4 * r->m.count[info->stage] - (grad_in ? 0 : 1), r->m.W2[r->m.first[info->stage]]);
    return r->m.parts_refused ? 5 : cudaGetLastError() != cudaSuccess;
}

static int cb_backward_input(void *user, const pp_mb_info *info, const void *in, const void *grad_out, void *grad_in)
{
    Rank *r = (Rank *)user;
    Model &m = r->m;
    char *slot;
    (void)in;
    int k = info->chunk * m.M + info->mb;
    if (!take_slot(m, info, &slot, 0)) return 3;
    /* the buffers were counted from this program, whose I's and W's run in its order */
    if (m.iw_of[k] >= 0 || m.iw_free.empty()) {
        fprintf(stderr, "mlp_gpu: rank %d: I of stage %d microbatch %d: %s\n", r->rank, info->stage, info->mb,
                m.iw_of[k] >= 0 ? "an I twice without its W" : "no free I->W buffer (the program's count was short)");
        return 4;
    }
    m.iw_of[k] = m.iw_free.back();   /* reuse is stream-ordered */
    m.iw_free.pop_back();
    backward_input_blocks(m, (const bf16 *)grad_out, (bf16 *)grad_in, m.first[info->stage], m.count[info->stage], slot,
                          m.iw_bufs[m.iw_of[k]], grad_in && streams(r, info, info->stage - 1));
    slow_burn(m, 2 * m.count[info->stage] - (grad_in ? 0 : 1), m.W2[m.first[info->stage]]);
    return m.parts_refused ? 5 : cudaGetLastError() != cudaSuccess;
}

static int cb_backward_weight(void *user, const pp_mb_info *info, const void *in, const void *grad_out)
{
    Rank *r = (Rank *)user;
    Model &m = r->m;
    char *slot;
    int k = info->chunk * m.M + info->mb;
    if (m.iw_of[k] < 0) {
        fprintf(stderr, "mlp_gpu: rank %d: W of stage %d microbatch %d before its I\n", r->rank, info->stage, info->mb);
        return 4;
    }
    if (!take_slot(m, info, &slot, 1)) return 3;
    backward_weight_blocks(m, (const bf16 *)in, (const bf16 *)grad_out, m.first[info->stage], m.count[info->stage], slot,
                           m.iw_bufs[m.iw_of[k]]);
    slow_burn(m, 2 * m.count[info->stage], m.W2[m.first[info->stage]]);
    m.iw_free.push_back(m.iw_of[k]);
    m.iw_of[k] = -1;
    return cudaGetLastError() != cudaSuccess;
}

static void *cb_alloc(void *user, size_t bytes)
{
    Rank *r = (Rank *)user;
    size_t need = (bytes + 255) & ~(size_t)255;
    if (r->arena && r->arena_used + need <= r->arena_bytes) {
        void *p = r->arena + r->arena_used;
        r->arena_used += need;
        return p;
    }
    return dev_alloc(r->m, bytes);
}
static void cb_free(void *user, void *ptr, size_t bytes)
{
    Rank *r = (Rank *)user;
    if (r->arena && (char *)ptr >= r->arena && (char *)ptr < r->arena + r->arena_bytes) return;   /* freed with the arena */
    cudaStreamSynchronize(r->stream);
    cudaFree(ptr);
    r->m.bytes -= bytes;
}

/* ============================================================================================
 * Driving a rank
 * ============================================================================================ */
struct Shared {                 /* --threads: what the rank threads share */
    const Options *o;
    pp_nccl_id id;
    int world;
    int status[64];
};

/* What the timed steps measured (rank_time). */
struct Timing {
    std::vector<double> times;                 /* the timed steps, s */
    std::vector<double> busy;                  /* this rank's compute in each timed step, s */
    std::vector<pp_nccl_group_time> groups;    /* the last step's transfer groups */
    int ngroups = 0;
    double last_t0 = 0;                        /* host clock at the last step's start */
    float loss = 0;                            /* the last step's loss (the last stage's) */
};

/* The single-GPU baseline: set up, time, report. Returns the median step time (s). */
static double run_single(const Options &o, int device, bool print, Single *keep)
{
    CK(cudaSetDevice(device));
    cudaStream_t stream;
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    Single local, &s = keep ? *keep : local;
    if (o.slow_rank == device) s.m.slow_extra = o.slow_factor - 1;
    single_setup(s, o, stream, false, print && !o.quiet);
    if (o.tune_in_step > 0 && !s.m.G.picked_from_file)
        tune_in_steps(s.m.G, [&s]() { single_step(s); }, stream, o.tune_in_step, print && !o.quiet);
    std::vector<double> times;
    for (int i = 0; i < o.warmup + o.steps; i++) {
        CK(cudaStreamSynchronize(stream));
        double t0 = now_s();
        single_step(s);
        CK(cudaStreamSynchronize(stream));
        if (i >= o.warmup) times.push_back(now_s() - t0);
    }
    CK(cudaGetLastError());
    double med = median(times), mn = *std::min_element(times.begin(), times.end());
    float loss = 0;
    CK(cudaMemcpy(&loss, s.m.d_loss, sizeof loss, cudaMemcpyDeviceToHost));
    double flop = 6.0 * 2.0 * o.tokens * (double)o.hidden * 4.0 * o.hidden * o.layers * o.mb;
    if (print) {
        size_t free_b, total_b;
        CK(cudaMemGetInfo(&free_b, &total_b));
        printf("single-gpu   step %8.1f ms (min %8.1f)  %6.1f TFLOP/s  loss %.5f  peak %.1f GiB allocated\n",
               med * 1e3, mn * 1e3, flop / med / 1e12, loss, s.m.peak_bytes / 1073741824.0);
        fflush(stdout);
    }
    if (!keep) { single_free(s); CK(cudaStreamDestroy(stream)); }
    return med;
}

/* Gradient check: the same step on one GPU, whole model, and the relative error of every
 * weight gradient this rank holds. Returns the worst relative error. */
static double check_gradients(Rank &R, double *ref_step_s)
{
    const Options &o = *R.o;
    Single ref;
    Options quiet = o;
    quiet.warmup = 1; quiet.steps = 3;
    *ref_step_s = run_single(quiet, pp_nccl_device(R.pipe), false, &ref);
    CK(cudaSetDevice(pp_nccl_device(R.pipe)));
    double *d;
    CK(cudaMalloc(&d, 2 * sizeof(double)));
    double worst = 0;
    size_t wn = (size_t)R.m.F * R.m.H;
    for (int b = 0; b < o.layers; b++) {
        if (!R.m.W1[b]) continue;
        for (int w = 0; w < 2; w++) {
            double h[2];
            CK(cudaMemset(d, 0, 2 * sizeof(double)));
            diff_kernel<<<grid_for(wn), 256>>>(w ? R.m.dW2[b] : R.m.dW1[b], w ? ref.m.dW2[b] : ref.m.dW1[b], wn, d);
            CK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
            double rel = h[1] > 0 ? sqrt(h[0] / h[1]) : (h[0] > 0 ? INFINITY : 0);
            if (!(rel <= worst)) worst = rel;   /* NaN propagates */
        }
    }
    CK(cudaFree(d));
    cudaStream_t stream = ref.m.stream;
    single_free(ref);
    CK(cudaStreamDestroy(stream));
    return worst;
}

/* A pipepar call inside one of a rank's phases: on failure the rank says what failed and the
 * phase returns the process's exit code, 3 for a timeout (a peer died or hangs), else 1. After a
 * failure the process only reports and exits: freeing the executor would wait for streams that
 * may still hold work of the aborted communicator. */
static int exit_code(pp_status s) { return s == PP_ETIMEOUT ? 3 : 1; }
#define PPCK(call) do { pp_error e_; pp_status s_ = (call); if (s_ != PP_OK) { \
    fprintf(stderr, "mlp_gpu: rank %d: %s: %s\n", R.rank, pp_status_name(s_), e_.message); return exit_code(s_); } } while (0)
#define PHASE(call) do { int rc_ = (call); if (rc_) return rc_; } while (0)

/* 1. connect: the world communicator (rank, world and device from the launcher's environment,
 *    or with --threads from the thread) and the pipeline's, split by the rank grid. */
static int rank_connect(Rank &R, Shared *sh, int thread_rank)
{
    const Options &o = *R.o;
    pp_nccl_config nc;
    pp_error e0;
    memset(&nc, 0, sizeof nc);
    if (sh) { nc.world = sh->world; nc.rank = thread_rank; nc.device = thread_rank; nc.bootstrap = PP_NCCL_BOOTSTRAP_ID; nc.id = &sh->id; }
    nc.timeout_s = o.timeout;
    if (pp_nccl_init(&nc, &R.world_comm, &e0) != PP_OK) {
        fprintf(stderr, "mlp_gpu: rank %d: %s: %s\n", R.rank, pp_status_name(e0.status), e0.message);
        return exit_code(e0.status);
    }
    R.rank = pp_nccl_rank(R.world_comm);
    R.world = pp_nccl_world(R.world_comm);
    R.lead = R.rank == 0;
    if (o.slow_rank == R.rank) R.m.slow_extra = o.slow_factor - 1;   /* this process's GPU, wherever placed */
    R.pp = o.pp ? o.pp : R.world;
    if (R.pp != R.world) {
        fprintf(stderr, "mlp_gpu: --pp=%d: this example runs one pipeline, so pp must equal the world size (%d)\n", R.pp,
                R.world);
        return 2;
    }
    pp_grid grid;
    pp_grid_config gc;
    memset(&gc, 0, sizeof gc);
    gc.world = R.world; gc.pp = R.pp;
    PPCK(pp_grid_init(&gc, &grid, &e_));
    PPCK(pp_nccl_split(R.world_comm, &grid, PP_GROUP_PP, &R.pipe, &e_));   /* the pipeline's communicator */
    if (R.lead && !o.quiet) printf("%s\n", pp_nccl_describe(R.pipe));
    return 0;
}

/* The transfers as the search (and the placement) prices them. A boundary tensor's transfer in
 * units of a block's forward (its bytes over its FLOPs); staged through host memory it is two
 * copies over PCIe, several times NVLink's time per byte. Streamed (--send-parts P), the earlier
 * parts leave while the last is computed, and the receiver waits after the compute for about the
 * last part's copy: a P-th of the whole. Both as the reports measure them on H100s ("transfers
 * ... each": a group's end against the end of the compute that made its data whole), plus a
 * launch's latency. Candidates ranked as this runtime
 * posts their transfers: through the copy engines (processes of one host) a group per peer on
 * that peer's streams (pp_transport.independent_peers), else a round's in one group, waited as
 * a whole and in order. */
static void search_transfers(const Options &o, pp_sim_costs *c)
{
    const double whole = (o.via_host ? 1700.0 : 290.0) / o.hidden;
    c->p2p_latency = whole / o.send_parts + 0.01;
    c->grouped = o.copy_engine && !o.threads && !o.in_order ? 2 : 1;
}

/* Each block's costs as a plan's search ranks its splits (--search-layout) and the placement its
 * assignments: F = I = W, block 0's I half (it computes no input gradient: 1 GEMM of 2). */
static void block_costs(const Options &o, std::vector<pp_layer_costs> &per_block)
{
    per_block.assign((size_t)o.layers, pp_layer_costs());
    for (int b = 0; b < o.layers; b++) {
        per_block[b].f = 1; per_block[b].i = b == 0 ? 0.5 : 1; per_block[b].w = 1; per_block[b].memory = 1;
    }
}

/* The plan's options from the flags: the schedule (a kind, a search, or --schedule-csv's text, its
 * pp, mb and vpp checked against the run's below), --layout or --layers split evenly, the splits.
 * Search costs are in units of one block's forward: F = I = W per block (each is two GEMMs of the
 * same size; with --search-layout block 0's I is one GEMM), the transfers as search_transfers
 * prices them. */
static int plan_config(Rank &R, pp_plan_config &pc, std::vector<char> &csv, std::vector<pp_layer_costs> &per_block)
{
    const Options &o = *R.o;
    memset(&pc, 0, sizeof pc);
    if (o.schedule_csv) {
        char *text = nullptr, why[160];
        size_t len = 0;
        int rc = text_file_read(o.schedule_csv, &text, &len, why, sizeof why);
        if (rc) {
            if (R.lead) fprintf(stderr, "mlp_gpu: --schedule-csv=%s: %s\n", o.schedule_csv, why);
            return rc;
        }
        csv.assign(text, text + len + 1);
        free(text);
        pc.csv = csv.data(); pc.csv_len = len;
        pc.csv_name = strrchr(o.schedule_csv, '/') ? strrchr(o.schedule_csv, '/') + 1 : o.schedule_csv;
    } else {
        pc.pp = R.pp; pc.mb = o.mb; pc.vpp = o.vpp; pc.group = o.group;
        if (!strcmp(o.schedule, "search")) {
            pc.search = 1;
            if (o.search_kind && !strcmp(o.search_kind, "greedy")) pc.kind = PP_CUSTOM;
            else if (o.search_kind) PPCK(pp_schedule_kind_parse(o.search_kind, &pc.kind, &e_));
        } else {
            PPCK(pp_schedule_kind_parse(o.schedule, &pc.kind, &e_));
            if (pc.kind == PP_DUALPIPE) {
                /* two copies of every stage and their gradients summed: examples/mlp_threads.c shows it on CPU */
                if (R.lead) fprintf(stderr, "mlp_gpu: --schedule=dualpipe: not supported by this example (it keeps one copy "
                                    "of each stage's weights); use dualpipev, or examples/mlp_threads.c on CPU\n");
                return 2;
            }
        }
    }
    pc.layers = o.layers;
    pc.layout = o.layout;
    pc.search_layout = o.search_layout;
    if (o.search_layout) {   /* the splits searched on this process's share of the host's cores */
        long share = sysconf(_SC_NPROCESSORS_ONLN) / (R.world > 0 ? R.world : 1);
        pc.threads = share > 1 ? (int)(share < 64 ? share : 64) : 1;
        /* every stage from one block up: a small first and last stage shortens the start-up and
         * drain, and a slow rank's stages shrink (--adapt) */
        pc.layout_spread = std::max(1, o.layers / (R.pp * (o.vpp ? o.vpp : 1)) - 1);
    }
    pc.max_memory = o.max_memory;
    pc.costs.f = pc.costs.i = pc.costs.w = 1;
    search_transfers(o, &pc.costs);
    if (o.search_layout) {
        block_costs(o, per_block);
        pc.layer_costs = per_block.data();
    }
    pc.split_overlaps = !o.keep_overlaps;     /* this example has no overlapped F&B callback */
    pc.split_backward = o.split_backward;
    return 0;
}

/* A file's schedule must be this run's: its ranks, --mb, --vpp if given; and one copy a stage. */
static int csv_fits_run(Rank &R, const pp_schedule *s)
{
    const Options &o = *R.o;
    if (s->placement == PP_PLACEMENT_DUAL) {
        if (R.lead) fprintf(stderr, "mlp_gpu: --schedule-csv=%s: a DualPipe schedule (two copies of every stage, their "
                            "gradients summed): not supported by this example (it keeps one copy of each stage's "
                            "weights); use dualpipev, or examples/mlp_plan.c on CPU\n", o.schedule_csv);
        return 2;
    }
    if (s->pp != R.pp || s->mb != o.mb || (o.vpp && s->vpp != o.vpp)) {
        if (R.lead) fprintf(stderr, "mlp_gpu: --schedule-csv=%s: %d ranks, %d microbatches, %d chunks per rank; the run "
                            "has pp=%d and --mb=%d%s%s\n", o.schedule_csv, s->pp, s->mb, s->vpp, R.pp, o.mb,
                            o.vpp ? " and --vpp=" : "", o.vpp ? std::to_string(o.vpp).c_str() : "");
        return 2;
    }
    return 0;
}

/* --schedule search: what it tried and chose, and its simulated efficiency (F + I + W of every
 * block and microbatch, over pp ranks, against the winner's step; --adapt's plans, on measured
 * costs and speeds: the simulated step). */
static void print_search(const Rank &R, const pp_plan *plan)
{
    const Options &o = *R.o;
    const pp_search_entry *won = &plan->search->entries[0];
    double work = (3.0 * o.layers - (o.search_layout ? 0.5 : 0.0)) * o.mb;
    printf("search: %d schedules", plan->search->count);
    if (o.search_layout)
        printf(", each on %ld splits of the %d blocks (%ld of those pairs ruled out by their bound, unsimulated)",
               plan->search->layouts, o.layers, plan->search->ruled_out);
    else
        printf(" simulated");
    if (plan->costs.rank_speed)   /* --adapt's: measured costs in seconds, each rank at its own speed */
        printf("; the fastest: %s (simulated step %.1f ms, memory %.2f)\n", won->name, won->makespan * 1e3,
               won->peak_memory);
    else
        printf("; the fastest: %s (simulated efficiency %.2f%%, memory %.2f)\n", won->name,
               100.0 * work / R.pp / won->makespan, won->peak_memory);
    if (won->stage_layers) {
        int stages = R.pp * won->vpp;
        std::vector<char> text((size_t)pp_search_layout_text(won->stage_layers, stages, nullptr, 0) + 1);
        pp_search_layout_text(won->stage_layers, stages, text.data(), text.size());
        printf("search: its layout '%s'\n", text.data());
    }
}

/* 2. schedule: what the flags describe, made by pp_plan_build: the layer split (--layout, or
 *    --layers evenly), the schedule built, searched or read from --schedule-csv, lowered, FBs
 *    split into F then B (this example has no overlapped F&B callback: lowered split, the F's
 *    output leaves before the B runs), each B as I then W with --split-backward, proven. */
static int rank_schedule(Rank &R, pp_layers **lay)
{
    const Options &o = *R.o;
    pp_plan_config pc;
    pp_plan *plan = nullptr;
    pp_error pe;
    std::vector<char> csv;
    std::vector<pp_layer_costs> per_block;
    PHASE(plan_config(R, pc, csv, per_block));
    pp_status st = pp_plan_build(&pc, &plan, &pe);
    if (st != PP_OK) {
        if (R.lead && o.schedule_csv) fprintf(stderr, "mlp_gpu: --schedule-csv=%s: %s\n", o.schedule_csv, pe.message);
        else if (R.lead) fprintf(stderr, "mlp_gpu: %s\n", pe.message);
        return st == PP_ENOMEM ? 1 : 2;
    }
    if (o.schedule_csv && csv_fits_run(R, plan->schedule)) { pp_plan_free(plan); return 2; }
    if (plan->search && R.lead) print_search(R, plan);   /* even with --quiet: what ran is part of every result */
    R.sched = plan->schedule;        /* the rank's now, and the layers too */
    *lay = plan->layers;
    plan->schedule = nullptr;
    plan->layers = nullptr;
    snprintf(R.sched_name, sizeof R.sched_name, "%s", plan->name);
    pp_plan_free(plan);
    R.S = R.sched->num_stages;
    R.vpp = R.sched->vpp;
    for (int r = 0; r < R.pp; r++) {
        R.maxlen = std::max(R.maxlen, R.sched->length[r]);
        for (int i = 0; i < R.sched->length[r]; i++) R.split |= R.sched->actions[r][i].op == PP_OP_I;
    }
    return 0;
}

#include "mlp_gpu_place.h"    /* 3. place: rank_place (--place-by-speed) */

/* The executor's transport: NCCL's, with the copy engines and the arrival gate unless turned
 * off. Copy engines: each transfer is one copy straight between the two buffers (the arena is
 * cudaMalloc'ed, so CUDA IPC shares it); the ring only carries what cannot be shared: 8 slots of
 * one boundary tensor, at most 16 MiB (a 64 MiB tensor goes as 4 pieces, so the receiver's copy
 * out of the ring overlaps the next piece's arrival). */
static int rank_transport(Rank &R)
{
    const Options &o = *R.o;
    PPCK(pp_nccl_transport(R.pipe, R.stream, &R.tp, &e_));
    if (o.copy_engine) {
        size_t tensor = (size_t)o.tokens * o.hidden * sizeof(bf16);
        /* staged through the host, every transfer goes through the ring, in /dev/shm: pieces of
         * 4 MiB, four in flight per peer (the receiver's copy of one overlaps the next's arrival) */
        size_t slot = std::min<size_t>(o.via_host ? (size_t)4 << 20 : (size_t)16 << 20, (tensor + 4095) / 4096 * 4096);
        int peers = 0, slots = o.via_host ? 4 : 8;
        if (o.via_host) PPCK(pp_nccl_transport_copy_engine_via_host(&R.tp, 1, &e_));
        PPCK(pp_nccl_transport_copy_engine(&R.tp, slot, slots, &peers, &e_));
        if (R.lead && !o.quiet)
            printf("copy engines: %d peer(s), %d slots of %.2f MiB each%s\n", peers, slots, slot / 1048576.0,
                   o.via_host ? ", staged through pinned host memory" : "");
        if (peers == 0 && R.m.send_parts > 1) {   /* NCCL's kernels send a tensor whole: no GEMM split for it */
            if (R.lead) printf("--send-parts %d: no peer on the copy engines, so every tensor goes whole\n", R.m.send_parts);
            R.m.send_parts = 1;
        }
    }
    if (o.in_order) R.tp.independent_peers = 0;   /* a round's transfers in one group, waited in order */
    if (R.lead && o.schedule && !strcmp(o.schedule, "search") && !o.threads && !o.in_order &&
        o.copy_engine != R.tp.independent_peers)
        printf("note: the search ranked its candidates with a group per peer, but some peer is left to NCCL: the "
               "transfers go a group per round, in order\n");
    if (o.gate) {
        int gated = 0;
        PPCK(pp_nccl_transport_gate(&R.tp, &gated, &e_));
        if (R.lead && !o.quiet) printf("arrival gate: %d peer(s) gated\n", gated);
    }
    return 0;
}

/* This rank's peak of live (stage, microbatch) activations by stage size (slots of one size serve
 * only stages of that size) and its I->W buffers, counted from its program and split. */
static int rank_slots(Rank &R)
{
    R.slot_summary.clear();
    std::vector<int> peak(R.m.nb + 1, 0), unused(R.m.nb + 1, 0);
    int awaiting = 0;
    PPCK(pp_schedule_rank_peaks(R.sched, R.rank, R.m.count.data(), R.m.nb + 1, peak.data(), unused.data(), &e_));
    PPCK(pp_schedule_rank_peaks(R.sched, R.rank, nullptr, 1, nullptr, &awaiting, &e_));
    for (int c = 0; c < R.vpp; c++) R.m.iw_nb = std::max(R.m.iw_nb, R.m.count[pp_rank_chunk_stage(R.sched, R.rank, c)]);
    for (int i = 0; i < awaiting; i++) {
        R.m.iw_bufs.push_back((bf16 *)dev_alloc(R.m, iw_size(R.m)));
        R.m.iw_free.push_back(i);
    }
    for (int c = 1; c <= R.m.nb; c++) {
        std::vector<int> held;
        for (int i = 0; i < peak[c]; i++) held.push_back(slot_get(R.m, c));
        for (int i : held) R.m.free_slots[c].push_back(i);
        if (peak[c]) R.slot_summary += (R.slot_summary.empty() ? "" : ", ") + std::to_string(peak[c]) + " of " +
                                       std::to_string(c) + " block" + (c > 1 ? "s" : "");
    }
    return 0;
}

/* The activation slots and I->W buffers given back (rank_slots makes them again): between steps,
 * for a new split (--adapt) or to make room for the single-GPU reference (--check). */
static int release_slots(Rank &R)
{
    CK(cudaStreamSynchronize(R.stream));
    for (size_t i = 0; i < R.m.slots.size(); i++) {
        CK(cudaFree(R.m.slots[i]));
        R.m.bytes -= slot_size(R.m, R.m.slot_nb[i]);
    }
    for (bf16 *p : R.m.iw_bufs) { CK(cudaFree(p)); R.m.bytes -= iw_size(R.m); }
    R.m.slots.clear(); R.m.slot_nb.clear();
    R.m.iw_bufs.clear(); R.m.iw_free.clear(); R.m.iw_nb = 0;
    R.m.free_slots.assign(R.m.nb + 1, std::vector<int>());
    return 0;
}

/* Every buffer of a step, before any transfer: the executor's planned peak of boundary tensors
 * (one arena), and the slots and I->W buffers (rank_slots). */
static int rank_buffers(Rank &R)
{
    pp_executor_stats stats;
    pp_executor_get_stats(R.ex, &stats);
    size_t tb = ((size_t)R.m.T * R.m.H * sizeof(bf16) + 255) & ~(size_t)255;
    R.arena_bytes = tb * (size_t)(stats.planned_slots > 0 ? stats.planned_slots : 1);
    R.arena = (char *)dev_alloc(R.m, R.arena_bytes);
    return rank_slots(R);
}

/* The executor of R.sched, timing every action with CUDA events (the timer sized for the longest
 * rank program). */
static int rank_executor(Rank &R)
{
    const Options &o = *R.o;
    PPCK(pp_nccl_event_timer(R.stream, 3 * R.maxlen + 3, &R.timer, &e_));
    pp_executor_config ec;
    memset(&ec, 0, sizeof ec);
    ec.schedule = R.sched;
    ec.transport = R.tp;
    ec.callbacks.user = &R;
    ec.callbacks.tensor_bytes = cb_tensor_bytes;
    ec.callbacks.input = cb_input;
    ec.callbacks.forward = cb_forward;
    ec.callbacks.loss = cb_loss;
    ec.callbacks.backward = cb_backward;
    ec.callbacks.backward_input = cb_backward_input;
    ec.callbacks.backward_weight = cb_backward_weight;
    ec.allocator.user = &R;
    ec.allocator.alloc = cb_alloc;
    ec.allocator.free = cb_free;
    ec.timeout_s = o.timeout;
    ec.record_timeline = 1;
    ec.timer = R.timer;
    PPCK(pp_executor_create(&ec, &R.ex, &e_));
    R.m.ex = R.ex;   /* the callbacks' parts of a streamed output (--send-parts) */
    return 0;
}

/* 4. build: this rank's blocks (stage s holds blocks [first[s], first[s] + count[s]), placed by
 *    the schedule), its data, the transport, the executor timing every action with CUDA events,
 *    and every buffer of a step. */
static int rank_build(Rank &R, pp_layers *lay, double t_start)
{
    const Options &o = *R.o;
    CK(cudaSetDevice(pp_nccl_device(R.pipe)));
    CK(cudaStreamCreateWithFlags(&R.stream, cudaStreamNonBlocking));
    model_setup(R.m, o, R.S, lay ? lay->count : nullptr, R.stream, R.lead && !o.quiet);
    for (int c = 0; c < R.vpp; c++) {
        int s = pp_rank_chunk_stage(R.sched, R.rank, c);
        R.first |= s == 0;
        R.last |= s == R.S - 1;
        for (int j = 0; j < R.m.count[s]; j++) R.blocks.push_back(R.m.first[s] + j);
    }
    R.adamw = !strcmp(o.optimizer, "adamw") && o.train > 0;
    model_init_blocks(R.m, R.blocks, R.adamw);
    model_data(R.m, R.first, R.last);
    R.m.saved.assign((size_t)R.vpp * o.mb, -1);
    R.m.iw_of.assign((size_t)R.vpp * o.mb, -1);
    PHASE(rank_transport(R));
    PHASE(rank_executor(R));
    PHASE(rank_buffers(R));
    CK(cudaStreamSynchronize(R.stream));
    if (R.lead && !o.quiet) {
        std::string per;
        for (int st = 0; st < R.S; st++) per += (st ? "," : "") + std::to_string(R.m.count[st]);
        printf("schedule %s pp %d vpp %d mb %d: %d stages of %s blocks, H %d, %d tokens per microbatch; set-up %.1f s\n",
               R.sched_name[0] ? R.sched_name : pp_schedule_kind_name(R.sched->kind), R.pp, R.vpp, o.mb, R.S, per.c_str(),
               o.hidden, o.tokens, now_s() - t_start);
        printf("rank %d activation slots (one per live stage and microbatch, by stage size): %s\n", R.rank,
               R.slot_summary.c_str());
        fflush(stdout);
    }
    if (!o.quiet && !R.m.iw_bufs.empty()) {   /* every rank: their programs hold different numbers */
        char line[200];
        snprintf(line, sizeof line, "rank %d I->W buffers (each I's dh and dy until its W): %zu of %d block%s, for the "
                 "most I's awaiting their W at once", R.rank, R.m.iw_bufs.size(), R.m.iw_nb, R.m.iw_nb > 1 ? "s" : "");
        printf("%s\n", line);
        fflush(stdout);
    }
    return 0;
}

/* 5. time: each step between a device sync and a barrier on both ends, as the PyTorch bench
 *    times; the last step's transfer groups recorded. */
static int rank_time(Rank &R, Timing &T)
{
    const Options &o = *R.o;
    T.groups.resize(4096);
    for (int i = 0; i < o.warmup + o.steps; i++) {
        pp_step_result res;
        bool final_step = i == o.warmup + o.steps - 1;
        PPCK(pp_nccl_sync(R.pipe, R.stream, 0, &e_));
        PPCK(pp_nccl_barrier(R.pipe, 0, &e_));
        if (final_step) PPCK(pp_nccl_transport_record(&R.tp, 1, &e_));
        double step_t0 = now_s();
        cudaEvent_t base;
        CK(cudaEventCreate(&base));
        CK(cudaEventRecord(base, R.stream));
        model_begin_step(R.m);
        R.m.step_no = i;
        {
            pp_error e_;
            pp_status s_ = pp_run_step(R.ex, NULL, &res, &e_);
            if (s_ != PP_OK) {
                fprintf(stderr, "mlp_gpu: rank %d: %s after %.2f s in step %d: %s\n", R.rank, pp_status_name(s_),
                        now_s() - step_t0, i, e_.message);
                return exit_code(s_);
            }
        }
        PPCK(pp_nccl_sync(R.pipe, R.stream, 0, &e_));
        PPCK(pp_nccl_barrier(R.pipe, 0, &e_));
        if (i >= o.warmup) {
            T.times.push_back(now_s() - step_t0);
            pp_timeline tl;   /* the executor's timeline of this step: does the step vary by compute or by waits? */
            PPCK(pp_executor_timeline(R.ex, &tl, &e_));
            double busy = 0;
            for (int a = 0; a < tl.length; a++)
                if (tl.actions[a].op <= PP_OP_FB && tl.ready[a] >= 0) busy += tl.end[a] - tl.ready[a];
            T.busy.push_back(busy);
        }
        if (final_step) {
            PPCK(pp_nccl_transport_times(&R.tp, base, T.groups.data(), (int)T.groups.size(), &T.ngroups, &e_));
            PPCK(pp_nccl_transport_record(&R.tp, 0, &e_));
            T.last_t0 = step_t0;
        }
        CK(cudaEventDestroy(base));
    }
    float h_loss = 0;
    CK(cudaMemcpy(&h_loss, R.m.d_loss, sizeof h_loss, cudaMemcpyDeviceToHost));
    T.loss = R.last ? h_loss : 0;
    PPCK(pp_nccl_all_reduce_host(R.pipe, &T.loss, 1, 0, &e_));
    return 0;
}

/* --check: the pipelined gradients against the single-GPU run of the whole model; the worst
 * relative error over every rank, and the single step's time if none was given. */
static int rank_check(Rank &R, double *single_s, int *failed)
{
    const Options &o = *R.o;
    double ref_s = 0, worst, w = 0;
    /* the reference runs on this GPU beside the pipeline: the slots make room for it meanwhile */
    PHASE(release_slots(R));
    worst = check_gradients(R, &ref_s);
    PHASE(rank_slots(R));
    float v[2] = { (float)worst, R.lead ? (float)ref_s : 0.0f };
    std::vector<float> wmax(R.world, 0.0f);
    wmax[R.rank] = (float)worst;
    PPCK(pp_nccl_all_reduce_host(R.pipe, v, 2, 0, &e_));
    PPCK(pp_nccl_all_reduce_host(R.pipe, wmax.data(), R.world, 0, &e_));
    for (int r = 0; r < R.world; r++) if (!(wmax[r] <= w)) w = wmax[r];   /* NaN propagates */
    *failed = !(w <= 2e-2);
    if (*single_s <= 0) *single_s = v[1];
    if (R.lead) {
        printf("gradient check vs single GPU: worst relative error %.3g over %d weight tensors (tolerance 2e-2): %s\n",
               w, 2 * o.layers, *failed ? "FAIL" : "ok, gradients match");
        fflush(stdout);
    }
    return 0;
}

#include "mlp_gpu_report.h"   /* 6. report: rank_measure, report_print, rank_where */
#include "mlp_gpu_adapt.h"    /* --adapt: rank_adapt */

/* 7. train (--train N): N steps, each clipping the global gradient norm (every pipeline rank's
 *    sum of squares: pp_cuda_l2norm, pp_nccl_grad_norm on the device) and stepping SGD or AdamW. */
static int rank_train(Rank &R)
{
    const Options &o = *R.o;
    if (o.train <= 0) return 0;
    std::vector<pp_cuda_tensor> tens;
    size_t wn = (size_t)R.m.F * R.m.H;
    for (int b : R.blocks) {
        pp_cuda_tensor t1 = { R.m.dW1[b], (int64_t)wn, PP_CUDA_F32 }, t2 = { R.m.dW2[b], (int64_t)wn, PP_CUDA_F32 };
        tens.push_back(t1); tens.push_back(t2);
    }
    pp_cuda_l2norm *plan = NULL;
    PPCK(pp_cuda_l2norm_create(tens.data(), (int)tens.size(), &plan, &e_));
    float *d_norm;
    CK(cudaMalloc(&d_norm, 2 * sizeof(float)));
    for (int t = 1; t <= o.train; t++) {
        model_begin_step(R.m);
        R.m.step_no = o.warmup + o.steps + t;
        PPCK(pp_run_step(R.ex, NULL, NULL, &e_));
        PPCK(pp_cuda_l2norm_sumsq(plan, d_norm, 0, NULL, R.stream, &e_));
        PPCK(pp_nccl_grad_norm(R.pipe, d_norm, o.clip, d_norm + 1, R.stream, &e_));
        for (int b : R.blocks) {
            if (R.adamw) {
                adamw_kernel<<<grid_for(wn), 256, 0, R.stream>>>(R.m.W1[b], R.m.dW1[b], R.m.m1[b], R.m.v1[b], wn, o.lr, t, d_norm + 1);
                adamw_kernel<<<grid_for(wn), 256, 0, R.stream>>>(R.m.W2[b], R.m.dW2[b], R.m.m2[b], R.m.v2[b], wn, o.lr, t, d_norm + 1);
            } else {
                sgd_kernel<<<grid_for(wn), 256, 0, R.stream>>>(R.m.W1[b], R.m.dW1[b], wn, o.lr, d_norm + 1);
                sgd_kernel<<<grid_for(wn), 256, 0, R.stream>>>(R.m.W2[b], R.m.dW2[b], wn, o.lr, d_norm + 1);
            }
        }
        CK(cudaGetLastError());
        PPCK(pp_nccl_sync(R.pipe, R.stream, 0, &e_));
        float hv[3] = { 0, 0, 0 };
        CK(cudaMemcpy(hv, d_norm, 2 * sizeof(float), cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(&hv[2], R.m.d_loss, sizeof(float), cudaMemcpyDeviceToHost));
        float lv = R.last ? hv[2] : 0;
        PPCK(pp_nccl_all_reduce_host(R.pipe, &lv, 1, 0, &e_));
        if (R.lead) printf("train step %3d  loss %.6f  grad norm %.4f  clip scale %.4f\n", t, (double)lv, sqrt((double)hv[0]), (double)hv[1]);
    }
    if (R.lead) fflush(stdout);
    pp_cuda_l2norm_free(plan);
    CK(cudaFree(d_norm));
    return 0;
}

static int run_rank(const Options &o, Shared *sh, int thread_rank)
{
    Rank R;
    Timing T;
    Measured M;
    pp_layers *lay = nullptr;
    double t_start = now_s(), single_s = o.single_ms > 0 ? o.single_ms * 1e-3 : 0;
    int check_failed = 0;
    R.o = &o;
    R.rank = sh ? thread_rank : -1;
    PHASE(rank_connect(R, sh, thread_rank));
    PHASE(rank_schedule(R, &lay));
    PHASE(rank_place(R, lay));
    PHASE(rank_build(R, lay, t_start));
    pp_layers_free(lay);   /* the stages' sizes now live in R.m.first / count */
    PHASE(rank_time(R, T));
    PHASE(rank_measure(R, T, M));
    if (o.adapt) {   /* the report of the first split, new splits for the measured speeds, their steps */
        if (R.lead) { printf("before --adapt:\n"); report_print(R, T, M, single_s); }
        /* A GPU that waits for part of the step runs faster while it computes (it clocks higher
         * under its power limit), so speeds measured on an uneven split overstate the waiting
         * rank's: the first new split can overshoot. Each round measures the split that ran and
         * re-plans from there; the rounds end where a split is kept (the gain not over 2%) or one
         * that ran comes back, and the fastest split measured is the one that stays. */
        PHASE(rank_adapt_rounds(R, T, M));
    }
    if (o.check) PHASE(rank_check(R, &single_s, &check_failed));
    if (R.lead) report_print(R, T, M, single_s);
    PHASE(rank_where(R, T, M));
    PHASE(rank_train(R));
    pp_executor_free(R.ex);
    pp_nccl_timer_free(&R.timer);
    pp_nccl_transport_free(&R.tp);
    for (void *p : R.retired) CK(cudaFree(p));
    pp_schedule_free(R.sched);
    pp_nccl_free(R.pipe);
    pp_nccl_free(R.world_comm);
    gemms_free(R.m.G);
    return check_failed ? 4 : 0;
}

static void *rank_thread(void *arg)
{
    Shared *sh = ((std::pair<Shared *, int> *)arg)->first;
    int r = ((std::pair<Shared *, int> *)arg)->second;
    sh->status[r] = run_rank(*sh->o, sh, r);
    return NULL;
}

int main(int argc, char **argv)
{
    Options o;
    int rc = parse_args(argc, argv, &o);
    if (rc || (rc = check_args(&o))) return rc;
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* NCCL >= 2.22 connects peers lazily, at the first transfer, inside a step; the connection
     * set-up allocates device memory on both ranks, which can wait behind kernels already in
     * flight. Connecting everything at init (NCCL's behaviour before 2.22) keeps set-up out of the
     * step. A value the user set wins. */
    setenv("NCCL_RUNTIME_CONNECT", "0", 0);
    /* --via-host keeps the GPUs' links idle: NCCL's own few collectives (the step's barrier, the
     * loss, the placement and the gradient check) then go through host memory too. A value the
     * user set wins. */
    if (o.via_host) setenv("NCCL_P2P_DISABLE", "1", 0);
    if (o.single) {
        const char *lr = getenv("LOCAL_RANK");
        int device = lr ? atoi(lr) : 0;
        run_single(o, device, true, NULL);
        return 0;
    }
    if (o.threads) {
        /* one process, one thread per GPU: the unique id is passed in memory */
        Shared sh;
        pp_error err;
        sh.o = &o;
        sh.world = o.threads;
        if (pp_nccl_unique_id(&sh.id, &err) != PP_OK) { fprintf(stderr, "mlp_gpu: %s\n", err.message); return 1; }
        std::vector<pthread_t> th(o.threads);
        std::vector<std::pair<Shared *, int>> args(o.threads);
        for (int r = 0; r < o.threads; r++) {
            args[r] = std::make_pair(&sh, r);
            pthread_create(&th[r], NULL, rank_thread, &args[r]);
        }
        rc = 0;
        for (int r = 0; r < o.threads; r++) { pthread_join(th[r], NULL); if (sh.status[r] > rc) rc = sh.status[r]; }
        return rc;
    }
    return run_rank(o, NULL, 0);
}
