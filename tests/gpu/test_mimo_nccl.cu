/* tests/gpu/test_mimo_nccl.cu — the two-module model of examples/mimo_model.h on 2 GPUs over
 * NCCL, equal to the one-process run on the host:
 *   non-colocated  vision on GPU 0, language on GPU 1: a 2-stage pipeline, pp_mimo_transport
 *                  over the NCCL transport, the executor's tensors in device memory;
 *   colocated      vision dp=2 and language pp=2 on both GPUs: pp_mimo_bridge_exchange fans the
 *                  two encoder replicas in to the language model's first stage (one part a
 *                  same-GPU copy, one over NVLink), the gradients fan back out.
 * Each rank's local sum of squares comes from the multi-tensor L2 kernel (pp_cuda_l2norm_sumsq)
 * over the gradients it counts (pp_mimo_grad_counted); pp_mimo_grad_norm reduces it over the
 * NCCL transport. The model's arithmetic runs on the host (the callbacks stage device tensors
 * through host buffers): what is tested is every byte pipepar moves between the GPUs. Then the
 * bridge exchange's throughput for large tensors. Ranks are threads, one GPU each.
 * Ends with "N passed, N failed". (C code; a .cu so nvcc links the C++ runtime.)             */
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
#endif
#include <cuda_runtime.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
#include <pthread.h>
#include <time.h>
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"   /* the model header serves the CPU tests too */
#endif
#include "../../examples/mimo_model.h"
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

static pthread_mutex_t count_mu = PTHREAD_MUTEX_INITIALIZER;
static int passed, failed;

static void check_(int ok, const char *file, int line, const char *what, const char *msg)
{
    pthread_mutex_lock(&count_mu);
    if (ok) passed++;
    else { failed++; printf("FAIL %s:%d: %s %s\n", file, line, what, msg ? msg : ""); fflush(stdout); }
    pthread_mutex_unlock(&count_mu);
}
#define CHECK(cond) check_((cond) != 0, __FILE__, __LINE__, #cond, "")
#define CHECK_MSG(cond, msg) check_((cond) != 0, __FILE__, __LINE__, #cond, (msg))
#define CHECK_OK(call, e) do { pp_status s_ = (call); check_(s_ == PP_OK, __FILE__, __LINE__, #call, (e)->message); } while (0)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* --- callbacks: device tensors staged through the host --------------------------------------- */

#define STAGE_FLOATS (1 << 16)

typedef struct gpu_rank {
    mm_rank *st;
    pp_nccl *nc;
    cudaStream_t s;
    float *h_a, *h_b, *h_c;     /* host staging */
} gpu_rank;

static int to_host(gpu_rank *g, float *h, const void *d, size_t bytes)
{
    if (!d || !bytes) return 0;
    if (cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, g->s) != cudaSuccess) return 1;
    return pp_nccl_sync(g->nc, g->s, 60, NULL) != PP_OK;
}

static int to_device(gpu_rank *g, void *d, const float *h, size_t bytes)
{
    if (!d || !bytes) return 0;
    if (cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, g->s) != cudaSuccess) return 1;
    return pp_nccl_sync(g->nc, g->s, 60, NULL) != PP_OK;
}

static size_t g_bytes(gpu_rank *g, int boundary, const pp_mb_info *info) { return mm_tensor_bytes(g->st, boundary, info); }

static size_t g_tensor_bytes(void *user, int boundary, const pp_mb_info *info)
{
    return g_bytes((gpu_rank *)user, boundary, info);
}

static int g_input(void *user, const pp_mb_info *info, void *x)
{
    gpu_rank *g = (gpu_rank *)user;
    mm_input(g->st, info, g->h_a);
    return to_device(g, x, g->h_a, g_bytes(g, 0, info));
}

static int g_forward(void *user, const pp_mb_info *info, const void *in, void *out)
{
    gpu_rank *g = (gpu_rank *)user;
    if (to_host(g, g->h_a, in, g_bytes(g, info->stage, info))) return 1;
    mm_forward(g->st, info, g->h_a, g->h_b);
    return to_device(g, out, g->h_b, g_bytes(g, info->stage + 1, info));
}

static int g_loss(void *user, const pp_mb_info *info, const void *out, void *grad_out, pp_loss *l)
{
    gpu_rank *g = (gpu_rank *)user;
    size_t bytes = g_bytes(g, info->num_stages, info);
    if (to_host(g, g->h_a, out, bytes)) return 1;
    mm_loss_cb(g->st, info, g->h_a, grad_out ? g->h_b : NULL, l);
    return to_device(g, grad_out, g->h_b, bytes);
}

static int g_backward(void *user, const pp_mb_info *info, const void *in, const void *grad_out, void *grad_in)
{
    gpu_rank *g = (gpu_rank *)user;
    if (to_host(g, g->h_a, in, g_bytes(g, info->stage, info))) return 1;
    if (to_host(g, g->h_b, grad_out, g_bytes(g, info->stage + 1, info))) return 1;
    mm_backward(g->st, info, g->h_a, g->h_b, grad_in ? g->h_c : NULL);
    return to_device(g, grad_in, g->h_c, g_bytes(g, info->stage, info));
}

static void *g_alloc(void *user, size_t bytes)
{
    void *p = NULL;
    (void)user;
    return cudaMalloc(&p, bytes > 0 ? bytes : 1) == cudaSuccess ? p : NULL;
}

static void g_free(void *user, void *ptr, size_t bytes) { (void)user; (void)bytes; cudaFree(ptr); }

/* --- a rank ------------------------------------------------------------------------------------ */

typedef struct gpu_case {
    mm_job job;
    int colocated;
    pp_nccl_id id;
} gpu_case;

typedef struct rank_arg { gpu_case *c; int rank; } rank_arg;

/* The global norm: the L2 kernel over the gradients this rank counts, then pp_mimo_grad_norm. */
static pp_status gpu_norm(mm_rank *st, gpu_rank *g, pp_transport *world, float *d_grad, pp_mimo_norm *out, pp_error *e)
{
    const pp_mimo *m = st->m;
    const mm_job *job = st->job;
    pp_cuda_tensor t[2];
    pp_cuda_l2norm *plan = NULL;
    double sumsq[PP_MIMO_MAX_MODULES];
    float *d_sumsq = d_grad + MM_ENC_N + MM_LM_N, h_sumsq = 0;
    int mod;
    pp_status s;
    memset(sumsq, 0, sizeof sumsq);
    for (mod = 0; mod < 2; mod++) {
        float *d = mod == job->vision ? d_grad : d_grad + MM_ENC_N;
        int count = mod == job->vision ? MM_ENC_N : MM_LM_N;
        if (pp_mimo_grad_counted(m, mod, st->rank, 0) != 1) continue;
        cudaMemcpy(d, mod == job->vision ? st->G.enc : st->G.lm, sizeof(float) * (size_t)count, cudaMemcpyHostToDevice);
        t[0].data = d; t[0].numel = count; t[0].dtype = PP_CUDA_F32;
        if ((s = pp_cuda_l2norm_create(t, 1, &plan, e)) != PP_OK) return s;
        s = pp_cuda_l2norm_sumsq(plan, d_sumsq, 0.0f, NULL, g->s, e);
        if (s == PP_OK) s = pp_nccl_sync(g->nc, g->s, 60, e);
        pp_cuda_l2norm_free(plan);
        if (s != PP_OK) return s;
        cudaMemcpy(&h_sumsq, d_sumsq, sizeof(float), cudaMemcpyDeviceToHost);
        sumsq[mod] = h_sumsq;
    }
    return pp_mimo_grad_norm(m, world, sumsq, job->cfg.max_norm, 60, out, e);
}

static void *rank_main(void *argp)
{
    rank_arg *a = (rank_arg *)argp;
    gpu_case *c = a->c;
    mm_job *job = &c->job;
    const pp_mimo_pipeline *pl = job->pl;
    int rank = a->rank, M = job->cfg.mb, k, step, i;
    pp_nccl_config nc_cfg;
    pp_nccl *nc = NULL;
    pp_transport world;
    pp_mimo_transport *mt = NULL;
    pp_executor *ex = NULL;
    pp_executor_config ec;
    pp_step_result res;
    pp_error e;
    pp_status s;
    gpu_rank g;
    mm_rank *st = (mm_rank *)calloc(1, sizeof *st);
    float *d_grad = NULL, *x = NULL;
    float *enc_out[8], *enc_grad[8], *lm_in[8], *lm_grad[8];
    size_t enc_bytes[8], lm_bytes[8];
    pp_mimo_bridge_io fwd, bwd;

    memset(&nc_cfg, 0, sizeof nc_cfg);
    nc_cfg.world = 2; nc_cfg.rank = rank; nc_cfg.device = rank; nc_cfg.timeout_s = 60;
    nc_cfg.bootstrap = PP_NCCL_BOOTSTRAP_ID; nc_cfg.id = &c->id;
    CHECK_OK(pp_nccl_init(&nc_cfg, &nc, &e), &e);
    if (!nc) { free(st); return NULL; }
    memset(&g, 0, sizeof g);
    cudaStreamCreateWithFlags(&g.s, cudaStreamNonBlocking);
    CHECK_OK(pp_nccl_transport(nc, g.s, &world, &e), &e);
    mm_rank_init(st, job, rank);
    g.st = st; g.nc = nc;
    g.h_a = (float *)calloc(STAGE_FLOATS, sizeof(float));
    g.h_b = (float *)calloc(STAGE_FLOATS, sizeof(float));
    g.h_c = (float *)calloc(STAGE_FLOATS, sizeof(float));
    cudaMalloc((void **)&d_grad, sizeof(float) * (MM_ENC_N + MM_LM_N + 4));
    /* colocated: the bridge's device buffers and the host copies the model reads */
    st->lm_in = (float **)calloc((size_t)M, sizeof(float *));
    st->lm_grad = (float **)calloc((size_t)M, sizeof(float *));
    x = (float *)calloc((size_t)st->rows_vision * MM_DIN, sizeof(float));
    for (k = 0; k < M; k++) {
        enc_bytes[k] = sizeof(float) * (size_t)st->rows_vision * MM_D;
        lm_bytes[k] = sizeof(float) * (size_t)st->rows_language * MM_D;
        cudaMalloc((void **)&enc_out[k], enc_bytes[k]); cudaMalloc((void **)&enc_grad[k], enc_bytes[k]);
        cudaMalloc((void **)&lm_in[k], lm_bytes[k]); cudaMalloc((void **)&lm_grad[k], lm_bytes[k]);
        st->lm_in[k] = (float *)calloc(lm_bytes[k], 1);
        st->lm_grad[k] = (float *)calloc(lm_bytes[k], 1);
    }
    fwd.encoder_out = (void *const *)enc_out; fwd.encoder_bytes = enc_bytes;
    fwd.language_in = (void *const *)lm_in; fwd.language_bytes = lm_bytes;
    bwd.encoder_out = (void *const *)enc_grad; bwd.encoder_bytes = enc_bytes;
    bwd.language_in = (void *const *)lm_grad; bwd.language_bytes = lm_bytes;

    memset(&ec, 0, sizeof ec);
    s = pp_mimo_transport_create(pl, rank, &world, &mt, &ec.transport, &e);
    CHECK_OK(s, &e);
    if (s == PP_OK) {
        ec.schedule = pl->schedule;
        memset(&ec.callbacks, 0, sizeof ec.callbacks);
        ec.callbacks.user = &g;
        ec.callbacks.tensor_bytes = g_tensor_bytes;
        ec.callbacks.input = g_input;
        ec.callbacks.forward = g_forward;
        ec.callbacks.loss = g_loss;
        ec.callbacks.backward = g_backward;
        ec.allocator.alloc = g_alloc;
        ec.allocator.free = g_free;
        ec.timeout_s = 60;
        s = pp_executor_create(&ec, &ex, &e);
        CHECK_OK(s, &e);
    }
    for (step = 0; step < job->steps && s == PP_OK; step++) {
        pp_mimo_norm norm;
        st->step = step;
        memset(&st->G, 0, sizeof st->G);
        if (c->colocated) {
            for (k = 0; k < M; k++) {
                mm_vision_rows(st, k, x);
                mm_enc_forward(st->P.enc, 0, 2, x, st->rows_vision, g.h_a);
                cudaMemcpy(enc_out[k], g.h_a, enc_bytes[k], cudaMemcpyHostToDevice);
            }
            s = pp_mimo_bridge_exchange(pl, job->vision, rank, &world, 0, &fwd, step, 60, &e);
            if (s == PP_OK) s = pp_nccl_sync(nc, g.s, 60, &e);
            for (k = 0; k < M && s == PP_OK; k++) cudaMemcpy(st->lm_in[k], lm_in[k], lm_bytes[k], cudaMemcpyDeviceToHost);
        }
        if (s == PP_OK) s = pp_run_step(ex, NULL, &res, &e);
        if (s == PP_OK && c->colocated) {
            for (k = 0; k < M; k++) cudaMemcpy(lm_grad[k], st->lm_grad[k], lm_bytes[k], cudaMemcpyHostToDevice);
            s = pp_mimo_bridge_exchange(pl, job->vision, rank, &world, 1, &bwd, step, 60, &e);
            if (s == PP_OK) s = pp_nccl_sync(nc, g.s, 60, &e);
            for (k = 0; k < M && s == PP_OK; k++) {
                cudaMemcpy(g.h_b, enc_grad[k], enc_bytes[k], cudaMemcpyDeviceToHost);
                mm_vision_rows(st, k, x);
                mm_enc_backward(st->P.enc, st->G.enc, 0, 2, x, g.h_b, st->rows_vision, NULL);
            }
            /* vision's dp group is both ranks: the world communicator */
            if (s == PP_OK) s = pp_nccl_all_reduce_host(nc, st->G.enc, MM_ENC_N, 60, &e);
        }
        if (s == PP_OK) s = gpu_norm(st, &g, &world, d_grad, &norm, &e);
        CHECK_OK(s, &e);
        if (s != PP_OK) break;
        job->loss[rank][step] = res.loss;
        job->norm[rank][step] = norm.norm;
        job->clip[rank][step] = norm.clip;
        for (i = 0; i < MM_ENC_N; i++) st->P.enc[i] -= job->cfg.lr * (float)(norm.clip * st->G.enc[i]);
        for (i = 0; i < MM_LM_N; i++) st->P.lm[i] -= job->cfg.lr * (float)(norm.clip * st->G.lm[i]);
    }
    job->params[rank] = st->P;

    /* the bridge's throughput: 4 microbatches of 32 MiB per encoder replica, fan-in 2:1 */
    if (c->colocated && s == PP_OK) {
        enum { BIG = 32 << 20, REPS = 5 };
        float *be[4], *bl[4];
        size_t eb[4], lb[4];
        pp_mimo_bridge_io io;
        double t0 = 0;
        int rep, ok = 1;
        pp_mimo_pipeline_config pc;
        pp_mimo_pipeline *big = NULL;
        memset(&pc, 0, sizeof pc);
        pc.mb = 4;
        CHECK_OK(pp_mimo_pipeline_create(&pl->mimo, &pc, &big, &e), &e);
        for (k = 0; k < 4; k++) {
            eb[k] = BIG; lb[k] = 2 * (size_t)BIG;
            cudaMalloc((void **)&be[k], eb[k]); cudaMalloc((void **)&bl[k], lb[k]);
            cudaMemset(be[k], 1 + rank, eb[k]);
        }
        io.encoder_out = (void *const *)be; io.encoder_bytes = eb; io.language_in = (void *const *)bl; io.language_bytes = lb;
        for (rep = 0; rep < REPS + 1 && big; rep++) {
            if (rep == 1) { pp_nccl_barrier(nc, 60, &e); t0 = now_s(); }
            ok &= pp_mimo_bridge_exchange(big, job->vision, rank, &world, 0, &io, 100 + rep, 60, &e) == PP_OK;
            ok &= pp_nccl_sync(nc, g.s, 60, &e) == PP_OK;
        }
        CHECK_MSG(ok, e.message);
        if (rank == 0 && ok) {
            double dt = (now_s() - t0) / REPS;
            unsigned char h[2];
            /* rank 0 holds language stage 0: part 0 from itself (bytes 1), part 1 from rank 1 (bytes 2) */
            cudaMemcpy(&h[0], (char *)bl[3] + BIG - 1, 1, cudaMemcpyDeviceToHost);
            cudaMemcpy(&h[1], (char *)bl[3] + BIG, 1, cudaMemcpyDeviceToHost);
            CHECK(h[0] == 1 && h[1] == 2);
            printf("  bridge exchange, fan-in 2:1, 4 x 32 MiB per replica: %.3f ms per exchange; %.1f GB/s received "
                   "from the other GPU (%.1f GB/s including the same-GPU part)\n", dt * 1e3,
                   4.0 * BIG / dt / 1e9, 8.0 * BIG / dt / 1e9);
        }
        for (k = 0; k < 4; k++) { cudaFree(be[k]); cudaFree(bl[k]); }
        pp_mimo_pipeline_free(big);
    }

    pp_executor_free(ex);
    pp_mimo_transport_free(mt);
    pp_nccl_transport_free(&world);
    for (k = 0; k < M; k++) {
        cudaFree(enc_out[k]); cudaFree(enc_grad[k]); cudaFree(lm_in[k]); cudaFree(lm_grad[k]);
        free(st->lm_in[k]); free(st->lm_grad[k]);
    }
    free(st->lm_in); free(st->lm_grad); free(x);
    cudaFree(d_grad);
    free(g.h_a); free(g.h_b); free(g.h_c);
    cudaStreamDestroy(g.s);
    pp_nccl_free(nc);
    free(st);
    return NULL;
}

static void run_case(const char *title, pp_mimo_module_config v, pp_mimo_module_config l, int colocated)
{
    pp_mimo_module_config mods[2];
    pp_mimo_config cfg;
    pp_mimo m;
    pp_mimo_pipeline_config pc;
    pp_mimo_pipeline *pl = NULL;
    pp_error e;
    gpu_case *c = (gpu_case *)calloc(1, sizeof *c);
    pthread_t th[2];
    rank_arg args[2];
    mm_params ref;
    mm_step_result res;
    double t0 = now_s(), worst_loss = 0, worst_norm = 0, worst_w = 0;
    int r, s;

    mods[0] = v; mods[1] = l;
    memset(&cfg, 0, sizeof cfg);
    cfg.num_modules = 2; cfg.modules = mods;
    CHECK_OK(pp_mimo_init(&cfg, &m, &e), &e);
    memset(&pc, 0, sizeof pc);
    pc.mb = 4;
    CHECK_OK(pp_mimo_pipeline_create(&m, &pc, &pl, &e), &e);
    if (!pl) { free(c); return; }
    c->colocated = colocated;
    c->job.pl = pl;
    c->job.cfg.mb = 4; c->job.cfg.rows = 8; c->job.cfg.lr = 0.5f; c->job.cfg.max_norm = 0.25f;
    c->job.steps = 4;
    c->job.vision = 0; c->job.language = 1;
    c->job.timeout_s = 60;
    c->job.params = (mm_params *)calloc(2, sizeof(mm_params));
    c->job.grads = (mm_params *)calloc(2, sizeof(mm_params));
    c->job.loss = (float (*)[MM_MAX_STEPS])calloc(2, sizeof *c->job.loss);
    c->job.norm = (double (*)[MM_MAX_STEPS])calloc(2, sizeof *c->job.norm);
    c->job.clip = (double (*)[MM_MAX_STEPS])calloc(2, sizeof *c->job.clip);
    CHECK_OK(pp_nccl_unique_id(&c->id, &e), &e);
    for (r = 0; r < 2; r++) { args[r].c = c; args[r].rank = r; pthread_create(&th[r], NULL, rank_main, &args[r]); }
    for (r = 0; r < 2; r++) pthread_join(th[r], NULL);
    mm_init(&ref);
    for (s = 0; s < c->job.steps; s++) {
        mm_reference_step(&ref, &c->job.cfg, s, &res, NULL);
        for (r = 0; r < 2; r++) {
            worst_loss = fmax(worst_loss, fabs(c->job.loss[r][s] - res.loss));
            worst_norm = fmax(worst_norm, fabs(c->job.norm[r][s] - res.norm) / res.norm);
        }
    }
    for (r = 0; r < 2; r++) worst_w = fmax(worst_w, mm_max_param_diff(&c->job, r, &ref));
    CHECK_MSG(worst_loss < 1e-5, title);
    CHECK_MSG(worst_norm < 1e-5, title);
    CHECK_MSG(worst_w < 1e-5, title);
    printf("  %s: %d steps in %.2f s; vs one process: loss %.2g, norm %.2g (relative), weights %.2g\n", title,
           c->job.steps, now_s() - t0, worst_loss, worst_norm, worst_w);
    mm_job_free(&c->job);
    pp_mimo_pipeline_free(pl);
    free(c);
}

static pp_mimo_module_config module(const char *name, int offset, int dp, int pp)
{
    pp_mimo_module_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.name, sizeof c.name, "%s", name);
    c.offset = offset; c.dp = dp; c.pp = pp;
    return c;
}

int main(void)
{
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 2) {
        printf("test_mimo_nccl: needs 2 GPUs (found %d)\n0 passed, 1 failed\n", devices);
        return 1;
    }
    run_case("non-colocated: vision on GPU 0, language on GPU 1", module("vision", 0, 1, 1), module("language", 1, 1, 1), 0);
    run_case("colocated: vision dp=2 and language pp=2 on GPUs 0-1", module("vision", 0, 2, 1), module("language", 0, 1, 2), 1);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
