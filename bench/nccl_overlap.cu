/* nccl_overlap.cu — how long a pipeline's NCCL transfer takes when the peer GPU is busy with GEMMs.
 *
 * A pipeline rank that finishes an action posts a group (send its output, receive its next
 * input); the peer is usually in the middle of its own GEMMs then. NCCL's kernel needs SMs on
 * both GPUs, so the transfer's time depends on how soon the peer's GEMMs let it in. One
 * process drives both GPUs (ncclCommInitAll). GPU 1 runs back-to-back GEMMs of mlp_gpu's
 * forward shape (F x T x H = 16384 x 8192 x 4096, bf16, cuBLASLt) on a low-priority stream;
 * meanwhile a group of --mib MiB each way is posted on both GPUs' high-priority communication
 * streams, one at a time (each after the last one ended), after a random pause. Each line: the
 * group's time on GPU 0's stream (GPU 0 is idle, so this is the wait for GPU 1 plus the
 * transfer), median / 90th percentile / largest, and the GEMMs' time per call while the groups
 * ran, for:
 *
 *   idle          no GEMMs: the transfer alone
 *   gemm          cuBLASLt's first choice (persistent: its CTAs hold every SM to the end)
 *   pieces N      the same GEMM as N GEMMs over T/N tokens each
 *   margin N      the GEMM planned for N fewer SMs (CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET)
 *   both          GEMMs on both GPUs
 *   ce ...        the same exchange through the copy engines instead (what
 *                 pp_nccl_transport_copy_engine does): each GPU pushes its bytes into a staging
 *                 buffer on the other (cudaMemcpyPeerAsync over NVLink), then each copies its
 *                 staging buffer into its receive buffer; ce+hint: that local copy through
 *                 cudaMemcpyBatchAsync with cudaMemcpyFlagPreferOverlapWithCompute (a plain
 *                 device-to-device cudaMemcpyAsync may run as a kernel, on SMs)
 *   push ...      each GPU copies straight into the peer's receive buffer (no staging buffer,
 *                 no local copy: pp_nccl_transport_copy_engine when the receive was posted first)
 *   pull ...      each GPU copies the peer's send buffer into its own receive buffer, the copy
 *                 issued on the receiving GPU (when the send was posted first); pull+hint: through
 *                 cudaMemcpyBatchAsync with the hint above
 *
 *     build/bench_nccl_overlap [--mib 64] [--transfers 60]
 *
 * NCCL's environment applies (NCCL_MAX_P2P_NCHANNELS, NCCL_P2P_USE_CUDA_MEMCPY, ...).        */
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cublasLt.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <unistd.h>
#include <algorithm>
#include <vector>

#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    fprintf(stderr, "nccl_overlap: %s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); exit(1); } } while (0)
#define CKLT(call) do { cublasStatus_t s_ = (call); if (s_ != CUBLAS_STATUS_SUCCESS) { \
    fprintf(stderr, "nccl_overlap: %s:%d: cuBLASLt status %d\n", __FILE__, __LINE__, (int)s_); exit(1); } } while (0)
#define NK(call) do { ncclResult_t r_ = (call); if (r_ != ncclSuccess) { \
    fprintf(stderr, "nccl_overlap: %s:%d: %s\n", __FILE__, __LINE__, ncclGetErrorString(r_)); exit(1); } } while (0)

typedef __nv_bfloat16 bf16;
enum { H = 4096, T = 8192, F = 4 * H };

__global__ void fill_kernel(bf16 *p, size_t n, unsigned seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)(i * 2654435761u) ^ (seed * 0x9e3779b9u);
        h ^= h >> 15; h *= 0x2c1b3c6du; h ^= h >> 12;
        p[i] = __float2bfloat16(((h & 0xffff) / 65536.0f - 0.5f) * 0.05f);
    }
}

/* One GPU's GEMM: D[F, T] = op(W)[F, H] x X[H, T], as `pieces` GEMMs over T / pieces columns. */
struct Gemm {
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
    int pieces;
    bf16 *W, *X, *D;
    void *ws;
    size_t ws_bytes;
};

static void gemm_make(Gemm &g, int pieces, int sm_target)
{
    g.pieces = pieces;
    g.ws_bytes = 64u << 20;
    CKLT(cublasLtCreate(&g.lt));
    CK(cudaMalloc(&g.ws, g.ws_bytes));
    CK(cudaMalloc(&g.W, (size_t)F * H * 2)); CK(cudaMalloc(&g.X, (size_t)H * T * 2)); CK(cudaMalloc(&g.D, (size_t)F * T * 2));
    /* random operands: a GEMM on zeros draws less power and runs faster than on real data */
    fill_kernel<<<1024, 256>>>(g.W, (size_t)F * H, 1);
    fill_kernel<<<1024, 256>>>(g.X, (size_t)H * T, 2);
    CK(cudaGetLastError());
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    CKLT(cublasLtMatmulDescCreate(&g.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CKLT(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CKLT(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (sm_target > 0)
        CKLT(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &sm_target, sizeof sm_target));
    int n = T / pieces;
    CKLT(cublasLtMatrixLayoutCreate(&g.a, CUDA_R_16BF, H, F, H));
    CKLT(cublasLtMatrixLayoutCreate(&g.b, CUDA_R_16BF, H, n, H));
    CKLT(cublasLtMatrixLayoutCreate(&g.c, CUDA_R_16BF, F, n, F));
    cublasLtMatmulPreference_t pref;
    CKLT(cublasLtMatmulPreferenceCreate(&pref));
    CKLT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &g.ws_bytes, sizeof g.ws_bytes));
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    CKLT(cublasLtMatmulAlgoGetHeuristic(g.lt, g.desc, g.a, g.b, g.c, g.c, pref, 1, &res, &found));
    if (!found) { fprintf(stderr, "nccl_overlap: no cuBLASLt algorithm\n"); exit(1); }
    g.algo = res.algo;
    CKLT(cublasLtMatmulPreferenceDestroy(pref));
}

static void gemm_run(Gemm &g, cudaStream_t s)
{
    float alpha = 1, beta = 0;
    size_t n = T / g.pieces;
    for (int p = 0; p < g.pieces; p++)
        CKLT(cublasLtMatmul(g.lt, g.desc, &alpha, g.W, g.a, g.X + p * n * H, g.b, &beta, g.D + p * n * F, g.c,
                            g.D + p * n * F, g.c, &g.algo, g.ws, g.ws_bytes, s));
}

static void gemm_free(Gemm &g)
{
    cublasLtMatrixLayoutDestroy(g.a); cublasLtMatrixLayoutDestroy(g.b); cublasLtMatrixLayoutDestroy(g.c);
    cublasLtMatmulDescDestroy(g.desc);
    cudaFree(g.W); cudaFree(g.X); cudaFree(g.D); cudaFree(g.ws);
    cublasLtDestroy(g.lt);
}

int main(int argc, char **argv)
{
    int mib = 64, transfers = 60;
    for (int i = 1; i < argc; i++) {
        int *dst = !strcmp(argv[i], "--mib") ? &mib : !strcmp(argv[i], "--transfers") ? &transfers : nullptr;
        if (!strcmp(argv[i], "--help")) { printf("usage: nccl_overlap [--mib 64] [--transfers 60]\n"); return 0; }
        if (!dst || i + 1 >= argc) { fprintf(stderr, "nccl_overlap: unknown or incomplete argument '%s'\n", argv[i]); return 2; }
        char *end;
        long v = strtol(argv[++i], &end, 10);
        if (*end || v < 1 || v > 4096) { fprintf(stderr, "nccl_overlap: %s must be in [1, 4096]\n", argv[i - 1]); return 2; }
        *dst = (int)v;
    }
    int ndev = 0;
    CK(cudaGetDeviceCount(&ndev));
    if (ndev < 2) { fprintf(stderr, "nccl_overlap: needs 2 GPUs, found %d\n", ndev); return 2; }
    int devs[2] = { 0, 1 }, sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    ncclComm_t comm[2];
    NK(ncclCommInitAll(comm, 2, devs));
    size_t bytes = (size_t)mib << 20;
    cudaStream_t cs[2], gs[2];
    char *sb[2], *rb[2], *st[2];
    cudaEvent_t pushed[2];
    std::vector<cudaEvent_t> ev0(transfers), ev1(transfers);
    for (int d = 0; d < 2; d++) {
        int lo, hi;
        CK(cudaSetDevice(d));
        CK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
        CK(cudaStreamCreateWithPriority(&cs[d], cudaStreamNonBlocking, hi));
        CK(cudaStreamCreateWithPriority(&gs[d], cudaStreamNonBlocking, lo));
        CK(cudaMalloc(&sb[d], bytes)); CK(cudaMalloc(&rb[d], bytes)); CK(cudaMalloc(&st[d], bytes));
        CK(cudaEventCreateWithFlags(&pushed[d], cudaEventDisableTiming));
        cudaError_t pe = cudaDeviceEnablePeerAccess(1 - d, 0);
        if (pe != cudaSuccess && pe != cudaErrorPeerAccessAlreadyEnabled) CK(pe);
        (void)cudaGetLastError();
    }
    CK(cudaSetDevice(0));
    for (int t = 0; t < transfers; t++) { CK(cudaEventCreate(&ev0[t])); CK(cudaEventCreate(&ev1[t])); }
    auto post = [&](void) {
        NK(ncclGroupStart());
        for (int d = 0; d < 2; d++) {
            NK(ncclSend(sb[d], bytes, ncclChar, 1 - d, comm[d], cs[d]));
            NK(ncclRecv(rb[d], bytes, ncclChar, 1 - d, comm[d], cs[d]));
        }
        NK(ncclGroupEnd());
    };
    /* the copy engines' exchange: push into the peer's staging buffer, then (once the peer's push
     * has landed) copy the own staging buffer out */
    int ce_hint = 0;
    auto batch_copy = [&](void *dst, const void *src, size_t n, cudaStream_t stream) {
        cudaMemcpyAttributes attr;
        memset(&attr, 0, sizeof attr);
        attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
        attr.srcLocHint.type = cudaMemLocationTypeDevice;
        attr.dstLocHint.type = cudaMemLocationTypeDevice;
        attr.flags = cudaMemcpyFlagPreferOverlapWithCompute;
        void *dsts[1] = { dst };
        const void *srcs[1] = { src };
        size_t sizes[1] = { n }, first = 0;
        CK(cudaMemcpyBatchAsync(dsts, srcs, sizes, 1, &attr, &first, 1, stream));
    };
    /* one copy each way: pushed by the sender (ce 3) or pulled by the receiver (ce 4, 5) */
    auto post_one = [&](int ce) {
        for (int d = 0; d < 2; d++) {
            CK(cudaSetDevice(d));
            if (ce == 3) CK(cudaMemcpyPeerAsync(rb[1 - d], 1 - d, sb[d], d, bytes, cs[d]));
            else if (ce == 4) CK(cudaMemcpyPeerAsync(rb[d], d, sb[1 - d], 1 - d, bytes, cs[d]));
            else batch_copy(rb[d], sb[1 - d], bytes, cs[d]);
            CK(cudaEventRecord(pushed[d], cs[d]));
        }
        for (int d = 0; d < 2; d++) { CK(cudaSetDevice(d)); CK(cudaStreamWaitEvent(cs[d], pushed[1 - d], 0)); }
    };
    auto post_ce = [&](void) {
        for (int d = 0; d < 2; d++) {
            CK(cudaSetDevice(d));
            CK(cudaMemcpyPeerAsync(st[1 - d], 1 - d, sb[d], d, bytes, cs[d]));
            CK(cudaEventRecord(pushed[d], cs[d]));
        }
        for (int d = 0; d < 2; d++) {
            CK(cudaSetDevice(d));
            CK(cudaStreamWaitEvent(cs[d], pushed[1 - d], 0));
            if (!ce_hint) { CK(cudaMemcpyAsync(rb[d], st[d], bytes, cudaMemcpyDeviceToDevice, cs[d])); continue; }
            batch_copy(rb[d], st[d], bytes, cs[d]);   /* the local copy, hinted to leave the SMs to compute */
        }
    };
    for (int w = 0; w < 5; w++) { post(); post_ce(); post_one(3); post_one(4); post_one(5); }
    for (int d = 0; d < 2; d++) { CK(cudaSetDevice(d)); CK(cudaDeviceSynchronize()); }

    printf("nccl_overlap: %d MiB each way per group, %d groups per line, %d SMs; GEMM 16384 x 8192 x 4096 bf16\n", mib,
           transfers, sms);
    printf("%-14s %10s %10s %10s %12s\n", "GPU 1 runs", "median ms", "p90 ms", "max ms", "GEMM ms");
    struct Mode { const char *name; int pieces, margin, both, load, ce; } modes[] = {
        { "idle", 1, 0, 0, 0, 0 }, { "gemm", 1, 0, 0, 1, 0 }, { "pieces 2", 2, 0, 0, 1, 0 }, { "pieces 4", 4, 0, 0, 1, 0 },
        { "pieces 8", 8, 0, 0, 1, 0 }, { "margin 8", 1, 8, 0, 1, 0 }, { "margin 16", 1, 16, 0, 1, 0 },
        { "margin 32", 1, 32, 0, 1, 0 }, { "both", 1, 0, 1, 1, 0 },
        { "ce idle", 1, 0, 0, 0, 1 }, { "ce gemm", 1, 0, 0, 1, 1 }, { "ce both", 1, 0, 1, 1, 1 },
        { "ce+hint idle", 1, 0, 0, 0, 2 }, { "ce+hint gemm", 1, 0, 0, 1, 2 }, { "ce+hint both", 1, 0, 1, 1, 2 },
        { "push idle", 1, 0, 0, 0, 3 }, { "push gemm", 1, 0, 0, 1, 3 }, { "push both", 1, 0, 1, 1, 3 },
        { "pull idle", 1, 0, 0, 0, 4 }, { "pull gemm", 1, 0, 0, 1, 4 }, { "pull both", 1, 0, 1, 1, 4 },
        { "pull+hint gemm", 1, 0, 0, 1, 5 }, { "pull+hint both", 1, 0, 1, 1, 5 },
    };
    srand(7);
    for (const Mode &m : modes) {
        Gemm g[2];
        int calls = m.load ? transfers * 3 : 0;   /* ~1.4 ms each: they outlast the transfers */
        for (int d = 0; d < 2; d++)
            if (m.load && (d == 1 || m.both)) {
                CK(cudaSetDevice(d));
                gemm_make(g[d], m.pieces, m.margin ? sms - m.margin : 0);
                gemm_run(g[d], gs[d]);
                CK(cudaDeviceSynchronize());
            }
        /* GPU 1's GEMMs, an event after each, and the end of the groups on GPU 1's stream: the
         * GEMM time reported is that of the calls that ended while the groups still ran */
        std::vector<cudaEvent_t> after(calls + 1);
        cudaEvent_t phase_end;
        CK(cudaSetDevice(1));
        for (int c = 0; c <= calls; c++) CK(cudaEventCreate(&after[c]));
        CK(cudaEventCreate(&phase_end));
        CK(cudaEventRecord(after[0], gs[1]));
        for (int c = 0; c < calls; c++) {
            for (int d = 0; d < 2; d++)
                if (d == 1 || m.both) { CK(cudaSetDevice(d)); gemm_run(g[d], gs[d]); }
            CK(cudaSetDevice(1));
            CK(cudaEventRecord(after[c + 1], gs[1]));
        }
        usleep(3000);
        for (int t = 0; t < transfers; t++) {
            usleep(500 + rand() % 2500);  /* a random phase against the GEMMs */
            CK(cudaSetDevice(0));
            CK(cudaEventRecord(ev0[t], cs[0]));
            ce_hint = m.ce == 2;
            if (m.ce >= 3) post_one(m.ce); else if (m.ce) post_ce(); else post();
            CK(cudaSetDevice(0));
            CK(cudaEventRecord(ev1[t], cs[0]));
            CK(cudaEventSynchronize(ev1[t]));   /* one group at a time: none queues behind another */
        }
        CK(cudaSetDevice(1));
        CK(cudaEventRecord(phase_end, cs[1]));
        for (int d = 0; d < 2; d++) { CK(cudaSetDevice(d)); CK(cudaDeviceSynchronize()); }
        std::vector<float> ms(transfers);
        CK(cudaSetDevice(0));
        for (int t = 0; t < transfers; t++) CK(cudaEventElapsedTime(&ms[t], ev0[t], ev1[t]));
        std::sort(ms.begin(), ms.end());
        float gemm_ms = 0, phase = 0;
        int during = 0;
        CK(cudaSetDevice(1));
        if (calls) {
            CK(cudaEventElapsedTime(&phase, after[0], phase_end));
            for (int c = 1; c <= calls; c++) {
                float at = 0;
                CK(cudaEventElapsedTime(&at, after[0], after[c]));
                if (at <= phase) during = c;
            }
            if (during) CK(cudaEventElapsedTime(&gemm_ms, after[0], after[during]));
            if (during) gemm_ms /= during;
            if (during == calls) fprintf(stderr, "nccl_overlap: %s: the GEMMs ended before the groups\n", m.name);
        }
        for (int c = 0; c <= calls; c++) CK(cudaEventDestroy(after[c]));
        CK(cudaEventDestroy(phase_end));
        printf("%-14s %10.3f %10.3f %10.3f %12.3f\n", m.name, ms[transfers / 2], ms[transfers * 9 / 10], ms.back(), gemm_ms);
        fflush(stdout);
        for (int d = 0; d < 2; d++)
            if (m.load && (d == 1 || m.both)) { CK(cudaSetDevice(d)); gemm_free(g[d]); }
    }
    CK(cudaSetDevice(0));
    for (int t = 0; t < transfers; t++) { CK(cudaEventDestroy(ev0[t])); CK(cudaEventDestroy(ev1[t])); }
    for (int d = 0; d < 2; d++) {
        CK(cudaSetDevice(d));
        CK(cudaFree(sb[d])); CK(cudaFree(rb[d])); CK(cudaFree(st[d])); CK(cudaEventDestroy(pushed[d]));
        CK(cudaStreamDestroy(cs[d])); CK(cudaStreamDestroy(gs[d]));
        NK(ncclCommDestroy(comm[d]));
    }
    return 0;
}
