/* tests/gpu/host_gpt_gpu.cu — examples/gpt_gpu.cu's host-side logic, on the host alone: no GPU is
 * touched, so `make test` runs it wherever nvcc is (CI too). Built in fp32 (-DGPT_GPU_FP32).
 *
 *   spans      every microbatch view (cp 1, 2 and 4; query blocks of 1, 3, 4 and 1024 rows) is
 *              cut into attention spans that hold each local row exactly once, each row's
 *              causal limit inside its span's keys, the keys tight (the span's last query is its
 *              last key), the probability blocks back to back and 8-aligned, and per sequence
 *              exactly one span that holds all its keys, first (cp 1: its key gradients
 *              overwrite, the others add); the cp ranks' rows partition the microbatch.
 *   gemms      cuBLASLt replaced by a naive column-major GEMM over host memory (the same
 *              descriptors, layouts, transposes, batch counts and strides the model sets), the
 *              model's own GEMM calls: the three products of a linear layer against their
 *              row-major formulas, and attention's scores, values and gradients, with the
 *              kernels' masked softmax done on the host, against gpt_model.h's attention and its
 *              backward on the same packed bins: whole (cp 1) and as the two cp ranks' shares
 *              (their key and value gradients summed, as the cp all-reduce does), with query
 *              blocks of 1024, 3 and 1 rows. The key and value gradients of cp 1 start from
 *              garbage, so a span that should overwrite but adds fails.
 *   layout     a microbatch's buffers lie 256-aligned, in order, each as large as it must be.
 * Ends with "N passed, N failed". */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdarg.h>
#include <stdint.h>
#include <vector>

/* --- cuBLASLt on the host: D = alpha op(A) op(B) + beta C, column-major, batched --------------- */

struct MockDesc { int ta = 0, tb = 0; };
struct MockLayout { cudaDataType_t type; uint64_t rows, cols; int64_t ld; int batch = 1; int64_t stride = 0; };
static long long g_gemms, g_bad_shapes;

static cublasStatus_t mock_desc_create(cublasLtMatmulDesc_t *d, cublasComputeType_t, cudaDataType_t)
{
    *d = (cublasLtMatmulDesc_t) new MockDesc();
    return CUBLAS_STATUS_SUCCESS;
}
static cublasStatus_t mock_desc_set(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *buf, size_t)
{
    MockDesc *m = (MockDesc *)d;
    if (a == CUBLASLT_MATMUL_DESC_TRANSA) m->ta = *(const cublasOperation_t *)buf == CUBLAS_OP_T;
    if (a == CUBLASLT_MATMUL_DESC_TRANSB) m->tb = *(const cublasOperation_t *)buf == CUBLAS_OP_T;
    return CUBLAS_STATUS_SUCCESS;
}
static cublasStatus_t mock_layout_create(cublasLtMatrixLayout_t *l, cudaDataType t, uint64_t r, uint64_t c, int64_t ld)
{
    MockLayout *m = new MockLayout();
    m->type = t; m->rows = r; m->cols = c; m->ld = ld;
    g_bad_shapes += ld < (int64_t)r;   /* cuBLASLt's rule: the leading dimension holds a column */
    *l = (cublasLtMatrixLayout_t)m;
    return CUBLAS_STATUS_SUCCESS;
}
static cublasStatus_t mock_layout_set(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a, const void *buf, size_t)
{
    MockLayout *m = (MockLayout *)l;
    if (a == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT) m->batch = *(const int32_t *)buf;
    if (a == CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET) m->stride = *(const int64_t *)buf;
    return CUBLAS_STATUS_SUCCESS;
}
static cublasStatus_t mock_pref_create(cublasLtMatmulPreference_t *p) { *p = (cublasLtMatmulPreference_t)1; return CUBLAS_STATUS_SUCCESS; }
static cublasStatus_t mock_pref_set(cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t, const void *, size_t)
{
    return CUBLAS_STATUS_SUCCESS;
}
static cublasStatus_t mock_pref_destroy(cublasLtMatmulPreference_t) { return CUBLAS_STATUS_SUCCESS; }
static cublasStatus_t mock_heuristic(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                     cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatmulPreference_t, int,
                                     cublasLtMatmulHeuristicResult_t *, int *found)
{
    *found = 1;
    return CUBLAS_STATUS_SUCCESS;
}
static cublasStatus_t mock_matmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc, const void *alpha, const void *A,
                                  cublasLtMatrixLayout_t ad, const void *B, cublasLtMatrixLayout_t bd, const void *beta,
                                  const void *C, cublasLtMatrixLayout_t cd, void *D, cublasLtMatrixLayout_t dd,
                                  const cublasLtMatmulAlgo_t *, void *, size_t, cudaStream_t)
{
    const MockDesc *m = (const MockDesc *)desc;
    const MockLayout *la = (const MockLayout *)ad, *lb = (const MockLayout *)bd, *ld = (const MockLayout *)dd;
    const float al = *(const float *)alpha, be = *(const float *)beta;
    const uint64_t M = ld->rows, N = ld->cols, K = m->ta ? la->rows : la->cols;
    if ((m->ta ? la->cols : la->rows) != M || (m->tb ? lb->rows : lb->cols) != N || (m->tb ? lb->cols : lb->rows) != K ||
        la->batch != ld->batch || lb->batch != ld->batch || cd != dd) {
        g_bad_shapes++;
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    g_gemms++;
    const float *a = (const float *)A, *b = (const float *)B, *c = (const float *)C;
    float *d = (float *)D;
    std::vector<float> out(M * N);
    for (int bt = 0; bt < ld->batch; bt++) {
        for (uint64_t i = 0; i < M; i++)
            for (uint64_t j = 0; j < N; j++) {
                double s = 0;
                for (uint64_t k = 0; k < K; k++)
                    s += (double)(m->ta ? a[bt * la->stride + k + i * la->ld] : a[bt * la->stride + i + k * la->ld]) *
                         (m->tb ? b[bt * lb->stride + j + k * lb->ld] : b[bt * lb->stride + k + j * lb->ld]);
                out[i + j * M] = (float)(al * s + (be != 0 ? be * c[bt * ld->stride + i + j * ld->ld] : 0.0));
            }
        for (uint64_t i = 0; i < M; i++)
            for (uint64_t j = 0; j < N; j++) d[bt * ld->stride + i + j * ld->ld] = out[i + j * M];
    }
    return CUBLAS_STATUS_SUCCESS;
}
#define cublasLtMatmulDescCreate mock_desc_create
#define cublasLtMatmulDescSetAttribute mock_desc_set
#define cublasLtMatrixLayoutCreate mock_layout_create
#define cublasLtMatrixLayoutSetAttribute mock_layout_set
#define cublasLtMatmulPreferenceCreate mock_pref_create
#define cublasLtMatmulPreferenceSetAttribute mock_pref_set
#define cublasLtMatmulPreferenceDestroy mock_pref_destroy
#define cublasLtMatmulAlgoGetHeuristic mock_heuristic
#define cublasLtMatmul mock_matmul
#define main gpt_gpu_main
#include "../../examples/gpt_gpu.cu"
#undef main

static int passed, failed;

static void check(int ok, const char *fmt, ...)
{
    if (ok) { passed++; return; }
    failed++;
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

static uint64_t g_rng = 7;
static float rnd(void) { return (float)((gpt_mix(&g_rng) >> 40) / 8388608.0 - 1.0); }

static double max_rel(const float *a, const float *b, size_t n)
{
    double num = 0, den = 1e-30;
    for (size_t i = 0; i < n; i++) {
        if (!(fabs((double)a[i] - b[i]) <= num)) num = fabs((double)a[i] - b[i]);   /* NaN counts */
        den = fmax(den, fabs((double)b[i]));
    }
    return num / den;
}

/* A job of the given sizes (job_setup: the data, packed, and the layer split). */
static void small_job(Job &J, int cp, int pp, int block)
{
    options *o = &J.o;
    memset(o, 0, sizeof *o);
    o->schedule = (char *)"1f1b"; o->dp = 1; o->cp = cp; o->pp = pp; o->layers = 2; o->width = 16; o->heads = 2;
    o->vocab = 32; o->experts = 4; o->topk = 2; o->steps = 2; o->seqs = 12; o->min_len = 1; o->max_len = 24;
    o->capacity = 32; o->attn_block = block; o->lr = 0.01; o->clip = 1; o->seed = 5; o->timeout = 10;
    if (job_setup(J)) { printf("job_setup failed\n"); exit(1); }
}

/* --- spans -------------------------------------------------------------------------------------- */

static void check_spans(const step_data &d, int bin, int cp, int r, int NH, int block)
{
    MbHost h;
    pp_error e;
    memset(h.map, 0, sizeof h.map);
    check(mb_host_build(h, d, bin, cp, r, NH, block, &e) == PP_OK, "mb_host_build: %s", e.message);
    std::vector<int> seen(h.T, 0), overwrites(h.nseq, 0), first_of(h.nseq, -1);
    int64_t P = 0;
    int blocks_ok = 1, rows_ok = 1, keys_ok = 1, overwrite_ok = 1, once = 1;
    for (size_t i = 0; i < h.spans.size(); i++) {
        const Span &sp = h.spans[i];
        int s = 0, maxlim = -1;
        while (h.cu[s + 1] <= h.gidx[sp.q0]) s++;
        blocks_ok &= sp.poff == P && sp.ldp % 8 == 0 && sp.ldp >= sp.lk;
        P += (int64_t)NH * sp.lq * sp.ldp;
        rows_ok &= sp.lq >= 1 && sp.lq <= block && sp.k0 == h.cu[s];
        for (int t = sp.q0; t < sp.q0 + sp.lq; t++) {
            const int lim = h.gidx[t] - sp.k0;
            seen[t]++;
            keys_ok &= h.row_span[t] == (int)i && lim >= 0 && lim < sp.lk && h.gidx[t] < h.cu[s + 1];
            maxlim = std::max(maxlim, lim);
        }
        keys_ok &= maxlim == sp.lk - 1;
        if (first_of[s] < 0) first_of[s] = (int)i;
        overwrites[s] += sp.kv_overwrite;
        if (sp.kv_overwrite) overwrite_ok &= cp == 1 && sp.lk == h.cu[s + 1] - h.cu[s] && first_of[s] == (int)i;
    }
    for (int t = 0; t < h.T; t++) once &= seen[t] == 1;
    for (int x = 0; x < h.nseq; x++) overwrite_ok &= overwrites[x] == (cp == 1);
    check(blocks_ok && P == h.P, "cp %d block %d bin %d: the probability blocks are not back to back, 8-aligned", cp, block, bin);
    check(rows_ok && once, "cp %d block %d bin %d: a span's rows leave its sequence or the block, or a row is not in one span",
          cp, block, bin);
    check(keys_ok, "cp %d block %d bin %d: a row's causal limit is outside its span's keys, or the keys are not tight", cp,
          block, bin);
    check(overwrite_ok, "cp %d block %d bin %d: not exactly one overwriting span per sequence (cp 1), first, with all its "
          "keys", cp, block, bin);
}

static void test_spans(void)
{
    for (int cp : {1, 2, 4})
        for (int block : {1, 3, 4, 1024}) {
            static Job J;
            J = Job();
            small_job(J, cp, 2, block);
            for (const step_data &d : J.steps)
                for (int b = 0; b < d.plan->num_bins; b++) {
                    std::vector<int> owner(d.plan->bin_padded_tokens[b], 0);
                    for (int r = 0; r < cp; r++) {
                        check_spans(d, b, cp, r, 2, block);
                        MbHost h;
                        pp_error e;
                        memset(h.map, 0, sizeof h.map);
                        mb_host_build(h, d, b, cp, r, 2, block, &e);
                        for (int t = 0; t < h.T; t++) owner[h.gidx[t]]++;
                    }
                    check_spans(d, b, 1, 0, 2, block);     /* the whole bin, as the reference sees it */
                    int partition = 1;
                    for (int x : owner) partition &= x == 1;
                    check(partition, "cp %d: the ranks' rows do not partition bin %d", cp, b);
                }
            job_free(J);
        }
}

/* --- GEMMs -------------------------------------------------------------------------------------- */

static void test_linear(GpuModel &M)
{
    const int T = 5, IC = 6, OC = 7;
    std::vector<float> in(T * IC), W(OC * IC), res(T * OC), out(T * OC), ref(T * OC), dout(T * OC), din(T * IC, 9.0f);
    std::vector<float> dW(OC * IC, 0.5f), rdin(T * IC), rdW(OC * IC);
    for (auto *v : {&in, &W, &res, &dout}) for (float &x : *v) x = rnd();
    linear(M.blas, out.data(), in.data(), W.data(), T, IC, OC, res.data());
    for (int t = 0; t < T; t++)
        for (int o = 0; o < OC; o++) {
            double s = res[t * OC + o];
            for (int i = 0; i < IC; i++) s += in[t * IC + i] * W[o * IC + i];
            ref[t * OC + o] = (float)s;
        }
    check(max_rel(out.data(), ref.data(), out.size()) < 1e-6, "linear: out != in W^T + res");
    linear_dx(M.blas, din.data(), dout.data(), W.data(), T, IC, OC);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < IC; i++) {
            double s = 0;
            for (int o = 0; o < OC; o++) s += dout[t * OC + o] * W[o * IC + i];
            rdin[t * IC + i] = (float)s;
        }
    check(max_rel(din.data(), rdin.data(), din.size()) < 1e-6, "linear_dx: din != dout W");
    linear_dx(M.blas, din.data(), dout.data(), W.data(), T, IC, OC, 1.0f);
    for (float &x : rdin) x *= 2;
    check(max_rel(din.data(), rdin.data(), din.size()) < 1e-6, "linear_dx, beta 1: din != din + dout W");
    linear_dw(M.blas, dW.data(), dout.data(), in.data(), T, IC, OC);
    for (int o = 0; o < OC; o++)
        for (int i = 0; i < IC; i++) {
            double s = 0.5;
            for (int t = 0; t < T; t++) s += dout[t * OC + o] * in[t * IC + i];
            rdW[o * IC + i] = (float)s;
        }
    check(max_rel(dW.data(), rdW.data(), dW.size()) < 1e-6, "linear_dw: dW != dW + dout^T in");
}

/* The kernels' masked softmax (attn_softmax_fwd_kernel, _bwd_kernel), row by row on the host. */
static void softmax_rows(const MbHost &h, int NH, float *P, const float *dP, float *dS)
{
    for (int t = 0; t < h.T; t++)
        for (int hh = 0; hh < NH; hh++) {
            const Span &sp = h.spans[h.row_span[t]];
            const int64_t at = sp.poff + ((int64_t)hh * sp.lq + (t - sp.q0)) * sp.ldp;
            const int lim = h.gidx[t] - sp.k0;
            float mx = -INFINITY, sum = 0, dot = 0;
            if (!dP) {
                for (int j = 0; j <= lim; j++) mx = fmaxf(mx, P[at + j]);
                for (int j = 0; j <= lim; j++) sum += expf(P[at + j] - mx);
                for (int j = 0; j < sp.lk; j++) P[at + j] = j <= lim ? expf(P[at + j] - mx) / sum : 0.0f;
            } else {
                for (int j = 0; j <= lim; j++) dot += P[at + j] * dP[at + j];
                for (int j = 0; j < sp.lk; j++) dS[at + j] = j <= lim ? P[at + j] * (dP[at + j] - dot) : 0.0f;
            }
        }
}

/* One bin through gpt_model.h's attention and its backward, and through the model's GEMM helpers
 * as each of the cp ranks holds it (their key and value gradients summed): the same outputs. */
static void test_attention_bin(GpuModel &M, const Job &J, const step_data &d, int bin, int cp, int block)
{
    const gpt_config &c = J.cfg;
    const int C = c.width, NH = c.heads;
    CpuBatch cb;
    cpu_batch(cb, d, bin);
    const int Tk = cb.b.T;
    std::vector<float> qkv((size_t)Tk * 3 * C), ay((size_t)Tk * C), att((size_t)NH * Tk * Tk), kv((size_t)Tk * 2 * C);
    std::vector<float> day((size_t)Tk * C), dqkv((size_t)Tk * 3 * C);
    for (float &x : qkv) x = rnd();
    for (float &x : day) x = rnd();
    gpt_scratch sc;
    gpt_scratch_init(&sc, &c, Tk, Tk);
    gpt_cp none = { 1, NULL, NULL, NULL };
    gpt_attention(ay.data(), att.data(), kv.data(), qkv.data(), &cb.b, &c, &none, &sc);
    gpt_attention_backward(dqkv.data(), day.data(), att.data(), kv.data(), qkv.data(), &cb.b, &c, &none, &sc);
    gpt_scratch_free(&sc);
    std::vector<float> got_ay((size_t)Tk * C, NAN), got_dq((size_t)Tk * C, NAN), got_dkv((size_t)Tk * 2 * C, 0.0f);
    for (int r = 0; r < cp; r++) {
        MbHost h;
        pp_error e;
        memset(h.map, 0, sizeof h.map);
        mb_host_build(h, d, bin, cp, r, NH, block, &e);
        const int T = h.T;
        Batch b;
        memset(&b, 0, sizeof b);
        b.T = T; b.Tk = Tk; b.nseq = h.nseq; b.spans = h.spans.data(); b.nspans = (int)h.spans.size(); b.P = h.P;
        std::vector<float> q((size_t)T * 3 * C), kvm((size_t)Tk * 2 * C), P(h.P + 8, NAN), dP(h.P + 8, NAN), dS(h.P + 8, NAN);
        std::vector<float> o((size_t)T * C, NAN), dO((size_t)T * C), dq((size_t)T * 3 * C, NAN);
        std::vector<float> dkv((size_t)Tk * 2 * C, cp > 1 ? 0.0f : 12345.0f);   /* cp 1: the spans must overwrite */
        for (int t = 0; t < T; t++) {
            memcpy(&q[(size_t)t * 3 * C], &qkv[(size_t)h.gidx[t] * 3 * C], 3 * C * sizeof(float));
            memcpy(&dO[(size_t)t * C], &day[(size_t)h.gidx[t] * C], C * sizeof(float));
        }
        for (int p = 0; p < Tk; p++) memcpy(&kvm[(size_t)p * 2 * C], &qkv[(size_t)p * 3 * C + C], 2 * C * sizeof(float));
        M.cp = cp;      /* the keys and values: out of qkv (cp 1), or all-gathered in microbatch order */
        const float *K = cp > 1 ? kvm.data() : q.data() + C, *V = cp > 1 ? kvm.data() + C : q.data() + 2 * C;
        const int64_t ld = cp > 1 ? 2 * C : 3 * C;
        attn_scores(M, b, q.data(), K, ld, P.data());
        softmax_rows(h, NH, P.data(), nullptr, nullptr);
        attn_values(M, b, P.data(), V, ld, o.data());
        attn_dprobs(M, b, dO.data(), V, ld, dP.data());
        softmax_rows(h, NH, P.data(), dP.data(), dS.data());
        attn_grads(M, b, q.data(), K, ld, P.data(), dS.data(), dO.data(), dq.data(), dkv.data());
        for (int t = 0; t < T; t++) {
            memcpy(&got_ay[(size_t)h.gidx[t] * C], &o[(size_t)t * C], C * sizeof(float));
            memcpy(&got_dq[(size_t)h.gidx[t] * C], &dq[(size_t)t * 3 * C], C * sizeof(float));
        }
        for (size_t i = 0; i < dkv.size(); i++) got_dkv[i] += dkv[i];
    }
    std::vector<float> want_dq((size_t)Tk * C), want_dkv((size_t)Tk * 2 * C);
    for (int p = 0; p < Tk; p++) {
        memcpy(&want_dq[(size_t)p * C], &dqkv[(size_t)p * 3 * C], C * sizeof(float));
        memcpy(&want_dkv[(size_t)p * 2 * C], &dqkv[(size_t)p * 3 * C + C], 2 * C * sizeof(float));
    }
    const double e1 = max_rel(got_ay.data(), ay.data(), ay.size()), e2 = max_rel(got_dq.data(), want_dq.data(), want_dq.size());
    const double e3 = max_rel(got_dkv.data(), want_dkv.data(), want_dkv.size());
    check(e1 < 1e-5, "attention cp %d block %d bin %d: output differs from gpt_attention's by %.2e", cp, block, bin, e1);
    check(e2 < 1e-5, "attention cp %d block %d bin %d: dq differs by %.2e", cp, block, bin, e2);
    check(e3 < 1e-5, "attention cp %d block %d bin %d: dk, dv differ by %.2e", cp, block, bin, e3);
}

static void test_gemms(void)
{
    static Job J;
    small_job(J, 2, 1, 1024);
    static GpuModel M;
    M.cfg = J.cfg;
    M.blas.lt = (cublasLtHandle_t)1;    /* never dereferenced: cuBLASLt is the host GEMM above */
    M.blas.workspace = (void *)256;
    test_linear(M);
    for (int block : {1024, 3, 1})
        for (int cp : {1, 2})
            for (int bin = 0; bin < J.steps[0].plan->num_bins; bin++) test_attention_bin(M, J, J.steps[0], bin, cp, block);
    check(g_bad_shapes == 0, "%lld GEMMs with shapes or layouts cuBLASLt would refuse", g_bad_shapes);
    job_free(J);
}

/* --- a microbatch's buffers --------------------------------------------------------------------- */

static void test_layout(void)
{
    const int moe[MAX_CHUNKS] = { 2, 1 }, Tk = 100, T = 50, K = 2;
    const MbLayout L = mb_layout(Tk, T, 2, moe, K, 1);
    const size_t at[] = { L.rows, L.cu, L.gidx, L.row_span, L.spans, L.map_rows[0], L.map_rows[1], L.upload, L.pids,
                          L.plabels, L.ppos, L.ids, L.labels, L.pos, L.lrows, L.replay[0], L.replay[1], L.total };
    int ok = 1;
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) ok &= at[i] % 256 == 0 && (i == 0 || at[i] >= at[i - 1]);
    check(ok, "mb_layout: buffers not 256-aligned or not in order");
    check(L.cu - L.rows >= (size_t)Tk * 8 && L.gidx - L.cu >= ((size_t)Tk + 1) * 4 && L.spans - L.row_span >= (size_t)T * 4 &&
          L.map_rows[0] - L.spans >= (size_t)T * sizeof(Span) && L.map_rows[1] - L.map_rows[0] >= (size_t)T * 8 &&
          L.replay[1] - L.replay[0] >= (size_t)moe[0] * T * K * 4 && L.total - L.replay[1] >= (size_t)moe[1] * T * K * 4,
          "mb_layout: a buffer smaller than its contents");
}

int main(void)
{
    test_spans();
    test_gemms();
    test_layout();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
