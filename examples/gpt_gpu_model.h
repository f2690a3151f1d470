/* gpt_gpu_model.h — the model of examples/gpt_model.h on a GPU: kernels, cuBLASLt GEMMs, and a
 * stage's forward and backward over one packed microbatch. Part of examples/gpt_gpu.cu (the
 * trainer around it), split out so that each file reads top to bottom.
 *
 * The same model, layer for layer, and the same weights: gpt_model.h lays a stage's parameters
 * out (gpt_layout, here over device memory) and draws its initial values (gpt_stage_init), so a
 * stage here starts equal to the same layers of the CPU model, and --selftest compares the two.
 *
 * Precision (chosen when building, as llm.c does): floatX is bf16 (build/gpt_gpu) or fp32
 * (build/gpt_gpu_fp32, -DGPT_GPU_FP32, for checking against the CPU model at fp32's precision).
 * Masters, gradients and AdamW's moments are fp32; every GEMM reads a floatX copy of the weights
 * (refreshed by the update) and floatX activations and accumulates in fp32; weight gradients are
 * accumulated in fp32 straight out of the GEMMs; norms, softmaxes and the loss compute in fp32.
 *
 * Shapes are row-major, as gpt_model.h writes them (T local tokens, Tk microbatch tokens, C
 * width, NH heads of hs = C / NH, H = 4C, E experts of He, top K, V vocabulary). cuBLASLt is
 * column-major: a row-major [r, c] matrix with leading dimension ld is a column-major [c, r] one,
 * which is how every gemm() call below reads.
 *
 * Attention is restricted to each packed sequence and causal, computed by spans: a span is a run
 * of this rank's query rows of one sequence against that sequence's keys up to the span's last
 * query. Per span, batched over the heads, S = Q K^T / sqrt(hs) into a block of P (cuBLASLt), our
 * kernel turns each row into softmax probabilities with the keys past the query masked, and
 * O = P V (cuBLASLt). A sequence is one span (two under context parallelism, one per chunk of
 * the 2*cp split), cut into query blocks of at most attn_block rows, so the masked upper blocks
 * of S are never computed. Under cp, every rank's keys and values are all-gathered over the cp
 * group and put in sequence order (pp_cuda_cp_merge_thd); their gradients are summed over the
 * group and each rank keeps its own rows (pp_cuda_cp_split_thd).                              */
#ifndef GPT_GPU_MODEL_H
#define GPT_GPU_MODEL_H

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cublasLt.h>
#include <cub/block/block_scan.cuh>
#include <stdio.h>
#include <algorithm>
#include <array>
#include <map>
#include <vector>
#include "../pipepar.h"
#include "gpt_model.h"

#ifdef GPT_GPU_FP32
typedef float floatX;
static const cudaDataType_t CUDA_R_X = CUDA_R_32F;
#define GPT_PRECISION "fp32"
#else
typedef __nv_bfloat16 floatX;
static const cudaDataType_t CUDA_R_X = CUDA_R_16BF;
#define GPT_PRECISION "bf16"
#endif

#define GPT_MAX_LAYERS 128      /* --layers' bound */
#define GPT_MAX_EXPERTS 64      /* --experts' bound (the router keeps a token's E values in registers) */

#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    fprintf(stderr, "gpt_gpu: %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); exit(1); } } while (0)
#define CKLT(call) do { cublasStatus_t s_ = (call); if (s_ != CUBLAS_STATUS_SUCCESS) { \
    fprintf(stderr, "gpt_gpu: %s:%d: %s: cuBLAS status %d\n", __FILE__, __LINE__, #call, (int)s_); exit(1); } } while (0)

static int grid_for(size_t n) { size_t b = (n + 255) / 256; return (int)(b > 132 * 32 ? 132 * 32 : (b ? b : 1)); }
#define GRID_STRIDE(i, n) for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); \
                               i += (size_t)gridDim.x * blockDim.x)

__device__ __forceinline__ float f32(float v) { return v; }
__device__ __forceinline__ float f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16(v); }
__device__ __forceinline__ floatX toX(float v) { return from_f32<floatX>(v); }

/* ============================================================================================
 * GEMMs: cuBLASLt, one plan per shape (made on its first call, kept)
 * ============================================================================================ */

struct GemmPlan {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
};

struct Blas {
    cublasLtHandle_t lt = nullptr;
    void *workspace = nullptr;
    size_t workspace_bytes = (size_t)32 << 20;
    cudaStream_t stream = nullptr;
    std::map<std::array<int64_t, 16>, GemmPlan> plans;
};

/* The largest power of two (at most 256) dividing an operand's address, leading dimension and
 * batch stride in bytes: cuBLASLt's kernels each need some alignment, and the heuristic is told. */
static uint32_t align_of(const void *p, int64_t ld, int64_t stride, int batch, size_t esize)
{
    uint64_t v = (uint64_t)(uintptr_t)p | (uint64_t)ld * esize | (batch > 1 ? (uint64_t)stride * esize : 0) | 256;
    return (uint32_t)(v & (~v + 1));
}

static void blas_create(Blas &G, cudaStream_t stream)
{
    CKLT(cublasLtCreate(&G.lt));
    CK(cudaMalloc(&G.workspace, G.workspace_bytes));
    G.stream = stream;
}

static void blas_free(Blas &G)
{
    for (auto &kv : G.plans) {
        cublasLtMatmulDescDestroy(kv.second.desc);
        cublasLtMatrixLayoutDestroy(kv.second.a);
        cublasLtMatrixLayoutDestroy(kv.second.b);
        cublasLtMatrixLayoutDestroy(kv.second.d);
    }
    G.plans.clear();
    if (G.workspace) cudaFree(G.workspace);
    if (G.lt) cublasLtDestroy(G.lt);
    G.workspace = nullptr; G.lt = nullptr;
}

static void layout_batch(cublasLtMatrixLayout_t l, int batch, int64_t stride)
{
    if (batch <= 1) return;
    CKLT(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch));
    CKLT(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
}

/* D = alpha op(A) op(B) + beta C in column-major terms, D [m, n], op(A) [m, k], op(B) [k, n];
 * `batch` such products, each operand `s*` elements after the previous one. A and B are floatX;
 * C and D are dtype (floatX, or fp32 for weight gradients) with the same layout; C may be D. */
static void gemm(Blas &G, bool ta, bool tb, int m, int n, int k, float alpha, const floatX *A, int64_t lda,
                 int64_t sa, const floatX *B, int64_t ldb, int64_t sb, float beta, const void *C, void *D,
                 cudaDataType_t dtype, int64_t ldd, int64_t sd, int batch)
{
    if (m <= 0 || n <= 0 || batch <= 0) return;
    if (k <= 0) {   /* no terms: D = beta C, which only the accumulating calls (beta 1, C == D) meet */
        if (beta == 1.0f && C == D) return;
        fprintf(stderr, "gpt_gpu: gemm with k=%d and beta=%g: not supported\n", k, (double)beta);
        exit(1);
    }
    const size_t es = dtype == CUDA_R_32F ? 4 : sizeof(floatX);
    const uint32_t aa = align_of(A, lda, sa, batch, sizeof(floatX)), ab = align_of(B, ldb, sb, batch, sizeof(floatX));
    const uint32_t ad = std::min(align_of(C, ldd, sd, batch, es), align_of(D, ldd, sd, batch, es));
    const std::array<int64_t, 16> key = { ta, tb, m, n, k, lda, ldb, ldd, sa, sb, sd, batch, (int64_t)dtype, aa, ab, ad };
    auto it = G.plans.find(key);
    if (it == G.plans.end()) {
        GemmPlan p;
        const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
        CKLT(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        CKLT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
        CKLT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
        CKLT(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_X, ta ? k : m, ta ? m : k, lda));
        CKLT(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_X, tb ? n : k, tb ? k : n, ldb));
        CKLT(cublasLtMatrixLayoutCreate(&p.d, dtype, m, n, ldd));
        layout_batch(p.a, batch, sa); layout_batch(p.b, batch, sb); layout_batch(p.d, batch, sd);
        cublasLtMatmulPreference_t pref;
        CKLT(cublasLtMatmulPreferenceCreate(&pref));
        CKLT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &G.workspace_bytes,
                                                  sizeof G.workspace_bytes));
        CKLT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof aa));
        CKLT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab, sizeof ab));
        CKLT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ad, sizeof ad));
        CKLT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ad, sizeof ad));
        cublasLtMatmulHeuristicResult_t res;
        int found = 0;
        CKLT(cublasLtMatmulAlgoGetHeuristic(G.lt, p.desc, p.a, p.b, p.d, p.d, pref, 1, &res, &found));
        CKLT(cublasLtMatmulPreferenceDestroy(pref));
        if (found < 1) {
            fprintf(stderr, "gpt_gpu: cuBLASLt has no kernel for a %s GEMM %c%c m=%d n=%d k=%d lda=%lld ldb=%lld ldd=%lld "
                    "batch=%d (alignment %u/%u/%u bytes)\n", GPT_PRECISION, ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k,
                    (long long)lda, (long long)ldb, (long long)ldd, batch, aa, ab, ad);
            exit(1);
        }
        p.algo = res.algo;
        it = G.plans.emplace(key, p).first;
    }
    const GemmPlan &p = it->second;
    CKLT(cublasLtMatmul(G.lt, p.desc, &alpha, A, p.a, B, p.b, &beta, C, p.d, D, p.d, &p.algo, G.workspace,
                        G.workspace_bytes, G.stream));
}

/* The three products of a linear layer y = x W^T, W [OC, IC] row-major as PyTorch stores it. */

/* out [T, OC] = in [T, IC] W^T, plus res [T, OC] when given (a residual connection) */
static void linear(Blas &G, floatX *out, const floatX *in, const floatX *W, int T, int IC, int OC,
                   const floatX *res = nullptr)
{
    gemm(G, true, false, OC, T, IC, 1.0f, W, IC, 0, in, IC, 0, res ? 1.0f : 0.0f, res ? res : out, out, CUDA_R_X, OC,
         0, 1);
}

/* din [T, IC] = dout [T, OC] W, or += with beta 1 */
static void linear_dx(Blas &G, floatX *din, const floatX *dout, const floatX *W, int T, int IC, int OC, float beta = 0)
{
    gemm(G, false, false, IC, T, OC, 1.0f, W, IC, 0, dout, OC, 0, beta, din, din, CUDA_R_X, IC, 0, 1);
}

/* dW [OC, IC] fp32 += dout^T in */
static void linear_dw(Blas &G, float *dW, const floatX *dout, const floatX *in, int T, int IC, int OC)
{
    gemm(G, false, true, IC, OC, T, 1.0f, in, IC, 0, dout, OC, 0, 1.0f, dW, dW, CUDA_R_32F, IC, 0, 1);
}

/* ============================================================================================
 * kernels, each with its backward beside it (formulas as gpt_model.h's building blocks)
 * ============================================================================================ */

/* The sum (or max) over a block, on every thread. blockDim.x a multiple of 32, at most 1024. */
template <bool MAX>
__device__ float block_reduce(float v)
{
    __shared__ float part[32];
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = MAX ? fmaxf(v, w) : v + w;
    }
    __syncthreads();            /* a previous call's readers are done with part[] */
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    float r = MAX ? -INFINITY : 0.0f;
    for (int i = 0; i < (int)(blockDim.x >> 5); i++) r = MAX ? fmaxf(r, part[i]) : r + part[i];
    return r;
}

template <class D, class S>
__global__ void convert_kernel(D *dst, const S *src, size_t n)
{
    GRID_STRIDE(i, n) dst[i] = from_f32<D>(f32(src[i]));
}

/* dst [rows, cols] (leading dimension ldd) = src [rows, cols] (lds), converted */
template <class D, class S>
__global__ void copy_cols_kernel(D *dst, int64_t ldd, const S *src, int64_t lds, int rows, int cols)
{
    GRID_STRIDE(i, (size_t)rows * cols) {
        size_t r = i / cols, c = i % cols;
        dst[r * ldd + c] = from_f32<D>(f32(src[r * lds + c]));
    }
}

/* x [T, C] = wte[id] + wpe[position in its sequence] */
__global__ void embed_fwd_kernel(floatX *x, const int *ids, const int *pos, const floatX *wte, const floatX *wpe,
                                 int T, int C)
{
    GRID_STRIDE(i, (size_t)T * C) {
        size_t t = i / C, c = i % C;
        x[i] = toX(f32(wte[(size_t)ids[t] * C + c]) + f32(wpe[(size_t)pos[t] * C + c]));
    }
}

/* each token's row of dwte and its position's row of dwpe += dx (tokens may share rows) */
__global__ void embed_bwd_kernel(float *gwte, float *gwpe, const floatX *dx, const int *ids, const int *pos, int T, int C)
{
    GRID_STRIDE(i, (size_t)T * C) {
        size_t t = i / C, c = i % C;
        float d = f32(dx[i]);
        atomicAdd(&gwte[(size_t)ids[t] * C + c], d);
        atomicAdd(&gwpe[(size_t)pos[t] * C + c], d);
    }
}

/* RMSNorm, one block per token: out = x / rms(x) * g, rms = sqrt(mean(x^2) + 1e-5); rs = 1 / rms */
__global__ void rmsnorm_fwd_kernel(floatX *out, float *rs, const floatX *x, const floatX *g, int C)
{
    const floatX *xt = x + (size_t)blockIdx.x * C;
    float ss = 0;
    for (int i = threadIdx.x; i < C; i += blockDim.x) ss += f32(xt[i]) * f32(xt[i]);
    ss = block_reduce<false>(ss);
    const float r = 1.0f / sqrtf(ss / (float)C + 1e-5f);
    if (threadIdx.x == 0) rs[blockIdx.x] = r;
    for (int i = threadIdx.x; i < C; i += blockDim.x) out[(size_t)blockIdx.x * C + i] = toX(f32(xt[i]) * r * f32(g[i]));
}

/* dx = dres + r g dout - x r^3 / C sum(g dout x) (dres may be dx, or NULL for none);
 * dg += sum over tokens of dout x r. A block takes `rows` tokens and adds its share of dg once
 * (dynamic shared memory: C floats). */
__global__ void rmsnorm_bwd_kernel(floatX *dx, float *dg, const floatX *dout, const floatX *x, const float *rs,
                                   const floatX *g, const floatX *dres, int T, int C, int rows)
{
    extern __shared__ float sdg[];
    for (int i = threadIdx.x; i < C; i += blockDim.x) sdg[i] = 0;
    const int t1 = min(T, (int)(blockIdx.x + 1) * rows);
    for (int t = blockIdx.x * rows; t < t1; t++) {
        const size_t o = (size_t)t * C;
        const float r = rs[t];
        float dot = 0;
        for (int i = threadIdx.x; i < C; i += blockDim.x) dot += f32(g[i]) * f32(dout[o + i]) * f32(x[o + i]);
        dot = block_reduce<false>(dot);
        for (int i = threadIdx.x; i < C; i += blockDim.x) {
            const float xi = f32(x[o + i]), di = f32(dout[o + i]);
            const float d = r * f32(g[i]) * di - xi * r * r * r * dot / (float)C;
            dx[o + i] = toX((dres ? f32(dres[o + i]) : 0.0f) + d);
            sdg[i] += di * xi * r;
        }
    }
    for (int i = threadIdx.x; i < C; i += blockDim.x) atomicAdd(&dg[i], sdg[i]);
}

/* GELU, the tanh form (GPT-2, llm.c, gpt_model.h) */
__device__ __forceinline__ float gelu(float x)
{
    return 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x)));
}
__device__ __forceinline__ float gelu_grad(float x)
{
    const float th = tanhf(0.7978845608f * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * 0.7978845608f * (1.0f + 3.0f * 0.044715f * x * x);
}
__global__ void gelu_fwd_kernel(floatX *out, const floatX *pre, size_t n)
{
    GRID_STRIDE(i, n) out[i] = toX(gelu(f32(pre[i])));
}
__global__ void gelu_bwd_kernel(floatX *d, const floatX *pre, size_t n)      /* d *= gelu'(pre) */
{
    GRID_STRIDE(i, n) d[i] = toX(f32(d[i]) * gelu_grad(f32(pre[i])));
}

/* One span of attention (see the top): this rank's query rows [q0, q0 + lq) against microbatch
 * keys [k0, k0 + lk), k0 the sequence's first position; its probabilities are P + poff,
 * [NH, lq, ldp] (ldp: lk rounded up to 8, keeping every row 16-byte aligned for cuBLASLt).
 * kv_overwrite: the first span of its sequence whose keys are all of the sequence, so its key and
 * value gradients overwrite rather than add (cp == 1; under cp they are zeroed and summed). */
struct Span {
    int q0, lq, k0, lk, ldp, kv_overwrite;
    long long poff;
};

/* Row (t, h) of P, block per row: S (already scaled) -> softmax over keys 0 .. gidx[t] - k0 (the
 * token's sequence up to itself), zero past it. */
__global__ void attn_softmax_fwd_kernel(floatX *P, const Span *spans, const int *row_span, const int *gidx, int NH)
{
    const int t = blockIdx.x / NH, h = blockIdx.x % NH;
    const Span sp = spans[row_span[t]];
    floatX *row = P + sp.poff + ((int64_t)h * sp.lq + (t - sp.q0)) * sp.ldp;
    const int lim = gidx[t] - sp.k0;
    float mx = -INFINITY, sum = 0;
    for (int j = threadIdx.x; j <= lim; j += blockDim.x) mx = fmaxf(mx, f32(row[j]));
    mx = block_reduce<true>(mx);
    for (int j = threadIdx.x; j <= lim; j += blockDim.x) sum += expf(f32(row[j]) - mx);
    sum = block_reduce<false>(sum);
    for (int j = threadIdx.x; j < sp.lk; j += blockDim.x) row[j] = toX(j <= lim ? expf(f32(row[j]) - mx) / sum : 0.0f);
}

/* dS = P (dP - sum(P dP)) in place of dP, per row (masked entries have P = 0, so dS = 0). */
__global__ void attn_softmax_bwd_kernel(floatX *dP, const floatX *P, const Span *spans, const int *row_span,
                                        const int *gidx, int NH)
{
    const int t = blockIdx.x / NH, h = blockIdx.x % NH;
    const Span sp = spans[row_span[t]];
    const int64_t at = sp.poff + ((int64_t)h * sp.lq + (t - sp.q0)) * sp.ldp;
    const int lim = gidx[t] - sp.k0;
    float dot = 0;
    for (int j = threadIdx.x; j <= lim; j += blockDim.x) dot += f32(P[at + j]) * f32(dP[at + j]);
    dot = block_reduce<false>(dot);
    for (int j = threadIdx.x; j < sp.lk; j += blockDim.x)
        dP[at + j] = toX(j <= lim ? f32(P[at + j]) * (f32(dP[at + j]) - dot) : 0.0f);
}

/* (m, s) with s = sum exp(x - m) over some x, merged with (m2, s2): the pair over both. A pair
 * with m2 = -inf (nothing, or only -inf logits) adds nothing; a NaN logit makes s NaN, so the loss
 * says so. */
__device__ __forceinline__ void softmax_merge(float &m, float &s, float m2, float s2)
{
    if (m2 == -INFINITY) return;
    if (m == -INFINITY) { m = m2; s = s2; return; }
    const float M = fmaxf(m, m2);
    s = s * expf(m - M) + s2 * expf(m2 - M);
    m = M;
}

/* The block's (max, sum of exponentials) pair, every thread's merged; every thread gets it */
__device__ void block_softmax_reduce(float &m, float &s)
{
    __shared__ float pm[32], ps[32];
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        softmax_merge(m, s, m2, s2);
    }
    __syncthreads();
    if ((threadIdx.x & 31) == 0) { pm[threadIdx.x >> 5] = m; ps[threadIdx.x >> 5] = s; }
    __syncthreads();
    m = -INFINITY; s = 0.0f;
    for (int i = 0; i < (int)(blockDim.x >> 5); i++) softmax_merge(m, s, pm[i], ps[i]);
}

/* Cross-entropy, block per token: loss_sum += log sum exp(logits) - logits[label] over labelled
 * tokens; dlogits = (softmax - onehot(label)) * grad_scale, 0 for unlabelled rows (dlogits may
 * be logits, or NULL for the loss alone). Two passes over the row, not three: the max and the sum
 * of exponentials together (online softmax), then dlogits; 16 bytes a load and a store where the
 * vocab is a multiple of that (the output layer's logits are the step's largest tensor). */
__global__ void cross_entropy_kernel(const floatX *logits, floatX *dlogits, const int *labels, int V, float grad_scale,
                                     double *loss_sum)
{
    constexpr int VEC = 16 / sizeof(floatX);
    const floatX *l = logits + (size_t)blockIdx.x * V;
    floatX *d = dlogits ? dlogits + (size_t)blockIdx.x * V : nullptr;
    const int label = labels[blockIdx.x];
    const bool vec = V % VEC == 0;
    if (label < 0) {
        if (d) for (int v = threadIdx.x; v < V; v += blockDim.x) d[v] = toX(0.0f);
        return;
    }
    float m = -INFINITY, z = 0.0f;
    if (vec) {
        for (int v = threadIdx.x * VEC; v < V; v += blockDim.x * VEC) {
            const uint4 u = *reinterpret_cast<const uint4 *>(l + v);
            const floatX *e = reinterpret_cast<const floatX *>(&u);
            float cm = f32(e[0]), cs = 0.0f;
            for (int j = 1; j < VEC; j++) cm = fmaxf(cm, f32(e[j]));
            for (int j = 0; j < VEC; j++) cs += expf(f32(e[j]) - cm);
            softmax_merge(m, z, cm, cs);
        }
    } else {
        for (int v = threadIdx.x; v < V; v += blockDim.x) softmax_merge(m, z, f32(l[v]), 1.0f);
    }
    block_softmax_reduce(m, z);
    const float at_label = f32(l[label]);
    if (threadIdx.x == 0) atomicAdd(loss_sum, (double)(logf(z) + m - at_label));
    __syncthreads();            /* every thread read l[label] before d (maybe l) is written */
    if (!d) return;
    const float inv = 1.0f / z;
    if (vec) {
        for (int v = threadIdx.x * VEC; v < V; v += blockDim.x * VEC) {
            const uint4 u = *reinterpret_cast<const uint4 *>(l + v);
            const floatX *e = reinterpret_cast<const floatX *>(&u);
            uint4 o;
            floatX *oe = reinterpret_cast<floatX *>(&o);
            for (int j = 0; j < VEC; j++)
                oe[j] = toX((expf(f32(e[j]) - m) * inv - (v + j == label ? 1.0f : 0.0f)) * grad_scale);
            *reinterpret_cast<uint4 *>(d + v) = o;
        }
    } else {
        for (int v = threadIdx.x; v < V; v += blockDim.x)
            d[v] = toX((expf(f32(l[v]) - m) * inv - (v == label ? 1.0f : 0.0f)) * grad_scale);
    }
}

/* AdamW (Loshchilov & Hutter) as gpt_adamw, gradients scaled by *scale (the clip; NULL: 1), the
 * first n_gains parameters without weight decay; the floatX copy follows the masters. */
__global__ void adamw_kernel(float *p, floatX *px, const float *g, float *m, float *v, size_t n, size_t n_gains,
                             float lr, float wd, float c1, float c2, const float *scale)
{
    const float b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, s = scale ? *scale : 1.0f;
    GRID_STRIDE(i, n) {
        const float gi = g[i] * s;
        const float mi = b1 * m[i] + (1.0f - b1) * gi, vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi; v[i] = vi;
        p[i] -= lr * ((mi / c1) / (sqrtf(vi / c2) + eps) + (i < n_gains ? 0.0f : wd * p[i]));
        px[i] = toX(p[i]);
    }
}

/* a = b = a + b: the two copies of the tied weight's gradient, on one rank */
__global__ void tied_sum_kernel(float *a, float *b, size_t n)
{
    GRID_STRIDE(i, n) { const float s = a[i] + b[i]; a[i] = s; b[i] = s; }
}

/* --- mixture of experts ------------------------------------------------------------------------ */

/* One thread per token: probs = softmax(logits) over E; the K experts are the replayed ones (an
 * entry >= 0) or the most probable not yet taken (ties: the lower index), as gpt_moe chooses.
 * With record, each real token's choices go to record[(row * slots + slot) * K + k] as e + 1
 * (a float, so that one sum over the ranks assembles a recording every rank wrote parts of). */
__global__ void moe_route_kernel(float *probs, int *choice, const float *logits, const int *replay, int T, int E, int K,
                                 float *record, const int64_t *rows, int slots, int slot)
{
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    float *pr = probs + (size_t)t * E, mx = -INFINITY, sum = 0;
    int *ch = choice + (size_t)t * K;
    for (int e = 0; e < E; e++) { pr[e] = logits[(size_t)t * E + e]; mx = fmaxf(mx, pr[e]); }
    for (int e = 0; e < E; e++) { pr[e] = expf(pr[e] - mx); sum += pr[e]; }
    for (int e = 0; e < E; e++) pr[e] /= sum;
    for (int k = 0; k < K; k++) {
        int best = -1;
        if (replay && replay[(size_t)t * K + k] >= 0) {
            best = replay[(size_t)t * K + k];
        } else {
            for (int e = 0; e < E; e++) {
                bool taken = false;
                for (int j = 0; j < k; j++) taken |= ch[j] == e;
                if (!taken && (best < 0 || pr[e] > pr[best])) best = e;
            }
        }
        ch[k] = best;
    }
    if (record && rows[t] >= 0)
        for (int k = 0; k < K; k++) record[((size_t)rows[t] * slots + slot) * K + k] = (float)(ch[k] + 1);
}

/* One block of 1024 threads: the n = T * K (token, k) choices sorted by expert, stably (a
 * counting sort, one block-wide scan per expert): sorted position p holds token tok[p], choice i
 * sits at position inv[i], and expert e's rows are [offs[e], offs[e + 1]). */
#define MOE_SORT_THREADS 1024
__global__ void moe_sort_kernel(const int *choice, int n, int E, int K, int *tok, int *inv, int *offs)
{
    typedef cub::BlockScan<int, MOE_SORT_THREADS> Scan;
    __shared__ typename Scan::TempStorage scan;
    int done = 0;
    if (threadIdx.x == 0) offs[0] = 0;
    for (int e = 0; e < E; e++) {
        for (int base = 0; base < n; base += MOE_SORT_THREADS) {
            const int i = base + threadIdx.x, mine = i < n && choice[i] == e;
            int before, total;
            Scan(scan).ExclusiveSum(mine, before, total);
            __syncthreads();    /* scan storage is reused by the next round */
            if (mine) { tok[done + before] = i / K; inv[i] = done + before; }
            done += total;
        }
        if (threadIdx.x == 0) offs[e + 1] = done;
    }
}

/* y [T, C] = x2 + sum_k probs[e_k] eo[position of (t, k)] */
__global__ void moe_combine_kernel(floatX *y, const floatX *x2, const floatX *eo, const float *probs, const int *choice,
                                   const int *inv, int T, int C, int E, int K)
{
    GRID_STRIDE(i, (size_t)T * C) {
        const size_t t = i / C, c = i % C;
        float acc = 0;
        for (int k = 0; k < K; k++)
            acc += probs[t * E + choice[t * K + k]] * f32(eo[(size_t)inv[t * K + k] * C + c]);
        y[i] = toX(acc + f32(x2[i]));
    }
}

/* Block per (t, k): dsel[t, k] = dout[t] . eo[p] (the gradient of the weight probs[e_k]) and
 * deo[p] = probs[e_k] dout[t], p the choice's sorted position. */
__global__ void moe_combine_bwd_kernel(float *dsel, floatX *deo, const floatX *dout, const floatX *eo, const float *probs,
                                       const int *choice, const int *inv, int C, int E, int K)
{
    const int t = blockIdx.x / K;
    const size_t p = (size_t)inv[blockIdx.x];
    const float w = probs[(size_t)t * E + choice[blockIdx.x]];
    float dot = 0;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const float d = f32(dout[(size_t)t * C + c]);
        dot += d * f32(eo[p * C + c]);
        deo[p * C + c] = toX(w * d);
    }
    dot = block_reduce<false>(dot);
    if (threadIdx.x == 0) dsel[blockIdx.x] = dot;
}

/* dn [T, C] = sum_k dxe[position of (t, k)]: each expert's input gradient back to its token */
__global__ void moe_uncombine_kernel(floatX *dn, const floatX *dxe, const int *inv, int T, int C, int K)
{
    GRID_STRIDE(i, (size_t)T * C) {
        const size_t t = i / C, c = i % C;
        float acc = 0;
        for (int k = 0; k < K; k++) acc += f32(dxe[(size_t)inv[t * K + k] * C + c]);
        dn[i] = toX(acc);
    }
}

/* One thread per token: the router logits' gradient, dl_e = p_e (dp_e - sum p dp), where dp_e
 * sums dsel over the choices of expert e (softmax backward, as gpt_moe_backward). */
__global__ void moe_router_bwd_kernel(floatX *dl, const float *probs, const int *choice, const float *dsel, int T, int E,
                                      int K)
{
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    float dp[GPT_MAX_EXPERTS], dot = 0;
    for (int e = 0; e < E; e++) dp[e] = 0;
    for (int k = 0; k < K; k++) dp[choice[(size_t)t * K + k]] += dsel[(size_t)t * K + k];
    for (int e = 0; e < E; e++) dot += probs[(size_t)t * E + e] * dp[e];
    for (int e = 0; e < E; e++) dl[(size_t)t * E + e] = toX(probs[(size_t)t * E + e] * (dp[e] - dot));
}

/* A recording assembled as sums of (expert + 1): back to expert ids; *bad counts entries no rank
 * (or more than one) wrote. */
__global__ void recording_finish_kernel(int *out, const float *rec, size_t n, int E, int *bad)
{
    GRID_STRIDE(i, n) {
        const int e = (int)lrintf(rec[i]) - 1;
        out[i] = e;
        if (e < 0 || e >= E || rec[i] != (float)(e + 1)) atomicAdd(bad, 1);
    }
}

__global__ void count_diff_kernel(const int *a, const int *b, size_t n, int *count)
{
    GRID_STRIDE(i, n) if (a[i] != b[i]) atomicAdd(count, 1);
}

/* out[0] = max |a - b|, out[1] = max |b| (non-negative floats order as their bits) */
__global__ void max_diff_kernel(const float *a, const float *b, size_t n, float *out)
{
    float d = 0, m = 0;
    GRID_STRIDE(i, n) {
        d = fmaxf(d, fabsf(a[i] - b[i]));
        m = fmaxf(m, fabsf(b[i]));
        if (a[i] != a[i]) d = INFINITY;     /* a NaN is an error of any size */
    }
    atomicMax((int *)&out[0], __float_as_int(d));
    atomicMax((int *)&out[1], __float_as_int(m));
}

/* ============================================================================================
 * the model of one rank: what its stages share
 * ============================================================================================ */

/* Data-path kernels (packing, the cp split and merge, the replay gather) timed with CUDA events
 * around each call, summed per kind once the step is done. */
enum { DP_PACK = 0, DP_CP, DP_REPLAY, DP_KINDS };
static const char *const dp_names[DP_KINDS] = { "pack", "cp split/merge", "replay gather" };

struct DataPathTimer {
    std::vector<cudaEvent_t> ev;
    std::vector<int> kind;      /* [pairs] */
    size_t used = 0;            /* events recorded this step */
};

static void dp_begin(DataPathTimer &t, cudaStream_t s)
{
    if (t.used + 2 > t.ev.size()) {
        size_t n = t.ev.size();
        t.ev.resize(n ? 2 * n : 256);
        for (size_t i = n; i < t.ev.size(); i++) CK(cudaEventCreate(&t.ev[i]));
        t.kind.resize(t.ev.size() / 2);
    }
    CK(cudaEventRecord(t.ev[t.used], s));
}

static void dp_end(DataPathTimer &t, cudaStream_t s, int kind)
{
    CK(cudaEventRecord(t.ev[t.used + 1], s));
    t.kind[t.used / 2] = kind;
    t.used += 2;
}

/* After the step (the stream synchronised): ms[kind] += the timed calls; the timer restarts. */
static void dp_collect(DataPathTimer &t, double ms[DP_KINDS])
{
    for (size_t i = 0; i + 1 < t.used; i += 2) {
        float x = 0;
        CK(cudaEventElapsedTime(&x, t.ev[i], t.ev[i + 1]));
        ms[t.kind[i / 2]] += x;
    }
    t.used = 0;
}

/* Working memory of one stage call (nothing in it outlives the call), sized for the most tokens. */
struct Scratch {
    floatX *dx, *dn;            /* [T, C] the residual stream's gradient, a norm output's */
    floatX *dqkv;               /* [T, 3C] */
    floatX *day;                /* [T, C] */
    floatX *dh;                 /* [T, H] or [T K, He]: the MLP's hidden gradient */
    floatX *dP;                 /* [P] attention probabilities' gradient */
    float *dkv;                 /* [Tk, 2C] every key's and value's gradient (summed over cp) */
    float *dkv_local;           /* [T, 2C] this rank's rows of it (cp > 1) */
    floatX *kvall;              /* [cp T, 2C] every cp rank's keys and values, all-gathered */
    float *logits;              /* [T, E] router logits */
    floatX *xe, *deo, *dxe;     /* [T K, C] expert inputs (sorted), their outputs' and inputs' gradients */
    float *dsel;                /* [T K] */
    floatX *dl;                 /* [T, E] the router logits' gradient */
    int *moe_offs;              /* [E + 1] device: where each expert's rows start */
};

struct GpuModel {
    gpt_config cfg;             /* is_moe, moe_slot: host arrays [L] */
    int attn_block;             /* query rows per attention span at most */
    Blas blas;
    cudaStream_t stream;
    int cp = 1, cp_rank = 0;    /* this rank's share of every microbatch */
    pp_transport cpg;           /* the cp group (cp > 1): K/V all-gather, their gradients' sum */
    pp_nccl *sync_comm = nullptr;   /* waits of the host for the stream: pp_nccl_sync on it, or none */
    double timeout_s = 60;
    Scratch s;
    DataPathTimer dpt;
    std::vector<cudaEvent_t> *marks = nullptr;  /* --unit-costs: an event where each part of a stage pass
                                                   starts (unit_mark), in the order they run */
    char why[PP_ERROR_MESSAGE_SIZE + 128];  /* why a call failed (a collective) */
};

/* --unit-costs: an event on the stream where the next part of a pass starts. */
static void unit_mark(GpuModel &M)
{
    if (!M.marks) return;
    cudaEvent_t e;
    CK(cudaEventCreate(&e));
    CK(cudaEventRecord(e, M.stream));
    M.marks->push_back(e);
}

/* The host waits for the stream (the MoE layers need their experts' row counts): with a deadline
 * where the stream may wait on a peer. Returns 0, or 1 with M.why set. */
static int host_wait(GpuModel &M)
{
    if (!M.sync_comm) { CK(cudaStreamSynchronize(M.stream)); return 0; }
    pp_error e;
    if (pp_nccl_sync(M.sync_comm, M.stream, M.timeout_s, &e) == PP_OK) return 0;
    snprintf(M.why, sizeof M.why, "waiting for the stream: %s", e.message);
    return 1;
}

/* A pipepar call inside a stage call: on failure its message goes to M.why and the call returns 1. */
#define PPTRY(M, call) do { pp_error e_; if ((call) != PP_OK) { \
    snprintf((M).why, sizeof (M).why, "%s", e_.message); return 1; } } while (0)

/* ============================================================================================
 * parameters: a stage's weights, gpt_model.h's layout over device memory
 * ============================================================================================ */

struct Stage {
    gpt_stage shape;            /* first, count, has_embedding, has_head, n, n_gains (no host arrays) */
    std::vector<gpt_layer_weights> wl, gl;
    gpt_weights w, g;           /* views: fp32 masters, fp32 gradients */
    float *params = nullptr, *grads = nullptr, *adam_m = nullptr, *adam_v = nullptr;   /* [n] */
    floatX *px = nullptr;       /* [n] the floatX copy every kernel reads */
    int moe_layers = 0;
    floatX *head_dout = nullptr, *head_in = nullptr;   /* stage_defer_head: [head_cap, V] the logits'
                                                          gradients, [head_cap, C] the output layer's inputs */
    int head_rows = 0, head_cap = 0;
};

/* The floatX copy of a master tensor */
static const floatX *X(const Stage &s, const float *master) { return s.px + (master - s.params); }

/* A stage's tensors by layer and name (layer -1: the embedding, L: the head), over any views of
 * gpt_model.h's layout; the head's copy of the tied weight is "wte" too, so both copies meet the
 * whole model's. */
struct Tensor { int layer; const char *name; float *w, *g; size_t n; };
#define MAX_TENSORS (7 * GPT_MAX_LAYERS + 4)

static int stage_tensors(const gpt_config *c, const gpt_stage *sh, const gpt_weights *w, const gpt_weights *g,
                         Tensor *out)
{
    const size_t C = (size_t)c->width, V = (size_t)c->vocab;
    int n = 0;
    auto add = [&](int l, const char *name, float *wp, float *gp, size_t count) { out[n++] = { l, name, wp, gp, count }; };
    if (sh->has_embedding) {
        add(-1, "wte", w->wte, g->wte, V * C);
        add(-1, "wpe", w->wpe, g->wpe, (size_t)c->max_pos * C);
    }
    for (int k = 0; k < sh->count; k++) {
        const int l = sh->first + k, moe = gpt_layer_is_moe(c, l);
        const gpt_layer_weights &a = w->layer[k], &b = g->layer[k];
        const size_t nfc = moe ? (size_t)c->experts * c->expert_hidden * C : (size_t)c->hidden * C;
        if (GPT_HAS_ATTN(sh, k)) {      /* a stage may hold half a layer (gpt_stage) */
            add(l, "ln1", a.ln1, b.ln1, C); add(l, "wqkv", a.wqkv, b.wqkv, 3 * C * C); add(l, "wo", a.wo, b.wo, C * C);
        }
        if (!GPT_HAS_MLP(sh, k)) continue;
        add(l, "ln2", a.ln2, b.ln2, C);
        if (moe) add(l, "wrouter", a.wrouter, b.wrouter, (size_t)c->experts * C);
        add(l, "wfc", a.wfc, b.wfc, nfc); add(l, "wproj", a.wproj, b.wproj, nfc);
    }
    if (sh->has_head) {
        add(c->layers, "lnf", w->lnf, g->lnf, C);
        if (!sh->has_embedding) add(-1, "wte", w->wte_out, g->wte_out, V * C);
    }
    return n;
}

static int find_tensor(const Tensor *t, int n, int layer, const char *name)
{
    for (int i = 0; i < n; i++) if (t[i].layer == layer && !strcmp(t[i].name, name)) return i;
    return -1;
}

/* Units [u0, u0 + units) (two per layer, gpt_stage) and the ends of the model in `ends`
 * (gpt_stage_shape), on the device, starting equal to the same units of gpt_model.h's model drawn
 * from `seed`: each layer is drawn on the host by gpt_stage_init (one layer at a time, so the host
 * never holds more than one) and the stage's tensors of it copied. `bytes` adds what it allocated. */
static void stage_create(Stage &s, const gpt_config *c, int u0, int units, int ends, uint64_t seed,
                         cudaStream_t stream, size_t *bytes)
{
    gpt_stage_shape(&s.shape, u0, units, ends);
    const int first = s.shape.first, count = s.shape.count;
    s.wl.assign((size_t)std::max(count, 1), gpt_layer_weights());
    s.gl.assign((size_t)std::max(count, 1), gpt_layer_weights());
    s.w.layer = s.wl.data(); s.g.layer = s.gl.data();
    s.shape.n = gpt_layout(c, &s.shape, NULL, &s.w, &s.shape.n_gains);
    const size_t nb = s.shape.n * sizeof(float);
    CK(cudaMalloc(&s.params, nb)); CK(cudaMalloc(&s.grads, nb)); CK(cudaMalloc(&s.adam_m, nb)); CK(cudaMalloc(&s.adam_v, nb));
    CK(cudaMalloc(&s.px, s.shape.n * sizeof(floatX)));
    *bytes += 4 * nb + s.shape.n * sizeof(floatX);
    gpt_layout(c, &s.shape, s.params, &s.w, NULL);
    gpt_layout(c, &s.shape, s.grads, &s.g, NULL);
    CK(cudaMemsetAsync(s.grads, 0, nb, stream));
    CK(cudaMemsetAsync(s.adam_m, 0, nb, stream));
    CK(cudaMemsetAsync(s.adam_v, 0, nb, stream));
    for (int k = 0; k < count; k++) s.moe_layers += GPT_HAS_MLP(&s.shape, k) && gpt_layer_is_moe(c, first + k);

    static Tensor mine[MAX_TENSORS], part[MAX_TENSORS];
    const int nm = stage_tensors(c, &s.shape, &s.w, &s.g, mine);
    for (int l = first; l < first + std::max(count, 1); l++) {     /* one gpt_stage_init per layer */
        gpt_stage h;
        if (gpt_stage_init(&h, c, l, count > 0 ? 1 : 0, seed)) { fprintf(stderr, "gpt_gpu: out of host memory\n"); exit(1); }
        const int np = stage_tensors(c, &h, &h.w, &h.g, part);
        for (int i = 0; i < np; i++) {
            const int j = find_tensor(mine, nm, part[i].layer, part[i].name);
            if (j >= 0) CK(cudaMemcpyAsync(mine[j].w, part[i].w, part[i].n * sizeof(float), cudaMemcpyHostToDevice, stream));
        }
        CK(cudaStreamSynchronize(stream));     /* the copies are done with the host layer */
        gpt_stage_free(&h);
    }
    convert_kernel<<<grid_for(s.shape.n), 256, 0, stream>>>(s.px, s.params, s.shape.n);
    CK(cudaGetLastError());
}

/* The output layer's weight gradient deferred (gpt_model.h's gpt_stage_defer_head, Megatron-LM's
 * defer_embedding_wgrad_compute): each microbatch's loss writes its logits' gradient into rows
 * that stage_head_rows hands out, its backward reads them there and keeps its inputs beside them,
 * at most `rows` until stage_head_wgrad computes the gradient of them all in one product. The
 * logits' gradient is written once and never copied. Only for the head's stage; `bytes` adds
 * what it allocated. */
static void stage_defer_head(Stage &s, const gpt_config *c, int rows, size_t *bytes)
{
    if (!s.shape.has_head || rows <= 0) return;
    const size_t nd = (size_t)rows * c->vocab * sizeof(floatX), ni = (size_t)rows * c->width * sizeof(floatX);
    CK(cudaMalloc(&s.head_dout, nd)); CK(cudaMalloc(&s.head_in, ni));
    *bytes += nd + ni;
    s.head_cap = rows;
    s.head_rows = 0;
}

/* stage_defer_head: T rows for a microbatch's logits' gradient, the next free ones; NULL when
 * every row is taken (M.why says so). */
static floatX *stage_head_rows(GpuModel &M, Stage &st, int T)
{
    if (st.head_rows + T > st.head_cap) {
        snprintf(M.why, sizeof M.why, "loss: more output-layer rows than the deferred weight gradient keeps (%d)",
                 st.head_cap);
        return nullptr;
    }
    floatX *at = st.head_dout + (size_t)st.head_rows * M.cfg.vocab;
    st.head_rows += T;
    return at;
}

static void stage_free(Stage &s)
{
    cudaFree(s.params); cudaFree(s.grads); cudaFree(s.adam_m); cudaFree(s.adam_v); cudaFree(s.px);
    cudaFree(s.head_dout); cudaFree(s.head_in);
    s.params = s.grads = s.adam_m = s.adam_v = nullptr; s.px = nullptr; s.head_dout = s.head_in = nullptr;
}

/* ============================================================================================
 * a microbatch as one rank holds it, and its saved activations
 * ============================================================================================ */

struct Batch {
    int T, Tk, nseq;            /* local tokens, microbatch tokens, packed sequences */
    const int *ids, *labels, *pos;  /* device [T]: token id (0 padding), next token (-1 none), position */
    const int *gidx;            /* device [T] each local token's position in the microbatch */
    const int64_t *rows;        /* device [T] its row in the step's token order, -1 padding */
    const int *cu;              /* device [nseq + 1] cu_seqlens_padded */
    const int *row_span;        /* device [T] the attention span of each local token */
    const Span *spans_dev;      /* device [nspans] */
    const Span *spans;          /* host [nspans], in the order the backward runs them */
    int nspans;
    int64_t P;                  /* attention probabilities: elements of all spans */
    int labelled;               /* local tokens with a label */
};

/* Router choices: replay [the stage's MoE layers][T][K] (-1: route it yourself) or NULL; record
 * (or NULL) gets each real token's choices (moe_route_kernel). */
struct Route {
    const int *replay;
    float *record;
    int record_slots;
};

/* What one (stage, microbatch) keeps for its backward (gpt_model.h's gpt_layer_acts). */
struct LayerActs {
    floatX *x;                  /* [T, C] the layer's input */
    float *rs1;                 /* [T] */
    floatX *n1;                 /* [T, C] */
    floatX *qkv;                /* [T, 3C] */
    floatX *kv;                 /* [Tk, 2C] every key and value in microbatch order (cp > 1) */
    floatX *P;                  /* [P] attention probabilities */
    floatX *ay;                 /* [T, C] attention output before Wo */
    floatX *x2;                 /* [T, C] x + attention */
    float *rs2;                 /* [T] */
    floatX *n2;                 /* [T, C] */
    floatX *hpre, *hact;        /* dense [T, H]; MoE [T K, He] in expert order: before and after GELU */
    float *probs;               /* MoE [T, E] */
    int *choice;                /* MoE [T, K] */
    int *tok, *inv;             /* MoE [T K] token of each sorted row; sorted row of each choice */
    floatX *eo;                 /* MoE [T K, C] each expert's output, sorted */
    int *offs;                  /* MoE host [E + 1] each expert's first sorted row (pinned) */
};

struct Acts {
    LayerActs layer[GPT_MAX_LAYERS];
    floatX *xf, *nf;            /* head: [T, C] the last layer's output, RMSNorm of it */
    float *rsf;                 /* head: [T] */
};

/* Carves a stage's saved activations for T local tokens, Tk microbatch tokens and P attention
 * probabilities out of `base` (device) and `offs` (pinned host: E + 1 ints per MoE layer) into
 * *a, or with base and a NULL only counts. Every buffer starts 256-byte aligned. Returns the
 * bytes. */
static size_t acts_carve(const gpt_config *c, const Stage &st, int T, int Tk, int64_t P, int cp, char *base, int *offs,
                         Acts *a)
{
    const size_t C = (size_t)c->width, t = (size_t)T, K = (size_t)c->topk, He = (size_t)c->expert_hidden;
    size_t at = 0;
    int moe = 0;
    static Acts counting;           /* what a count-only call writes its (null) pointers to */
    if (!a) a = &counting;
    auto take = [&](size_t bytes) -> void * { void *p = base ? base + at : nullptr; at += (bytes + 255) & ~(size_t)255; return p; };
    const size_t X = sizeof(floatX), F = sizeof(float);
    for (int k = 0; k < st.shape.count; k++) {
        LayerActs &la = a->layer[k];
        const bool attn = GPT_HAS_ATTN(&st.shape, k), mlp = GPT_HAS_MLP(&st.shape, k);
        la.x = (floatX *)take(t * C * X);
        if (attn) {
            la.rs1 = (float *)take(t * F); la.n1 = (floatX *)take(t * C * X); la.qkv = (floatX *)take(t * 3 * C * X);
            la.kv = cp > 1 ? (floatX *)take((size_t)Tk * 2 * C * X) : nullptr;
            la.P = (floatX *)take((size_t)P * X);
            la.ay = (floatX *)take(t * C * X);
        }
        la.x2 = !attn ? la.x : mlp ? (floatX *)take(t * C * X) : nullptr;  /* without attention the input is x2 */
        if (!mlp) continue;             /* the attention writes the stage's output */
        la.rs2 = (float *)take(t * F); la.n2 = (floatX *)take(t * C * X);
        if (gpt_layer_is_moe(c, st.shape.first + k)) {
            la.hpre = (floatX *)take(t * K * He * X); la.hact = (floatX *)take(t * K * He * X);
            la.probs = (float *)take(t * c->experts * F); la.choice = (int *)take(t * K * 4);
            la.tok = (int *)take(t * K * 4); la.inv = (int *)take(t * K * 4); la.eo = (floatX *)take(t * K * C * X);
            la.offs = offs ? offs + (size_t)moe * (c->experts + 1) : nullptr;
            moe++;
        } else {
            la.hpre = (floatX *)take(t * c->hidden * X); la.hact = (floatX *)take(t * c->hidden * X);
            la.probs = nullptr; la.choice = la.tok = la.inv = nullptr; la.eo = nullptr; la.offs = nullptr;
        }
    }
    if (st.shape.has_head) { a->xf = (floatX *)take(t * C * X); a->rsf = (float *)take(t * F); a->nf = (floatX *)take(t * C * X); }
    return at;
}

/* Scratch for T local and Tk microbatch tokens, P probabilities, cp ranks; `bytes` adds it. */
static void scratch_create(Scratch &s, const gpt_config *c, int T, int Tk, int64_t P, int cp, size_t *bytes)
{
    const size_t C = (size_t)c->width, t = (size_t)T, X = sizeof(floatX), TK = t * c->topk;
    const size_t h = std::max(t * c->hidden, TK * c->expert_hidden);
    auto dev = [&](size_t n) -> void * { void *p; CK(cudaMalloc(&p, n ? n : 1)); *bytes += n; return p; };
    s.dx = (floatX *)dev(t * C * X); s.dn = (floatX *)dev(t * C * X); s.dqkv = (floatX *)dev(t * 3 * C * X);
    s.day = (floatX *)dev(t * C * X); s.dh = (floatX *)dev(h * X); s.dP = (floatX *)dev((size_t)P * X);
    s.dkv = (float *)dev((size_t)Tk * 2 * C * 4);
    s.dkv_local = cp > 1 ? (float *)dev(t * 2 * C * 4) : nullptr;
    s.kvall = cp > 1 ? (floatX *)dev((size_t)cp * t * 2 * C * X) : nullptr;
    const bool moe = c->is_moe != nullptr;
    s.logits = moe ? (float *)dev(t * c->experts * 4) : nullptr;
    s.xe = moe ? (floatX *)dev(TK * C * X) : nullptr;
    s.deo = moe ? (floatX *)dev(TK * C * X) : nullptr;
    s.dxe = moe ? (floatX *)dev(TK * C * X) : nullptr;
    s.dsel = moe ? (float *)dev(TK * 4) : nullptr;
    s.dl = moe ? (floatX *)dev(t * c->experts * X) : nullptr;
    s.moe_offs = moe ? (int *)dev(((size_t)c->experts + 1) * 4) : nullptr;
}

static void scratch_free(Scratch &s)
{
    void *all[] = { s.dx, s.dn, s.dqkv, s.day, s.dh, s.dP, s.dkv, s.dkv_local, s.kvall, s.logits, s.xe, s.deo, s.dxe,
                    s.dsel, s.dl, s.moe_offs };
    for (void *p : all) if (p) cudaFree(p);
    memset(&s, 0, sizeof s);
}

/* ============================================================================================
 * attention, restricted to each packed sequence
 * ============================================================================================ */

/* The keys and values of every microbatch position: read out of qkv (cp == 1, leading dimension
 * 3C), or the all-gathered kv (cp > 1, 2C). */
static void kv_of(const GpuModel &M, const LayerActs &la, const floatX **K, const floatX **V, int64_t *ld)
{
    const int C = M.cfg.width;
    if (M.cp > 1) { *K = la.kv; *V = la.kv + C; *ld = 2 * C; }
    else { *K = la.qkv + C; *V = la.qkv + 2 * C; *ld = 3 * C; }
}

/* The GEMMs of attention, span by span, batched over the heads (each head's hs columns are the
 * next batch entry). Q [T, 3C] rows (leading dimension 3C); K and V rows of every microbatch
 * position (ldkv); P and dP [NH, lq, ldp] per span at poff; O, dO [T, C]. */

/* S = Q K^T / sqrt(hs) into P */
static void attn_scores(GpuModel &M, const Batch &b, const floatX *Q, const floatX *K, int64_t ldkv, floatX *P)
{
    const int C = M.cfg.width, NH = M.cfg.heads, hs = C / NH;
    for (int i = 0; i < b.nspans; i++) {
        const Span &sp = b.spans[i];
        gemm(M.blas, true, false, sp.lk, sp.lq, hs, 1.0f / sqrtf((float)hs), K + (size_t)sp.k0 * ldkv, ldkv, hs,
             Q + (size_t)sp.q0 * 3 * C, 3 * C, hs, 0.0f, P + sp.poff, P + sp.poff, CUDA_R_X, sp.ldp,
             (int64_t)sp.lq * sp.ldp, NH);
    }
}

/* O = P V */
static void attn_values(GpuModel &M, const Batch &b, const floatX *P, const floatX *V, int64_t ldkv, floatX *O)
{
    const int C = M.cfg.width, NH = M.cfg.heads, hs = C / NH;
    for (int i = 0; i < b.nspans; i++) {
        const Span &sp = b.spans[i];
        gemm(M.blas, false, false, hs, sp.lq, sp.lk, 1.0f, V + (size_t)sp.k0 * ldkv, ldkv, hs, P + sp.poff, sp.ldp,
             (int64_t)sp.lq * sp.ldp, 0.0f, O + (size_t)sp.q0 * C, O + (size_t)sp.q0 * C, CUDA_R_X, C, hs, NH);
    }
}

/* dP = dO V^T */
static void attn_dprobs(GpuModel &M, const Batch &b, const floatX *dO, const floatX *V, int64_t ldkv, floatX *dP)
{
    const int C = M.cfg.width, NH = M.cfg.heads, hs = C / NH;
    for (int i = 0; i < b.nspans; i++) {
        const Span &sp = b.spans[i];
        gemm(M.blas, true, false, sp.lk, sp.lq, hs, 1.0f, V + (size_t)sp.k0 * ldkv, ldkv, hs, dO + (size_t)sp.q0 * C, C,
             hs, 0.0f, dP + sp.poff, dP + sp.poff, CUDA_R_X, sp.ldp, (int64_t)sp.lq * sp.ldp, NH);
    }
}

/* From dS (the softmax's input gradient, in dP's place): dV (+)= P^T dO, dQ = dS K / sqrt(hs),
 * dK (+)= dS^T Q / sqrt(hs). dQ goes to dqkv's first C columns (3C); dK and dV accumulate in
 * dkv [Tk, 2C] fp32, overwritten by a span marked kv_overwrite. */
static void attn_grads(GpuModel &M, const Batch &b, const floatX *Q, const floatX *K, int64_t ldkv, const floatX *P,
                       const floatX *dS, const floatX *dO, floatX *dqkv, float *dkv)
{
    const int C = M.cfg.width, NH = M.cfg.heads, hs = C / NH;
    const float scale = 1.0f / sqrtf((float)hs);
    for (int i = 0; i < b.nspans; i++) {
        const Span &sp = b.spans[i];
        const float beta = sp.kv_overwrite ? 0.0f : 1.0f;
        const int64_t sP = (int64_t)sp.lq * sp.ldp;
        const floatX *dOs = dO + (size_t)sp.q0 * C;
        float *dKs = dkv + (size_t)sp.k0 * 2 * C, *dVs = dKs + C;
        gemm(M.blas, false, true, hs, sp.lk, sp.lq, 1.0f, dOs, C, hs, P + sp.poff, sp.ldp, sP, beta, dVs, dVs, CUDA_R_32F,
             2 * C, hs, NH);
        gemm(M.blas, false, false, hs, sp.lq, sp.lk, scale, K + (size_t)sp.k0 * ldkv, ldkv, hs, dS + sp.poff, sp.ldp, sP,
             0.0f, dqkv + (size_t)sp.q0 * 3 * C, dqkv + (size_t)sp.q0 * 3 * C, CUDA_R_X, 3 * C, hs, NH);
        gemm(M.blas, false, true, hs, sp.lk, sp.lq, scale, Q + (size_t)sp.q0 * 3 * C, 3 * C, hs, dS + sp.poff, sp.ldp, sP,
             beta, dKs, dKs, CUDA_R_32F, 2 * C, hs, NH);
    }
}

/* ay [T, C] from la.qkv; la.P and (cp > 1) la.kv are saved. Returns 0, or 1 (M.why) when the cp
 * all-gather failed. */
static int attention_forward(GpuModel &M, const Batch &b, LayerActs &la)
{
    const int C = M.cfg.width, NH = M.cfg.heads, T = b.T;
    cudaStream_t st = M.stream;
    if (M.cp > 1) {             /* every rank's keys and values, in microbatch order */
        floatX *mine = M.s.kvall + (size_t)M.cp_rank * T * 2 * C;
        copy_cols_kernel<<<grid_for((size_t)T * 2 * C), 256, 0, st>>>(mine, 2 * C, la.qkv + C, 3 * C, T, 2 * C);
        PPTRY(M, pp_group_all_gather(&M.cpg, mine, M.s.kvall, (size_t)T * 2 * C * sizeof(floatX), M.timeout_s, &e_));
        dp_begin(M.dpt, st);
        PPTRY(M, pp_cuda_cp_merge_thd(M.s.kvall, la.kv, b.cu, b.nseq, b.Tk, 2 * C * sizeof(floatX), M.cp, st, &e_));
        dp_end(M.dpt, st, DP_CP);
    }
    const floatX *K, *V;
    int64_t ldkv;
    kv_of(M, la, &K, &V, &ldkv);
    attn_scores(M, b, la.qkv, K, ldkv, la.P);
    attn_softmax_fwd_kernel<<<T * NH, 128, 0, st>>>(la.P, b.spans_dev, b.row_span, b.gidx, NH);
    attn_values(M, b, la.P, V, ldkv, la.ay);
    return 0;
}

/* dqkv [T, 3C] from day [T, C]. Every key and value gets gradient from this rank's queries
 * (fp32, [Tk, 2C]); under cp the ranks' shares are summed and each keeps its own rows: the
 * gradient its keys would have had in the unsplit model. Returns 0, or 1 (M.why). */
static int attention_backward(GpuModel &M, const Batch &b, const LayerActs &la, const floatX *day, floatX *dqkv)
{
    const int C = M.cfg.width, NH = M.cfg.heads, T = b.T;
    cudaStream_t st = M.stream;
    const floatX *K, *V;
    int64_t ldkv;
    kv_of(M, la, &K, &V, &ldkv);
    if (M.cp > 1) CK(cudaMemsetAsync(M.s.dkv, 0, (size_t)b.Tk * 2 * C * sizeof(float), st));
    attn_dprobs(M, b, day, V, ldkv, M.s.dP);
    attn_softmax_bwd_kernel<<<T * NH, 128, 0, st>>>(M.s.dP, la.P, b.spans_dev, b.row_span, b.gidx, NH);
    attn_grads(M, b, la.qkv, K, ldkv, la.P, M.s.dP, day, dqkv, M.s.dkv);
    const float *mine = M.s.dkv;
    if (M.cp > 1) {
        PPTRY(M, pp_group_all_reduce(&M.cpg, M.s.dkv, (size_t)b.Tk * 2 * C, M.timeout_s, &e_));
        dp_begin(M.dpt, st);
        PPTRY(M, pp_cuda_cp_split_thd(M.s.dkv, M.s.dkv_local, b.cu, b.nseq, b.Tk, 2 * C * sizeof(float), M.cp,
                                      M.cp_rank, st, &e_));
        dp_end(M.dpt, st, DP_CP);
        mine = M.s.dkv_local;
    }
    copy_cols_kernel<<<grid_for((size_t)T * 2 * C), 256, 0, st>>>(dqkv + C, 3 * C, mine, 2 * C, T, 2 * C);
    return 0;
}

/* ============================================================================================
 * the MLP: dense, or a mixture of experts
 * ============================================================================================ */

/* y [T, C] = x2 + Wproj gelu(Wfc n2) */
static void mlp_forward(GpuModel &M, const Stage &st, const gpt_layer_weights &w, LayerActs &la, int T, floatX *y)
{
    const int C = M.cfg.width, H = M.cfg.hidden;
    linear(M.blas, la.hpre, la.n2, X(st, w.wfc), T, C, H);
    gelu_fwd_kernel<<<grid_for((size_t)T * H), 256, 0, M.stream>>>(la.hact, la.hpre, (size_t)T * H);
    linear(M.blas, y, la.hact, X(st, w.wproj), T, H, C, la.x2);
}

/* dn [T, C] from dy [T, C]; dWproj, dWfc */
static void mlp_backward(GpuModel &M, const Stage &st, const gpt_layer_weights &w, gpt_layer_weights &g,
                         const LayerActs &la, int T, const floatX *dy, floatX *dn)
{
    const int C = M.cfg.width, H = M.cfg.hidden;
    linear_dw(M.blas, g.wproj, dy, la.hact, T, H, C);
    linear_dx(M.blas, M.s.dh, dy, X(st, w.wproj), T, H, C);
    gelu_bwd_kernel<<<grid_for((size_t)T * H), 256, 0, M.stream>>>(M.s.dh, la.hpre, (size_t)T * H);
    linear_dw(M.blas, g.wfc, M.s.dh, la.n2, T, C, H);
    linear_dx(M.blas, dn, M.s.dh, X(st, w.wfc), T, C, H);
}

/* Mixture of experts (gpt_moe): the router's softmax over E, K experts per token (replayed or
 * chosen), the (token, k) rows sorted by expert so that each expert is two GEMMs over its rows,
 * y = x2 + sum_k probs[e_k] E_k(n2). The experts' row counts come back to the host (one wait of
 * the host for the stream per MoE layer, as Megatron-LM's MoE waits for its tokens per expert).
 * Returns 0, or 1 (M.why) when that wait failed. */
static int moe_forward(GpuModel &M, const Stage &st, const gpt_layer_weights &w, LayerActs &la, const Batch &b,
                       const int *replay, const Route *r, int slot, floatX *y)
{
    const int C = M.cfg.width, E = M.cfg.experts, K = M.cfg.topk, He = M.cfg.expert_hidden, T = b.T;
    cudaStream_t s = M.stream;
    gemm(M.blas, true, false, E, T, C, 1.0f, X(st, w.wrouter), C, 0, la.n2, C, 0, 0.0f, M.s.logits, M.s.logits,
         CUDA_R_32F, E, 0, 1);
    moe_route_kernel<<<(T + 127) / 128, 128, 0, s>>>(la.probs, la.choice, M.s.logits, replay, T, E, K,
                                                     r ? r->record : nullptr, b.rows, r ? r->record_slots : 0, slot);
    moe_sort_kernel<<<1, MOE_SORT_THREADS, 0, s>>>(la.choice, T * K, E, K, la.tok, la.inv, M.s.moe_offs);
    CK(cudaMemcpyAsync(la.offs, M.s.moe_offs, (E + 1) * sizeof(int), cudaMemcpyDeviceToHost, s));
    if (host_wait(M)) return 1;
    pp_error e;
    if (pp_cuda_gather_rows(la.n2, M.s.xe, la.tok, 4, (int64_t)T * K, (int64_t)C * sizeof(floatX), s, &e) != PP_OK) {
        snprintf(M.why, sizeof M.why, "%s", e.message);
        return 1;
    }
    for (int x = 0; x < E; x++) {
        const int o = la.offs[x], n = la.offs[x + 1] - o;
        linear(M.blas, la.hpre + (size_t)o * He, M.s.xe + (size_t)o * C, X(st, w.wfc) + (size_t)x * He * C, n, C, He);
    }
    gelu_fwd_kernel<<<grid_for((size_t)T * K * He), 256, 0, s>>>(la.hact, la.hpre, (size_t)T * K * He);
    for (int x = 0; x < E; x++) {
        const int o = la.offs[x], n = la.offs[x + 1] - o;
        linear(M.blas, la.eo + (size_t)o * C, la.hact + (size_t)o * He, X(st, w.wproj) + (size_t)x * C * He, n, He, C);
    }
    moe_combine_kernel<<<grid_for((size_t)T * C), 256, 0, s>>>(y, la.x2, la.eo, la.probs, la.choice, la.inv, T, C, E, K);
    return 0;
}

/* dn [T, C] from dy [T, C]; the experts' and the router's weight gradients (gpt_moe_backward) */
static void moe_backward(GpuModel &M, const Stage &st, const gpt_layer_weights &w, gpt_layer_weights &g,
                         const LayerActs &la, int T, const floatX *dy, floatX *dn)
{
    const int C = M.cfg.width, E = M.cfg.experts, K = M.cfg.topk, He = M.cfg.expert_hidden;
    cudaStream_t s = M.stream;
    pp_error e;
    moe_combine_bwd_kernel<<<T * K, 128, 0, s>>>(M.s.dsel, M.s.deo, dy, la.eo, la.probs, la.choice, la.inv, C, E, K);
    if (pp_cuda_gather_rows(la.n2, M.s.xe, la.tok, 4, (int64_t)T * K, (int64_t)C * sizeof(floatX), s, &e) != PP_OK) {
        fprintf(stderr, "gpt_gpu: %s\n", e.message);
        exit(1);
    }
    for (int x = 0; x < E; x++) {       /* through Wproj */
        const int o = la.offs[x], n = la.offs[x + 1] - o;
        linear_dw(M.blas, g.wproj + (size_t)x * C * He, M.s.deo + (size_t)o * C, la.hact + (size_t)o * He, n, He, C);
        linear_dx(M.blas, M.s.dh + (size_t)o * He, M.s.deo + (size_t)o * C, X(st, w.wproj) + (size_t)x * C * He, n, He, C);
    }
    gelu_bwd_kernel<<<grid_for((size_t)T * K * He), 256, 0, s>>>(M.s.dh, la.hpre, (size_t)T * K * He);
    for (int x = 0; x < E; x++) {       /* through Wfc */
        const int o = la.offs[x], n = la.offs[x + 1] - o;
        linear_dw(M.blas, g.wfc + (size_t)x * He * C, M.s.dh + (size_t)o * He, M.s.xe + (size_t)o * C, n, C, He);
        linear_dx(M.blas, M.s.dxe + (size_t)o * C, M.s.dh + (size_t)o * He, X(st, w.wfc) + (size_t)x * He * C, n, C, He);
    }
    moe_uncombine_kernel<<<grid_for((size_t)T * C), 256, 0, s>>>(dn, M.s.dxe, la.inv, T, C, K);
    /* the router: softmax backward, then dWrouter += dl^T n2 and dn += dl Wrouter */
    moe_router_bwd_kernel<<<(T + 127) / 128, 128, 0, s>>>(M.s.dl, la.probs, la.choice, M.s.dsel, T, E, K);
    linear_dw(M.blas, g.wrouter, M.s.dl, la.n2, T, C, E);
    linear_dx(M.blas, dn, M.s.dl, X(st, w.wrouter), T, C, E, 1.0f);
}

/* ============================================================================================
 * a stage forward: (token ids | the residual stream) -> (the residual stream | logits)
 * ============================================================================================ */

static void rmsnorm_forward(GpuModel &M, floatX *out, float *rs, const floatX *x, const floatX *g, int T)
{
    rmsnorm_fwd_kernel<<<T, 256, 0, M.stream>>>(out, rs, x, g, M.cfg.width);
}

static void rmsnorm_backward(GpuModel &M, floatX *dx, float *dg, const floatX *dout, const floatX *x, const float *rs,
                             const floatX *g, const floatX *dres, int T)
{
    const int rows = 32, C = M.cfg.width;
    rmsnorm_bwd_kernel<<<(T + rows - 1) / rows, 256, C * sizeof(float), M.stream>>>(dx, dg, dout, x, rs, g, dres, T, C,
                                                                                     rows);
}

/* in: [T] int32 token ids on the first stage, else [T, C]; out: [T, V] logits on the last stage,
 * else [T, C]. Saves what the backward needs in a. Returns 0, or 1 (M.why). */
static int stage_forward(GpuModel &M, const Stage &st, const Batch &b, const Route *r, const void *in, floatX *out,
                         Acts &a)
{
    const gpt_config &c = M.cfg;
    const int C = c.width, T = b.T;
    cudaStream_t s = M.stream;
    floatX *x = st.shape.count > 0 ? a.layer[0].x : (st.shape.has_head ? a.xf : out);
    unit_mark(M);
    if (st.shape.has_embedding)        /* x = wte[id] + wpe[position in its sequence] */
        embed_fwd_kernel<<<grid_for((size_t)T * C), 256, 0, s>>>(x, (const int *)in, b.pos, X(st, st.w.wte),
                                                                 X(st, st.w.wpe), T, C);
    else
        CK(cudaMemcpyAsync(x, in, (size_t)T * C * sizeof(floatX), cudaMemcpyDeviceToDevice, s));
    for (int k = 0, moe = 0; k < st.shape.count; k++) {
        const gpt_layer_weights &w = st.w.layer[k];
        LayerActs &la = a.layer[k];
        floatX *y = k + 1 < st.shape.count ? a.layer[k + 1].x : (st.shape.has_head ? a.xf : out);
        if (GPT_HAS_ATTN(&st.shape, k)) {   /* attention block: x2 = x + Wo attention(RMSNorm(x)) */
            unit_mark(M);
            rmsnorm_forward(M, la.n1, la.rs1, la.x, X(st, w.ln1), T);
            linear(M.blas, la.qkv, la.n1, X(st, w.wqkv), T, C, 3 * C);
            if (attention_forward(M, b, la)) return 1;
            linear(M.blas, GPT_HAS_MLP(&st.shape, k) ? la.x2 : y, la.ay, X(st, w.wo), T, C, C, la.x);
        }
        if (!GPT_HAS_MLP(&st.shape, k)) continue;
        /* MLP block: y = x2 + MLP(RMSNorm(x2)) */
        unit_mark(M);
        rmsnorm_forward(M, la.n2, la.rs2, la.x2, X(st, w.ln2), T);
        if (w.wrouter) {
            const int *rp = r && r->replay ? r->replay + (size_t)moe * T * c.topk : nullptr;
            if (moe_forward(M, st, w, la, b, rp, r, c.moe_slot[st.shape.first + k], y)) return 1;
            moe++;
        } else {
            mlp_forward(M, st, w, la, T, y);
        }
    }
    if (st.shape.has_head) {           /* logits = RMSNorm(x) wte^T: the output layer is the embedding */
        unit_mark(M);
        rmsnorm_forward(M, a.nf, a.rsf, a.xf, X(st, st.w.lnf), T);
        linear(M.blas, out, a.nf, X(st, st.w.wte_out), T, C, c.vocab);
    }
    CK(cudaGetLastError());
    return 0;
}

/* The loss of a microbatch's local tokens: loss_sum (device) += the sum over labelled tokens of
 * -log p(label); dlogits (may be logits; NULL: the loss alone) = (p - onehot) * grad_scale. */
static void stage_loss(GpuModel &M, const Batch &b, const floatX *logits, floatX *dlogits, float grad_scale,
                       double *loss_sum)
{
    cross_entropy_kernel<<<b.T, 256, 0, M.stream>>>(logits, dlogits, b.labels, M.cfg.vocab, grad_scale, loss_sum);
    CK(cudaGetLastError());
}

/* ============================================================================================
 * a stage backward, the forward in reverse
 * ============================================================================================ */

/* grad_out: [T, V] dlogits on the last stage, else [T, C]; grad_in: [T, C], or NULL on the first
 * stage (the embedding takes the gradient instead). Adds into the stage's gradients. Returns 0,
 * or 1 (M.why). */
static int stage_backward(GpuModel &M, Stage &st, const Batch &b, const floatX *grad_out, floatX *grad_in, const Acts &a)
{
    const gpt_config &c = M.cfg;
    const int C = c.width, T = b.T;
    cudaStream_t s = M.stream;
    floatX *dx = M.s.dx, *dn = M.s.dn;
    unit_mark(M);
    if (st.shape.has_head && st.head_dout) {   /* stage_defer_head: grad_out is rows of head_dout (stage_head_rows) */
        const size_t row = grad_out >= st.head_dout ? (size_t)(grad_out - st.head_dout) / c.vocab : (size_t)st.head_cap;
        if (row + T > (size_t)st.head_cap) {
            snprintf(M.why, sizeof M.why, "backward: the logits' gradient is not in the deferred output layer's rows");
            return 1;
        }
        CK(cudaMemcpyAsync(st.head_in + row * C, a.nf, (size_t)T * C * sizeof(floatX), cudaMemcpyDeviceToDevice, s));
    }
    if (st.shape.has_head) {
        linear_dx(M.blas, dn, grad_out, X(st, st.w.wte_out), T, C, c.vocab);
        rmsnorm_backward(M, dx, st.g.lnf, dn, a.xf, a.rsf, X(st, st.w.lnf), nullptr, T);
        unit_mark(M);                  /* the weight gradient on its own (--unit-costs: what a deferral moves) */
        if (!st.head_dout) linear_dw(M.blas, st.g.wte_out, grad_out, a.nf, T, C, c.vocab);
    } else {
        CK(cudaMemcpyAsync(dx, grad_out, (size_t)T * C * sizeof(floatX), cudaMemcpyDeviceToDevice, s));
    }
    for (int k = st.shape.count - 1; k >= 0; k--) {
        const gpt_layer_weights &w = st.w.layer[k];
        gpt_layer_weights &g = st.g.layer[k];
        const LayerActs &la = a.layer[k];
        if (GPT_HAS_MLP(&st.shape, k)) {
            /* MLP block: dx holds dy; the residual passes it to x2 unchanged, the MLP adds to it */
            unit_mark(M);
            if (w.wrouter) moe_backward(M, st, w, g, la, T, dx, dn);
            else mlp_backward(M, st, w, g, la, T, dx, dn);
            rmsnorm_backward(M, dx, g.ln2, dn, la.x2, la.rs2, X(st, w.ln2), dx, T);
        }
        if (!GPT_HAS_ATTN(&st.shape, k)) continue;
        /* attention block: dx holds dx2; the residual passes it on, attention adds to it */
        unit_mark(M);
        linear_dw(M.blas, g.wo, dx, la.ay, T, C, C);
        linear_dx(M.blas, M.s.day, dx, X(st, w.wo), T, C, C);
        if (attention_backward(M, b, la, M.s.day, M.s.dqkv)) return 1;
        linear_dw(M.blas, g.wqkv, M.s.dqkv, la.n1, T, C, 3 * C);
        linear_dx(M.blas, dn, M.s.dqkv, X(st, w.wqkv), T, C, 3 * C);
        rmsnorm_backward(M, dx, g.ln1, dn, la.x, la.rs1, X(st, w.ln1), dx, T);
    }
    unit_mark(M);
    if (st.shape.has_embedding)        /* each token's row of wte and its position's row of wpe */
        embed_bwd_kernel<<<grid_for((size_t)T * C), 256, 0, s>>>(st.g.wte, st.g.wpe, dx, b.ids, b.pos, T, C);
    else if (grad_in)
        CK(cudaMemcpyAsync(grad_in, dx, (size_t)T * C * sizeof(floatX), cudaMemcpyDeviceToDevice, s));
    unit_mark(M);
    CK(cudaGetLastError());
    return 0;
}

/* stage_defer_head: the output layer's weight gradient of the rows kept since the last call, in
 * one product; the rows start again. */
static void stage_head_wgrad(GpuModel &M, Stage &st)
{
    if (!st.head_dout || !st.head_rows) return;
    linear_dw(M.blas, st.g.wte_out, st.head_dout, st.head_in, st.head_rows, M.cfg.width, M.cfg.vocab);
    st.head_rows = 0;
}

/* AdamW over the stage, the gradients scaled by *scale (device; NULL: 1); step counts from 1. */
static void stage_adamw(GpuModel &M, Stage &st, const float *scale, float lr, float wd, int step)
{
    const float c1 = 1.0f - powf(0.9f, (float)step), c2 = 1.0f - powf(0.95f, (float)step);
    adamw_kernel<<<grid_for(st.shape.n), 256, 0, M.stream>>>(st.params, st.px, st.grads, st.adam_m, st.adam_v,
                                                            st.shape.n, st.shape.n_gains, lr, wd, c1, c2, scale);
    CK(cudaGetLastError());
}

#endif /* GPT_GPU_MODEL_H */
