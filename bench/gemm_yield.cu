/* gemm_yield.cu — how long a high-priority kernel waits for SMs while a GEMM runs.
 *
 * A pipeline rank's NCCL kernel is launched while the rank computes. Its CTAs need SMs, and a
 * GEMM whose CTAs stay resident for the whole GEMM (a persistent kernel) frees none until it
 * ends: the transfer then waits up to one GEMM's time, however high its stream's priority.
 * This bench measures that wait for each cuBLASLt candidate of mlp_gpu's six GEMMs:
 *
 *   time      the candidate alone, ms per GEMM
 *   probe gap while 6 back-to-back GEMMs run on a low-priority stream, a chain of small
 *             kernels (--probe-ctas CTAs of 512 threads each, about what NCCL launches for one
 *             peer) runs on a high-priority stream; each stamps the GPU's clock when its last
 *             CTA starts. The median and the largest gap between consecutive stamps inside the
 *             GEMMs' window say how soon a kernel launched mid-GEMM gets its SMs (a few us when
 *             CTAs retire often; about one GEMM when they never do)
 *   slowdown  the GEMMs' window with the probes against without them
 *
 *     build/bench_gemm_yield [--hidden 4096] [--tokens 8192] [--cands 16] [--probe-ctas 16] [--all]
 *
 * --all also tries every variant of each candidate that cuBLASLt accepts (each custom option and
 * CTA swizzle, cublasLtMatmulAlgoCheck) and lists those within 10% of the heuristic's best ("v"
 * lines; the heuristic's own are "h" lines). On H200 with cuBLASLt 13 no variant changed whether
 * a kernel yields: that follows the kernel (its tile and schedule), not these options. It also
 * offers each GEMM the other GEMMs' kernel families with every tile they support ("t" lines).
 *
 * Shapes and epilogues are mlp_gpu's (examples/mlp_gpu.cu, gemms_create).                    */
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cublasLt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <unistd.h>
#include <algorithm>
#include <vector>

#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    fprintf(stderr, "gemm_yield: %s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); exit(1); } } while (0)
#define CKLT(call) do { cublasStatus_t s_ = (call); if (s_ != CUBLAS_STATUS_SUCCESS) { \
    fprintf(stderr, "gemm_yield: %s:%d: cuBLASLt status %d\n", __FILE__, __LINE__, (int)s_); exit(1); } } while (0)

typedef __nv_bfloat16 bf16;

static __device__ __forceinline__ uint64_t global_ns(void)
{
    uint64_t t;
    asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
    return t;
}

/* One probe: every CTA stamps its start; the kernel's stamp is the latest of them (atomicMax). */
__global__ void probe_kernel(unsigned long long *stamps, int i)
{
    if (threadIdx.x == 0) atomicMax(&stamps[i], (unsigned long long)global_ns());
}

__global__ void stamp_kernel(unsigned long long *where) { *where = global_ns(); }

__global__ void fill_kernel(bf16 *p, size_t n, float scale)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = __float2bfloat16(scale * (float)((i * 2654435761u) % 1000) / 1000.0f - scale / 2);
}

struct Plan {
    const char *name;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c;
    bool aux, f32, beta1;
    double flops;
};

static Plan plan(const char *name, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, int lda, int ldb,
                 int ldc, bool f32, cublasLtEpilogue_t epi, bool beta1)
{
    Plan p = {};
    p.name = name; p.f32 = f32; p.beta1 = beta1;
    CKLT(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CKLT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CKLT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    CKLT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (epi == CUBLASLT_EPILOGUE_GELU_AUX || epi == CUBLASLT_EPILOGUE_DGELU) {
        int64_t ld = m;
        cudaDataType_t at = CUDA_R_16BF;
        p.aux = true;
        CKLT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
        CKLT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &at, sizeof at));
    }
    CKLT(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, ta == CUBLAS_OP_N ? m : k, ta == CUBLAS_OP_N ? k : m, lda));
    CKLT(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, tb == CUBLAS_OP_N ? k : n, tb == CUBLAS_OP_N ? n : k, ldb));
    CKLT(cublasLtMatrixLayoutCreate(&p.c, f32 ? CUDA_R_32F : CUDA_R_16BF, m, n, ldc));
    p.flops = 2.0 * m * n * k;
    return p;
}

static int has_flag(int argc, char **argv, const char *flag)
{
    for (int i = 1; i < argc; i++) if (!strcmp(argv[i], flag)) return 1;
    return 0;
}

static int arg_int(int argc, char **argv, const char *flag, int dflt, int lo, int hi)
{
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], flag)) {
            char *end;
            long v = strtol(argv[i + 1], &end, 10);
            if (*end || v < lo || v > hi) {
                fprintf(stderr, "gemm_yield: %s must be an integer in [%d, %d], got '%s'\n", flag, lo, hi, argv[i + 1]);
                exit(2);
            }
            return (int)v;
        }
    return dflt;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: gemm_yield [--hidden 4096] [--tokens 8192] [--cands 16] [--probe-ctas 16] [--all]\n");
            return 0;
        } else if (!strcmp(argv[i], "--all")) {
            continue;
        } else if (strncmp(argv[i], "--", 2) || (strcmp(argv[i], "--hidden") && strcmp(argv[i], "--tokens") &&
                                                   strcmp(argv[i], "--cands") && strcmp(argv[i], "--probe-ctas"))) {
            fprintf(stderr, "gemm_yield: unknown argument '%s' (see --help)\n", argv[i]);
            return 2;
        } else i++;
    const int H = arg_int(argc, argv, "--hidden", 4096, 64, 65536), T = arg_int(argc, argv, "--tokens", 8192, 64, 1 << 20);
    const int enumerate = has_flag(argc, argv, "--all");
    const int cands = arg_int(argc, argv, "--cands", 16, 1, 64), probe_ctas = arg_int(argc, argv, "--probe-ctas", 16, 1, 1024);
    const int F = 4 * H, reps = 6, probes = 4000;

    int lo, hi, sms;
    CK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    cudaStream_t gemm_stream, probe_stream;
    CK(cudaStreamCreateWithPriority(&gemm_stream, cudaStreamNonBlocking, lo));
    CK(cudaStreamCreateWithPriority(&probe_stream, cudaStreamNonBlocking, hi));
    cublasLtHandle_t lt;
    CKLT(cublasLtCreate(&lt));
    size_t ws_bytes = 64u << 20;
    void *ws;
    CK(cudaMalloc(&ws, ws_bytes));

    size_t big = (size_t)F * std::max(T, H);
    bf16 *A, *B, *C, *aux;
    float *C32;
    CK(cudaMalloc(&A, big * 2)); CK(cudaMalloc(&B, big * 2)); CK(cudaMalloc(&C, big * 2));
    CK(cudaMalloc(&aux, big * 2)); CK(cudaMalloc(&C32, (size_t)F * H * 4));
    fill_kernel<<<1024, 256>>>(A, big, 0.04f); fill_kernel<<<1024, 256>>>(B, big, 0.04f);
    fill_kernel<<<1024, 256>>>(C, big, 0.04f); fill_kernel<<<1024, 256>>>(aux, big, 2.0f);
    CK(cudaMemset(C32, 0, (size_t)F * H * 4));
    unsigned long long *stamps;
    CK(cudaMalloc(&stamps, (probes + 2) * sizeof *stamps));
    std::vector<unsigned long long> host(probes + 2);

    const cublasOperation_t N = CUBLAS_OP_N, Tr = CUBLAS_OP_T;
    Plan plans[6] = {
        plan("fwd1 gelu_aux", Tr, N, F, T, H, H, H, F, false, CUBLASLT_EPILOGUE_GELU_AUX, false),
        plan("fwd2 +residual", Tr, N, H, T, F, F, F, H, false, CUBLASLT_EPILOGUE_DEFAULT, true),
        plan("dW2", N, Tr, F, H, T, F, H, F, true, CUBLASLT_EPILOGUE_DEFAULT, true),
        plan("dh dgelu", N, N, F, T, H, F, H, F, false, CUBLASLT_EPILOGUE_DGELU, false),
        plan("dW1", N, Tr, H, F, T, H, F, H, true, CUBLASLT_EPILOGUE_DEFAULT, true),
        plan("dx +residual", N, N, H, T, F, H, F, H, false, CUBLASLT_EPILOGUE_DEFAULT, true),
    };
    cublasLtMatmulPreference_t pref;
    CKLT(cublasLtMatmulPreferenceCreate(&pref));
    CKLT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));

    printf("gemm_yield: H=%d T=%d, %d SMs, probe of %d CTAs x 512 threads on a high-priority stream\n", H, T, sms,
           probe_ctas);
    printf("%-15s %4s %9s %8s %11s %11s %9s %6s\n", "gemm", "cand", "ms", "TFLOP/s", "gap median", "gap max",
           "slowdown", "probes");
    /* every GEMM's heuristic candidates; --all also tries each GEMM's on the other GEMMs */
    std::vector<cublasLtMatmulHeuristicResult_t> heur[6];
    for (int id = 0; id < 6; id++) {
        int found = 0;
        heur[id].resize(cands);
        CKLT(cublasLtMatmulAlgoGetHeuristic(lt, plans[id].desc, plans[id].a, plans[id].b, plans[id].c, plans[id].c, pref,
                                            cands, heur[id].data(), &found));
        heur[id].resize(found);
    }
    for (int id = 0; id < 6; id++) {
        Plan &p = plans[id];
        const std::vector<cublasLtMatmulHeuristicResult_t> &res = heur[id];
        const int found = (int)res.size();
        if (p.aux) CKLT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
        float alpha = 1, beta = p.beta1 ? 1.0f : 0.0f;
        void *cd = p.f32 ? (void *)C32 : (void *)C;
        auto measure = [&](const cublasLtMatmulAlgo_t &algo, const char *label, int idx, double *ms_out, double *gap_out) -> bool {
            auto gemm = [&](void) {
                return cublasLtMatmul(lt, p.desc, &alpha, A, p.a, B, p.b, &beta, cd, p.c, cd, p.c, &algo, ws,
                                      ws_bytes, gemm_stream);
            };
            if (gemm() != CUBLAS_STATUS_SUCCESS) { cudaGetLastError(); return false; }
            if (cudaStreamSynchronize(gemm_stream) != cudaSuccess) return false;
            /* alone */
            CK(cudaEventRecord(e0, gemm_stream));
            for (int r = 0; r < reps; r++) CKLT(gemm());
            CK(cudaEventRecord(e1, gemm_stream));
            CK(cudaEventSynchronize(e1));
            float alone = 0;
            CK(cudaEventElapsedTime(&alone, e0, e1));
            /* with the probe chain: the GEMMs' window is stamped on their own stream */
            CK(cudaMemset(stamps, 0, (probes + 2) * sizeof *stamps));
            CK(cudaDeviceSynchronize());
            stamp_kernel<<<1, 1, 0, gemm_stream>>>(&stamps[probes]);
            CK(cudaEventRecord(e0, gemm_stream));
            for (int r = 0; r < reps; r++) CKLT(gemm());
            CK(cudaEventRecord(e1, gemm_stream));
            stamp_kernel<<<1, 1, 0, gemm_stream>>>(&stamps[probes + 1]);
            usleep(200); /* the GEMMs are under way before the first probe launches */
            for (int k = 0; k < probes; k++) probe_kernel<<<probe_ctas, 512, 0, probe_stream>>>(stamps, k);
            CK(cudaDeviceSynchronize());
            float with = 0;
            CK(cudaEventElapsedTime(&with, e0, e1));
            CK(cudaMemcpy(host.data(), stamps, host.size() * sizeof host[0], cudaMemcpyDeviceToHost));
            unsigned long long w0 = host[probes], w1 = host[probes + 1], prev = 0;
            std::vector<double> gaps;
            int inside = 0;
            for (int k = 0; k < probes; k++) {
                unsigned long long st = host[k];
                if (st > w0 && st < w1) {
                    inside++;
                    if (inside > 1) gaps.push_back((st - prev) / 1e3);
                }
                prev = st;
            }
            double med = 0, mx = 0;
            if (!gaps.empty()) {
                std::sort(gaps.begin(), gaps.end());
                med = gaps[gaps.size() / 2];
                mx = gaps.back();
            }
            /* fewer than two probes inside the GEMMs saw no gap: the window itself is the bound */
            if (inside < 2) med = mx = (w1 - w0) / 1e3;
            int algo_id = 0, tile = 0, stages = 0, cluster = 0, splitk = 0;
            size_t got;
            cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_ID, &algo_id, sizeof algo_id, &got);
            cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &got);
            cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, &got);
            cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof cluster, &got);
            cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk, &got);
            *ms_out = alone / reps;
            *gap_out = mx;
            printf("%-15s %s%-3d %9.3f %8.1f %8.1f us %8.1f us %8.3fx %6d  algo %d tile %d stages %d cluster %d splitk %d%s\n",
                   p.name, label, idx, alone / reps, p.flops / (alone / reps * 1e-3) / 1e12, med, mx, with / alone,
                   inside, algo_id, tile, stages, cluster, splitk, host[probes - 1] < w1 ? " (probes ran out first)" : "");
            return true;
        };
        double best_ms = 1e30;
        for (int i = 0; i < found; i++) {
            if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
            double ms, gap;
            if (measure(res[i].algo, "h", i, &ms, &gap)) best_ms = std::min(best_ms, ms);
        }
        if (!enumerate) continue;
        /* a variant cuBLASLt accepts is timed once; within 10% of the heuristic's best it is
         * measured in full. Returns whether it ran. */
        auto try_variant = [&](const cublasLtMatmulAlgo_t &cand, const char *label, int idx) -> int {
            cublasLtMatmulHeuristicResult_t chk;
            if (cublasLtMatmulAlgoCheck(lt, p.desc, p.a, p.b, p.c, p.c, &cand, &chk) != CUBLAS_STATUS_SUCCESS) return 0;
            if (chk.workspaceSize > ws_bytes) return 0;
            auto gemm1 = [&](void) {
                return cublasLtMatmul(lt, p.desc, &alpha, A, p.a, B, p.b, &beta, cd, p.c, cd, p.c, &cand, ws, ws_bytes,
                                      gemm_stream);
            };
            if (gemm1() != CUBLAS_STATUS_SUCCESS) { cudaGetLastError(); return 0; }
            CK(cudaEventRecord(e0, gemm_stream));
            if (gemm1() != CUBLAS_STATUS_SUCCESS) return 0;
            CK(cudaEventRecord(e1, gemm_stream));
            CK(cudaEventSynchronize(e1));
            float quick = 0;
            CK(cudaEventElapsedTime(&quick, e0, e1));
            double ms, gap;
            if (quick <= 1.10 * best_ms) measure(cand, label, idx, &ms, &gap);
            return 1;
        };
        /* every variant of the heuristic's candidates: each custom option (the kernel family's
         * own variants) and CTA swizzle cuBLASLt accepts; those within 10% of the heuristic's best
         * are measured and listed ("v" lines, numbered by the candidate they vary) */
        int tried = 0;
        for (int i = 0; i < found; i++) {
            if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
            int custom_max = 0, swizzle_ok = 0;
            size_t got;
            cublasLtMatmulAlgoCapGetAttribute(&res[i].algo, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX, &custom_max,
                                              sizeof custom_max, &got);
            cublasLtMatmulAlgoCapGetAttribute(&res[i].algo, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT, &swizzle_ok,
                                              sizeof swizzle_ok, &got);
            int custom0 = 0, swizzle0 = 0;
            cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &custom0, sizeof custom0, &got);
            cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swizzle0, sizeof swizzle0, &got);
            printf("%-15s h%-3d custom option %d of 0..%d, swizzle %d (supported %d)\n", p.name, i, custom0, custom_max,
                   swizzle0, swizzle_ok);
            for (int c = 0; c <= custom_max && c < 64; c++)
                for (int sw = 0; sw <= (swizzle_ok ? 1 : 0); sw++) {
                    if (c == custom0 && sw == swizzle0) continue;
                    cublasLtMatmulAlgo_t cand = res[i].algo;
                    uint32_t cc = c, ss = sw;
                    cublasLtMatmulAlgoConfigSetAttribute(&cand, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &cc, sizeof cc);
                    cublasLtMatmulAlgoConfigSetAttribute(&cand, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &ss, sizeof ss);
                    char label[32];
                    snprintf(label, sizeof label, "v%d.c%ds%d.", i, c, sw);
                    tried += try_variant(cand, label, 0);
                }
        }
        printf("%-15s variants: %d ran\n", p.name, tried);
        /* other GEMMs' kernels (another algorithm id: another kernel family, e.g. the one that
         * yields for dh), with each tile that family supports: "t" lines, "t<GEMM>.<its candidate>." */
        std::vector<int> own_ids;
        for (int i = 0; i < found; i++) {
            int aid = 0;
            size_t got;
            cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_ID, &aid, sizeof aid, &got);
            own_ids.push_back(aid);
        }
        int transplanted = 0;
        for (int other = 0; other < 6; other++) {
            if (other == id) continue;
            for (size_t q = 0; q < heur[other].size(); q++) {
                const cublasLtMatmulAlgo_t &from = heur[other][q].algo;
                int aid = 0;
                size_t got, nbytes = 0;
                cublasLtMatmulAlgoConfigGetAttribute(&from, CUBLASLT_ALGO_CONFIG_ID, &aid, sizeof aid, &got);
                if (heur[other][q].state != CUBLAS_STATUS_SUCCESS ||
                    std::find(own_ids.begin(), own_ids.end(), aid) != own_ids.end()) continue;
                cublasLtMatmulAlgoCapGetAttribute(&from, CUBLASLT_ALGO_CAP_TILE_IDS, nullptr, 0, &nbytes);
                std::vector<uint32_t> tiles(nbytes / 4 + 1, 0);
                uint32_t own_tile = 0;
                cublasLtMatmulAlgoConfigGetAttribute(&from, CUBLASLT_ALGO_CONFIG_TILE_ID, &own_tile, sizeof own_tile, &got);
                tiles[0] = own_tile;
                if (nbytes) cublasLtMatmulAlgoCapGetAttribute(&from, CUBLASLT_ALGO_CAP_TILE_IDS, tiles.data() + 1, nbytes, &nbytes);
                for (uint32_t t : tiles) {
                    cublasLtMatmulAlgo_t cand = from;
                    cublasLtMatmulAlgoConfigSetAttribute(&cand, CUBLASLT_ALGO_CONFIG_TILE_ID, &t, sizeof t);
                    char label[32];
                    snprintf(label, sizeof label, "t%d.%zu.", other, q);
                    transplanted += try_variant(cand, label, (int)t);
                }
            }
        }
        printf("%-15s other GEMMs' kernel families: %d ran\n", p.name, transplanted);
    }
    return 0;
}
