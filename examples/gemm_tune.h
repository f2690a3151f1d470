/* gemm_tune.h — the cuBLASLt GEMMs of examples/mlp_gpu.cu (six, eight with --send-parts): their plans, the tuning that picks
 * each one's kernel, and the picks file that lets runs share those picks. Part of mlp_gpu.cu,
 * split out to keep the training example readable: it is included there after what it uses: the
 * bf16 type, the CK / CKLT macros, init_kernel, grid_for and median.
 *
 * Row-major [rows, cols] is column-major [cols, rows], so with T tokens, hidden H and F = 4H:
 *   forward   g  = gelu(x W1^T), h kept   D[F,T] = op_T(W1 as [H,F]) · x[H,T]      GELU_AUX
 *             y  = x + g W2^T            D[H,T] = op_T(W2 as [F,H]) · g[F,T] + x   beta 1
 *   backward  dW2 += dy^T g              D[F,H] = g[F,T] · op_T(dy[H,T])          fp32, beta 0/1
 *             dh = (dy W2) * gelu'(h)    D[F,T] = W2 as [F,H] · dy[H,T]           DGELU
 *             dW1 += dh^T x              D[H,F] = x[H,T] · op_T(dh[F,T])          fp32, beta 0/1
 *             dx = dy + dh W1            D[H,T] = W1 as [H,F] · dh[F,T] + dy      beta 1
 * With --send-parts P > 1, two more: fwd2 and dx on T / P tokens, the last GEMM of a forward or
 * input-gradient whose output is sent, run in P parts so each part can leave once written.
 *
 * Tuning. cuBLASLt's first choice is not always its fastest, so gemms_create times the
 * heuristic's top 8 candidates of each GEMM and keeps the fastest: after 1.5 s of the largest GEMM
 * (candidates timed on a cold GPU at its boost clock would be ranked for a clock the steps never
 * see: a GPU under its power cap slows as it warms), the candidates take turns for 5 rounds and
 * each keeps its median, so that all see the same clock. Near-ties in that isolated timing can
 * still run a few percent apart inside a step, where the kernels run on real data between other
 * GEMMs; tune_in_steps times each kind's candidates there instead, in turn, each call timed with
 * events.
 *
 * The picks file (--gemm-picks FILE) holds the candidate each GEMM was tuned to, so that other
 * runs and ranks run the same kernels: a pipeline's ranks and its single-GPU baseline would
 * otherwise compute at speeds that differ by the tuning's chance. Line 1 names what the picks
 * hold for (the GPU and cuBLASLt's version); then one line per GEMM: "m n k candidate name". It
 * is written aside and then linked, so a reader sees a whole file or none, and of several runs
 * that tuned at once the first to write it wins: the others take its picks. */
#include <cublasLt.h>
#include <errno.h>
#include <unistd.h>
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

enum { G_FWD1, G_FWD2, G_DW2, G_DH, G_DW1, G_DX, G_FWD2_PART, G_DX_PART, G_COUNT };
static const char *const gemm_names[G_COUNT] = { "fwd1 gelu_aux", "fwd2 +residual", "dW2", "dh dgelu", "dW1",
                                                 "dx +residual", "fwd2 part", "dx part" };

struct Gemm {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo;
    bool aux = false;
    double flops = 0;
    int m = 0, n = 0, k = 0;
};

struct Gemms {
    int kinds = G_FWD2_PART;        /* the kinds planned: the part kinds too with --send-parts > 1 */
    cublasLtHandle_t lt = nullptr;
    void *workspace = nullptr;
    size_t workspace_bytes = 64u << 20;
    Gemm g[G_COUNT];
    /* The candidates each GEMM kind was timed on (the heuristic's index of each, what the picks
     * file holds) and the index in use. While `rotating` (tune_in_steps), each call of a kind
     * takes its next candidate in turn, timed with an event before and after it (ev_id = kind *
     * 16 + position in cand; ev_used = 0 at each step's start). */
    std::vector<cublasLtMatmulAlgo_t> cand[G_COUNT];
    std::vector<int> cand_index[G_COUNT];
    int picks[G_COUNT] = { 0 };
    bool picked_from_file = false, rotating = false;
    std::vector<cudaEvent_t> ev;
    std::vector<int> ev_id;
    size_t ev_used = 0;
    unsigned rot_next[G_COUNT] = { 0 };
    std::vector<int> rot_order[G_COUNT];   /* each round of a kind's candidates in a fresh random order */
    uint64_t rot_seed = 1;
    const char *picks_pending = nullptr;   /* picks file to write once tune_in_steps chose */
    std::string picks_header;
};

static void gemm_plan(Gemm &g, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, int lda, int ldb,
                      int ldc, cudaDataType_t ctype, cublasLtEpilogue_t epi)
{
    CKLT(cublasLtMatmulDescCreate(&g.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CKLT(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CKLT(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    CKLT(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (epi == CUBLASLT_EPILOGUE_GELU_AUX || epi == CUBLASLT_EPILOGUE_DGELU) {
        int64_t ld = m;
        cudaDataType_t at = CUDA_R_16BF;
        g.aux = true;
        CKLT(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
        CKLT(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &at, sizeof at));
    }
    CKLT(cublasLtMatrixLayoutCreate(&g.a, CUDA_R_16BF, ta == CUBLAS_OP_N ? m : k, ta == CUBLAS_OP_N ? k : m, lda));
    CKLT(cublasLtMatrixLayoutCreate(&g.b, CUDA_R_16BF, tb == CUBLAS_OP_N ? k : n, tb == CUBLAS_OP_N ? n : k, ldb));
    CKLT(cublasLtMatrixLayoutCreate(&g.c, ctype, m, n, ldc));
    g.flops = 2.0 * m * n * k;
    g.m = m; g.n = n; g.k = k;
}

static cublasStatus_t gemm_try(Gemms &G, int id, const void *A, const void *B, const void *C, void *D, float beta,
                               void *aux, cudaStream_t s)
{
    Gemm &g = G.g[id];
    float alpha = 1.0f;
    if (g.aux) {
        cublasStatus_t st = cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux);
        if (st != CUBLAS_STATUS_SUCCESS) return st;
    }
    return cublasLtMatmul(G.lt, g.desc, &alpha, A, g.a, B, g.b, &beta, C, g.c, D, g.c, &g.algo, G.workspace,
                          G.workspace_bytes, s);
}

/* While rotating: the candidate this call of kind id takes, every candidate once per round, each
 * round in a new order, so that a candidate's neighbours (the other kinds' calls beside it)
 * change from round to round. */
static int gemm_rotate(Gemms &G, int id)
{
    std::vector<int> &order = G.rot_order[id];
    const unsigned n = (unsigned)G.cand[id].size(), at = G.rot_next[id]++ % n;
    if (at == 0 || order.size() != n) {
        order.resize(n);
        for (unsigned i = 0; i < n; i++) order[i] = (int)i;
        for (unsigned i = n - 1; i > 0; i--) {   /* Fisher-Yates on splitmix64 */
            uint64_t z = (G.rot_seed += 0x9E3779B97F4A7C15ull);
            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull; z = (z ^ (z >> 27)) * 0x94D049BB133111EBull; z ^= z >> 31;
            std::swap(order[i], order[z % (i + 1)]);
        }
    }
    return order[at];
}

static void gemm_run(Gemms &G, int id, const void *A, const void *B, const void *C, void *D, float beta, void *aux,
                     cudaStream_t s)
{
    const bool rotate = G.rotating && !G.cand[id].empty();
    if (rotate) {
        const int c = gemm_rotate(G, id);
        G.g[id].algo = G.cand[id][c];
        if (G.ev_used + 2 > G.ev.size()) {
            size_t n = G.ev.size();
            G.ev.resize(n ? 2 * n : 1024);
            G.ev_id.resize(G.ev.size() / 2);
            for (size_t i = n; i < G.ev.size(); i++) CK(cudaEventCreate(&G.ev[i]));
        }
        G.ev_id[G.ev_used / 2] = id * 16 + c;
        CK(cudaEventRecord(G.ev[G.ev_used], s));
    }
    CKLT(gemm_try(G, id, A, B, C, D, beta, aux, s));
    if (rotate) {
        CK(cudaEventRecord(G.ev[G.ev_used + 1], s));
        G.ev_used += 2;
    }
}

/* --- the picks file ----------------------------------------------------------------------------- */

static std::string picks_header(void)
{
    cudaDeviceProp prop;
    int dev = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaGetDeviceProperties(&prop, dev));
    return std::string("# mlp_gpu GEMM picks: ") + prop.name + ", cuBLASLt " + std::to_string(cublasLtGetVersion());
}

/* One line of a picks file: "m n k candidate name", each number a decimal in [0, 2^31), the name
 * one of gemm_names, blanks around it ignored. Returns the GEMM kind, or -1 if it does not parse. */
static int picks_parse_line(const char *line, long v[4])
{
    const char *p = line;
    for (int i = 0; i < 4; i++) {
        char *end;
        while (*p == ' ' || *p == '\t') p++;
        if (*p < '0' || *p > '9') return -1;   /* no sign, no blank value */
        errno = 0;
        v[i] = strtol(p, &end, 10);
        if (errno || v[i] > 0x7fffffffL || (*end != ' ' && *end != '\t')) return -1;
        p = end;
    }
    while (*p == ' ' || *p == '\t') p++;
    size_t len = strcspn(p, "\r\n");
    while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t')) len--;
    for (int id = 0; id < G_COUNT; id++)
        if (strlen(gemm_names[id]) == len && !strncmp(p, gemm_names[id], len)) return id;
    return -1;
}

/* Reads FILE into picks[G_COUNT]. Returns false if there is no file; exits with the reason if it
 * cannot be read, is for another GPU or library, or a line does not parse. */
static bool picks_read(const char *path, const std::string &header, const Gemms &G, int picks[G_COUNT])
{
    FILE *f = fopen(path, "r");
    if (!f && errno == ENOENT) return false;
    if (!f) { fprintf(stderr, "mlp_gpu: --gemm-picks=%s: %s\n", path, strerror(errno)); exit(2); }
    char line[512];
    std::string first = fgets(line, sizeof line, f) ? std::string(line) : std::string();
    if (ferror(f)) { fprintf(stderr, "mlp_gpu: --gemm-picks=%s: %s\n", path, strerror(errno)); exit(2); }
    while (!first.empty() && (first.back() == '\n' || first.back() == '\r')) first.pop_back();
    if (first != header) {
        fprintf(stderr, "mlp_gpu: --gemm-picks=%s: holds \"%s\", but this run needs \"%s\" (delete the file to tune "
                "again)\n", path, first.c_str(), header.c_str());
        exit(2);
    }
    for (int id = 0; id < G_COUNT; id++) picks[id] = -1;   /* lines of kinds not planned here are read, not used */
    for (int no = 2; fgets(line, sizeof line, f); no++) {
        if (line[strspn(line, " \t\r\n")] == '\0') continue;   /* blank lines */
        long v[4];
        const int id = picks_parse_line(line, v);
        if (id < 0) {
            fprintf(stderr, "mlp_gpu: --gemm-picks=%s line %d: expected \"m n k candidate name\" (numbers from 0 to "
                    "2147483647, then a GEMM's name as mlp_gpu writes it: fwd1 gelu_aux, fwd2 +residual, dW2, dh dgelu, "
                    "dW1, dx +residual, fwd2 part, dx part)\n", path, no);
            exit(2);
        }
        if (id < G.kinds && (v[0] != G.g[id].m || v[1] != G.g[id].n || v[2] != G.g[id].k)) {
            fprintf(stderr, "mlp_gpu: --gemm-picks=%s line %d: GEMM '%s' is %ld x %ld x %ld there and %d x %d x %d in "
                    "this run (its --hidden, --tokens and --send-parts must match)\n", path, no, gemm_names[id], v[0], v[1], v[2],
                    G.g[id].m, G.g[id].n, G.g[id].k);
            exit(2);
        }
        if (picks[id] >= 0) {
            fprintf(stderr, "mlp_gpu: --gemm-picks=%s line %d: a second line for GEMM '%s'\n", path, no, gemm_names[id]);
            exit(2);
        }
        picks[id] = (int)v[3];
    }
    if (ferror(f)) { fprintf(stderr, "mlp_gpu: --gemm-picks=%s: %s\n", path, strerror(errno)); exit(2); }
    fclose(f);
    for (int id = 0; id < G.kinds; id++)
        if (picks[id] < 0) {
            fprintf(stderr, "mlp_gpu: --gemm-picks=%s: no line for GEMM '%s' (written by a run with other flags: "
                    "delete the file to tune again)\n", path, gemm_names[id]);
            exit(2);
        }
    return true;
}

/* Another process (or rank thread) wrote FILE while this one tuned: run its picks, so that every
 * run given the file runs the same kernels. Each pick must be among this run's timed candidates. */
static void picks_adopt(const char *path, const std::string &header, Gemms &G)
{
    int picks[G_COUNT];
    if (!picks_read(path, header, G, picks)) {
        fprintf(stderr, "mlp_gpu: --gemm-picks=%s: vanished while this run tuned\n", path);
        exit(2);
    }
    for (int id = 0; id < G.kinds; id++) {
        size_t c = 0;
        while (c < G.cand_index[id].size() && G.cand_index[id][c] != picks[id]) c++;
        if (c == G.cand_index[id].size()) {
            fprintf(stderr, "mlp_gpu: --gemm-picks=%s: written by another run while this one tuned, and its GEMM '%s' "
                    "candidate %d did not run here (delete the file to tune again)\n", path, gemm_names[id], picks[id]);
            exit(2);
        }
        G.g[id].algo = G.cand[id][c];
        G.picks[id] = picks[id];
    }
    G.picked_from_file = true;
    printf("GEMM picks: %s was written by another run while this one tuned; running its picks\n", path);
    fflush(stdout);
}

/* Writes the picks to FILE unless another process got there first (written aside, then linked);
 * then this run takes the file's picks instead (picks_adopt) and the return is true: its kernels
 * changed. */
static bool picks_write(const char *path, const std::string &header, Gemms &G, const int picks[G_COUNT])
{
    std::string tmp = std::string(path) + ".tmp." + std::to_string((long)getpid()) + "." +
                      std::to_string((unsigned long long)(uintptr_t)&G);   /* --threads: one per rank */
    FILE *f = fopen(tmp.c_str(), "w");
    if (!f) { fprintf(stderr, "mlp_gpu: --gemm-picks=%s: %s\n", tmp.c_str(), strerror(errno)); exit(2); }
    fprintf(f, "%s\n", header.c_str());
    for (int id = 0; id < G.kinds; id++)
        fprintf(f, "%d %d %d %d %s\n", G.g[id].m, G.g[id].n, G.g[id].k, picks[id], gemm_names[id]);
    bool ok = fclose(f) == 0, lost = false;
    if (ok && link(tmp.c_str(), path) != 0) { if (errno == EEXIST) lost = true; else ok = false; }
    if (!ok) { fprintf(stderr, "mlp_gpu: --gemm-picks=%s: %s\n", path, strerror(errno)); unlink(tmp.c_str()); exit(2); }
    unlink(tmp.c_str());
    if (lost) picks_adopt(path, header, G);
    return lost;
}

/* --- tuning --------------------------------------------------------------------------------------- */

/* Real-size operands for timing candidates: every operand of every GEMM fits in these. */
struct TuneBuffers {
    bf16 *A = nullptr, *B = nullptr, *C = nullptr, *aux = nullptr;
    float *C32 = nullptr;
};

/* Runs kind id once on the tuning buffers: its output fp32 for the weight gradients. */
static cublasStatus_t gemm_try_tuning(Gemms &G, int id, const TuneBuffers &b, cudaStream_t s)
{
    const bool f32 = id == G_DW1 || id == G_DW2;
    const float beta = (id == G_FWD2 || id == G_DX || id == G_FWD2_PART || id == G_DX_PART || f32) ? 1.0f : 0.0f;
    void *cd = f32 ? (void *)b.C32 : (void *)b.C;
    return gemm_try(G, id, b.A, b.B, cd, cd, beta, b.aux, s);
}

/* The candidates of kind id, each timed on 3 calls per round for 5 rounds, taking turns; the
 * fastest median wins. Fills G.cand / cand_index with every candidate that ran. Returns the
 * winner's index in res[] and its time for 3 calls (ms). */
static int gemm_pick(Gemms &G, int id, const cublasLtMatmulHeuristicResult_t *res, int found, const TuneBuffers &b,
                     cudaStream_t s, cudaEvent_t e0, cudaEvent_t e1, float *best_ms)
{
    Gemm &g = G.g[id];
    const int rounds = 5;
    std::vector<float> runs((size_t)found * rounds, -1.0f);
    auto time3 = [&](void) -> float {   /* one call, then ms for three; < 0 if refused */
        if (gemm_try_tuning(G, id, b, s) != CUBLAS_STATUS_SUCCESS) return -1;
        bool ok = true;
        float ms = 0;
        CK(cudaEventRecord(e0, s));
        for (int r = 0; r < 3 && ok; r++) ok = gemm_try_tuning(G, id, b, s) == CUBLAS_STATUS_SUCCESS;
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&ms, e0, e1));
        return ok ? ms : -1;
    };
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < found; i++) {
            if (res[i].state != CUBLAS_STATUS_SUCCESS || (r > 0 && runs[(size_t)i * rounds] < 0)) continue;
            g.algo = res[i].algo;
            runs[(size_t)i * rounds + r] = time3();
        }
    int best = 0;
    *best_ms = 1e30f;
    for (int i = 0; i < found; i++) {
        float *x = &runs[(size_t)i * rounds];
        if (x[0] < 0) continue;
        std::sort(x, x + rounds);
        if (x[0] < 0) continue;
        G.cand[id].push_back(res[i].algo);
        G.cand_index[id].push_back(i);
        if (x[rounds / 2] < *best_ms) { *best_ms = x[rounds / 2]; best = i; }
    }
    return best;
}

/* Plans the six GEMMs (eight with parts > 1: --send-parts) and picks each one's kernel: from the picks file when it exists, else
 * tuned (with tune; without, the heuristic's first), and the file written unless defer_picks
 * (tune_in_steps writes it then). Every chosen kernel runs once here: CUDA loads modules lazily,
 * and a first load in the middle of a step would happen while NCCL kernels may wait on a peer. */
static void gemms_create(Gemms &G, int H, int T, int parts, int tune, cudaStream_t s, int verbose,
                         const char *picks_path = nullptr, bool defer_picks = false)
{
    const int F = 4 * H;
    CKLT(cublasLtCreate(&G.lt));
    CK(cudaMalloc(&G.workspace, G.workspace_bytes));
    const cublasOperation_t N = CUBLAS_OP_N, Tr = CUBLAS_OP_T;
    gemm_plan(G.g[G_FWD1], Tr, N, F, T, H, H, H, F, CUDA_R_16BF, CUBLASLT_EPILOGUE_GELU_AUX);
    gemm_plan(G.g[G_FWD2], Tr, N, H, T, F, F, F, H, CUDA_R_16BF, CUBLASLT_EPILOGUE_DEFAULT);
    gemm_plan(G.g[G_DW2], N, Tr, F, H, T, F, H, F, CUDA_R_32F, CUBLASLT_EPILOGUE_DEFAULT);
    gemm_plan(G.g[G_DH], N, N, F, T, H, F, H, F, CUDA_R_16BF, CUBLASLT_EPILOGUE_DGELU);
    gemm_plan(G.g[G_DW1], N, Tr, H, F, T, H, F, H, CUDA_R_32F, CUBLASLT_EPILOGUE_DEFAULT);
    gemm_plan(G.g[G_DX], N, N, H, T, F, H, F, H, CUDA_R_16BF, CUBLASLT_EPILOGUE_DEFAULT);
    G.kinds = parts > 1 ? G_COUNT : G_FWD2_PART;
    if (parts > 1) {
        gemm_plan(G.g[G_FWD2_PART], Tr, N, H, T / parts, F, F, F, H, CUDA_R_16BF, CUBLASLT_EPILOGUE_DEFAULT);
        gemm_plan(G.g[G_DX_PART], N, N, H, T / parts, F, H, F, H, CUDA_R_16BF, CUBLASLT_EPILOGUE_DEFAULT);
    }

    size_t big = (size_t)F * std::max(T, H);
    TuneBuffers b;
    CK(cudaMalloc(&b.A, big * 2)); CK(cudaMalloc(&b.B, big * 2)); CK(cudaMalloc(&b.C, big * 2));
    CK(cudaMalloc(&b.aux, big * 2)); CK(cudaMalloc(&b.C32, (size_t)F * H * 4));
    init_kernel<<<grid_for(big), 256, 0, s>>>(b.A, big, 1, 0.02f);
    init_kernel<<<grid_for(big), 256, 0, s>>>(b.B, big, 2, 0.02f);
    init_kernel<<<grid_for(big), 256, 0, s>>>(b.C, big, 3, 0.02f);
    init_kernel<<<grid_for(big), 256, 0, s>>>(b.aux, big, 4, 1.0f);
    CK(cudaMemsetAsync(b.C32, 0, (size_t)F * H * 4, s));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    cublasLtMatmulPreference_t pref;
    CKLT(cublasLtMatmulPreferenceCreate(&pref));
    CKLT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &G.workspace_bytes,
                                              sizeof G.workspace_bytes));
    int picks[G_COUNT];
    const std::string header = picks_path ? picks_header() : std::string();
    const bool picked = picks_path && picks_read(picks_path, header, G, picks);
    if (tune && !picked) {   /* 1.5 s of the largest GEMM: the clock the steps run at */
        cublasLtMatmulHeuristicResult_t first;
        int found = 0;
        Gemm &g = G.g[G_FWD2];
        CKLT(cublasLtMatmulAlgoGetHeuristic(G.lt, g.desc, g.a, g.b, g.c, g.c, pref, 1, &first, &found));
        if (found == 1) {
            float total = 0, ms = 0;
            g.algo = first.algo;
            while (total < 1500.0f) {
                CK(cudaEventRecord(e0, s));
                for (int r = 0; r < 50; r++) CKLT(gemm_try_tuning(G, G_FWD2, b, s));
                CK(cudaEventRecord(e1, s));
                CK(cudaEventSynchronize(e1));
                CK(cudaEventElapsedTime(&ms, e0, e1));
                total += ms;
            }
        }
    }
    for (int id = 0; id < G.kinds; id++) {
        Gemm &g = G.g[id];
        cublasLtMatmulHeuristicResult_t res[8];
        int found = 0, best = 0;
        float best_ms = 0;
        CKLT(cublasLtMatmulAlgoGetHeuristic(G.lt, g.desc, g.a, g.b, g.c, g.c, pref, tune ? 8 : 1, res, &found));
        if (found < 1) { fprintf(stderr, "mlp_gpu: cuBLASLt has no algorithm for GEMM %s\n", gemm_names[id]); exit(1); }
        if (picked) {   /* what the file says, after checking the heuristic still offers it */
            best = picks[id];
            if (best >= found || res[best].state != CUBLAS_STATUS_SUCCESS) {
                fprintf(stderr, "mlp_gpu: --gemm-picks=%s: GEMM '%s' candidate %d: cuBLASLt offers %d here (delete the "
                        "file to tune again)\n", picks_path, gemm_names[id], best, found);
                exit(2);
            }
            if (verbose) printf("  gemm %-15s %5d x %5d x %5d  (candidate %d of %d, from %s)\n", gemm_names[id], g.m, g.n,
                                g.k, best, found, picks_path);
        } else if (tune) {
            best = gemm_pick(G, id, res, found, b, s, e0, e1, &best_ms);
            if (verbose)
                printf("  gemm %-15s %5d x %5d x %5d  %7.3f ms  %6.1f TFLOP/s  (candidate %d of %d)\n", gemm_names[id],
                       g.m, g.n, g.k, best_ms / 3, g.flops / (best_ms / 3 * 1e-3) / 1e12, best, found);
        }
        g.algo = res[best].algo;
        picks[id] = G.picks[id] = best;
        CKLT(gemm_try_tuning(G, id, b, s));   /* loaded now, not mid-step */
    }
    G.picked_from_file = picked;
    G.picks_header = header;
    if (picks_path && !picked) {
        if (defer_picks) G.picks_pending = picks_path;
        else if (picks_write(picks_path, header, G, picks))
            for (int id = 0; id < G.kinds; id++) CKLT(gemm_try_tuning(G, id, b, s));   /* the adopted kernels, loaded now */
    }
    CKLT(cublasLtMatmulPreferenceDestroy(pref));
    CK(cudaEventDestroy(e0)); CK(cudaEventDestroy(e1));
    CK(cudaStreamSynchronize(s));
    CK(cudaFree(b.A)); CK(cudaFree(b.B)); CK(cudaFree(b.C)); CK(cudaFree(b.aux)); CK(cudaFree(b.C32));
}

static void gemms_free(Gemms &G)
{
    for (int id = 0; id < G_COUNT; id++) {
        Gemm &g = G.g[id];
        if (g.desc) cublasLtMatmulDescDestroy(g.desc);
        if (g.a) cublasLtMatrixLayoutDestroy(g.a);
        if (g.b) cublasLtMatrixLayoutDestroy(g.b);
        if (g.c) cublasLtMatrixLayoutDestroy(g.c);
    }
    for (cudaEvent_t e : G.ev) cudaEventDestroy(e);
    G.ev.clear();
    if (G.workspace) cudaFree(G.workspace);
    if (G.lt) cublasLtDestroy(G.lt);
}

/* --tune-in-step N: N steps (after one warm-up step) of `step`, the whole model's, in which each
 * kind's calls take its candidates in turn, each call timed with events; each kind keeps the
 * candidate of the lowest median, and the picks file (if given and not read) is written with
 * those. */
static void tune_in_steps(Gemms &G, const std::function<void(void)> &step, cudaStream_t s, int steps, bool print)
{
    std::vector<float> t[G_COUNT][16];
    G.rotating = true;
    for (int i = 0; i < steps + 1; i++) {
        G.ev_used = 0;
        step();
        CK(cudaStreamSynchronize(s));
        if (i == 0) continue;
        for (size_t e = 0; e + 1 < G.ev_used; e += 2) {
            float ms = 0;
            CK(cudaEventElapsedTime(&ms, G.ev[e], G.ev[e + 1]));
            t[G.ev_id[e / 2] / 16][G.ev_id[e / 2] % 16].push_back(ms);
        }
    }
    G.rotating = false;
    G.ev_used = 0;
    std::string line = "in-step tuning (" + std::to_string(steps) + " steps), median ms per call:";
    for (int id = 0; id < G.kinds; id++) {
        int best = -1;
        float best_ms = 0;
        char part[64];
        line += std::string(" ") + gemm_names[id] + ":";
        for (size_t c = 0; c < G.cand[id].size(); c++) {
            if (t[id][c].empty()) continue;
            const float ms = (float)median(std::vector<double>(t[id][c].begin(), t[id][c].end()));
            snprintf(part, sizeof part, " %d %.3f%s", G.cand_index[id][c], ms, G.cand_index[id][c] == G.picks[id] ? "*" : "");
            line += part;
            if (best < 0 || ms < best_ms) { best = (int)c; best_ms = ms; }
        }
        if (best >= 0) { G.g[id].algo = G.cand[id][best]; G.picks[id] = G.cand_index[id][best]; }
        if (best < 0) line += " not run in these steps, the isolated pick";
        snprintf(part, sizeof part, " -> %d;", G.picks[id]);
        line += part;
    }
    if (print) { printf("%s\n  (* the isolated tuning's pick)\n", line.c_str()); fflush(stdout); }
    if (G.picks_pending) picks_write(G.picks_pending, G.picks_header, G, G.picks);
    G.picks_pending = nullptr;
}
