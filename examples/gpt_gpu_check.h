/* gpt_gpu_check.h — the model whole on one GPU, and what is checked against it. Part of
 * examples/gpt_gpu.cu, included after the microbatch code it reuses.
 *
 *   --check     every rank also builds the whole model on its own GPU (the same weights: each
 *               layer drawn as gpt_model.h draws it) and runs each step's batch through it
 *               unsplit: no pipeline, no cp, every dp rank's bins in one pass, the routes
 *               replayed from the same recording. Step 1: the loss and every gradient the rank
 *               holds, tensor by tensor, after the dp x cp sum and the tied weight's; every step:
 *               the loss of the whole model trained alongside (its own clip and AdamW).
 *   --selftest  one GPU, no NCCL: the whole model on the GPU against gpt_model.h's on the CPU, the
 *               same weights and packed batch. The packed data (exact), the routing (the CPU
 *               model's own choices against the GPU's), then with the GPU's routes replayed on
 *               both: the loss and every gradient, with attention as whole sequences and again in
 *               blocks of 4 query rows. The model covers every kernel: embedding with positions
 *               restarting per sequence, RMSNorm, attention over several packed sequences, the
 *               dense MLP, the MoE router and experts (every other layer), the tied output layer
 *               and the loss with padding.
 * Errors are relative: the loss's, and per tensor the largest difference over its largest entry
 * (gpt.c's measure, so entries near zero, where rounding is all there is, do not count large).
 * Tolerances: fp32 (build/gpt_gpu_fp32) compares at fp32's precision; bf16 activations and
 * weights round every GEMM's inputs to 8 bits of mantissa, which the CPU model does not, so the
 * selftest's bf16 bound only tells an indexing mistake (errors of order 1) from rounding. */

#ifdef GPT_GPU_FP32
#define SELFTEST_GRAD_TOL 1e-4      /* the GPU model against the CPU model */
#define SELFTEST_LOSS_TOL 1e-5
#define SELFTEST_ROUTES 0.99        /* the share of routing choices that must agree */
#define CHECK_GRAD_TOL 1e-4         /* the pipeline against the model whole on one GPU */
#define CHECK_LOSS_TOL 1e-4
#else
#define SELFTEST_GRAD_TOL 1e-1
#define SELFTEST_LOSS_TOL 2e-2
#define SELFTEST_ROUTES 0.90
#define CHECK_GRAD_TOL 3e-2
#define CHECK_LOSS_TOL 1e-2
#endif

struct Reference {
    GpuModel M;                 /* cp 1: every microbatch whole */
    Stage st;                   /* every layer, both ends */
    char *acts_mem = nullptr;
    int *offs = nullptr;        /* pinned: per MoE layer, E + 1 expert row offsets */
    Acts acts;
    MbLayout lay;
    MbHost mh;
    MbDev md;
    char *mb_host = nullptr, *mb_dev = nullptr;
    floatX *out = nullptr;      /* [Tk, V] logits, then their gradient */
    double *d_loss = nullptr;
    float *d_norm = nullptr;    /* [2] */
    float *d_diff = nullptr;    /* [2] max_diff_kernel's */
    pp_cuda_l2norm *norm_plan = nullptr;
    size_t bytes = 0;
    double loss = 0, loss_err = 0, grad_err = -1;
};

/* The whole model on the stream's device, with room for the largest bin of every step. */
static void reference_create(Reference &F, const Job &J, cudaStream_t stream)
{
    const gpt_config &c = J.cfg;
    GpuModel &M = F.M;
    M.cfg = c; M.attn_block = J.o.attn_block; M.stream = stream; M.cp = 1; M.cp_rank = 0; M.sync_comm = nullptr;
    M.why[0] = '\0';
    blas_create(M.blas, stream);
    stage_create(F.st, &c, 0, 2 * c.layers, GPT_EMBEDDING | GPT_HEAD, (uint64_t)J.o.seed, stream, &F.bytes);
    int64_t P = 0;
    for (const step_data &d : J.steps)
        for (int bin = 0; bin < d.plan->num_bins; bin++) {
            pp_error e;
            for (int block : { J.o.attn_block, 4 })
                if (mb_host_build(F.mh, d, bin, 1, 0, c.heads, block, &e) == PP_OK) P = std::max(P, F.mh.P);
        }
    const int Tk = J.max_tokens;
    const size_t ab = acts_carve(&c, F.st, Tk, Tk, P, 1, nullptr, nullptr, nullptr);
    CK(cudaMalloc(&F.acts_mem, ab)); F.bytes += ab;
    CK(cudaMallocHost(&F.offs, sizeof(int) * (size_t)c.layers * (c.experts + 1)));
    scratch_create(M.s, &c, Tk, Tk, P, 1, &F.bytes);
    const int moe[1] = { F.st.moe_layers };
    F.lay = mb_layout(Tk, Tk, 1, moe, c.topk, J.replay_slots > 0);
    CK(cudaMallocHost(&F.mb_host, F.lay.upload));
    CK(cudaMalloc(&F.mb_dev, F.lay.total));
    F.md.host = F.mb_host; F.md.dev = F.mb_dev;
    memset(F.mh.map, 0, sizeof F.mh.map);
    CK(cudaMalloc(&F.out, (size_t)Tk * c.vocab * sizeof(floatX)));
    CK(cudaMalloc(&F.d_loss, sizeof(double)));
    CK(cudaMalloc(&F.d_norm, 2 * sizeof(float)));
    CK(cudaMalloc(&F.d_diff, 2 * sizeof(float)));
    pp_cuda_tensor g = { F.st.grads, (int64_t)F.st.shape.n, PP_CUDA_F32 };
    pp_error e;
    if (pp_cuda_l2norm_create(&g, 1, &F.norm_plan, &e) != PP_OK) { fprintf(stderr, "gpt_gpu: %s\n", e.message); exit(1); }
}

static void reference_free(Reference &F)
{
    stage_free(F.st);
    scratch_free(F.M.s);
    blas_free(F.M.blas);
    pp_cuda_l2norm_free(F.norm_plan);
    cudaFree(F.acts_mem); cudaFree(F.mb_dev); cudaFree(F.out); cudaFree(F.d_loss); cudaFree(F.d_norm); cudaFree(F.d_diff);
    cudaFreeHost(F.offs); cudaFreeHost(F.mb_host);
}

/* One pass of the whole model over every bin of the step (every dp rank's), unsplit, attention in
 * blocks of `block` rows: the gradients of the mean loss per labelled token into F.st.grads
 * (zeroed first). Routes: replayed from `replay` (a device recording in the step's token order,
 * read by row: pp_cuda_replay_gather without a map), or chosen by the routers; written to
 * `record` (sums of expert + 1) when not NULL. d_ids, d_labels: the step's tokens on the device.
 * Returns the mean loss. */
static double reference_pass(Reference &F, const Job &J, const step_data &d, const int *d_ids, const int *d_labels,
                             const int *replay, float *record, int block)
{
    GpuModel &M = F.M;
    cudaStream_t s = M.stream;
    double lsum = 0;
    pp_error e;
    CK(cudaMemsetAsync(F.st.grads, 0, F.st.shape.n * sizeof(float), s));
    CK(cudaMemsetAsync(F.d_loss, 0, sizeof(double), s));
    for (int bin = 0; bin < d.plan->num_bins; bin++) {
        CK(cudaStreamSynchronize(s));   /* the previous bin's upload is done with the pinned region */
        if (mb_host_build(F.mh, d, bin, 1, 0, J.cfg.heads, block, &e) != PP_OK ||
            mb_upload_and_pack(F.md, F.mh, F.lay, 1, 0, d_ids, d_labels, 1, s, M.dpt, &e)) {
            fprintf(stderr, "gpt_gpu: reference, bin %d: %s\n", bin, e.message);
            exit(1);
        }
        const Batch &b = F.md.b;
        Route route = { nullptr, record, J.replay_slots };
        if (replay && J.replay_slots) {
            pp_cuda_replay r;
            memset(&r, 0, sizeof r);
            r.recorded = replay; r.recorded_bytes = 4; r.moe_layers = J.replay_slots; r.topk = J.cfg.topk;
            r.slots = NULL; r.layer_begin = 0; r.layer_count = J.replay_slots;
            r.rows = b.rows; r.index_bytes = 8; r.tokens = b.T; r.dst = F.md.replay[0]; r.dst_bytes = 4;
            if (pp_cuda_replay_gather(&r, s, &e) != PP_OK) { fprintf(stderr, "gpt_gpu: reference: %s\n", e.message); exit(1); }
            route.replay = F.md.replay[0];
        }
        acts_carve(&J.cfg, F.st, b.T, b.Tk, b.P, 1, F.acts_mem, F.offs, &F.acts);
        if (stage_forward(M, F.st, b, &route, b.ids, F.out, F.acts)) { fprintf(stderr, "gpt_gpu: reference: %s\n", M.why); exit(1); }
        stage_loss(M, b, F.out, F.out, 1.0f / (float)d.labelled, F.d_loss);
        if (stage_backward(M, F.st, b, F.out, nullptr, F.acts)) { fprintf(stderr, "gpt_gpu: reference: %s\n", M.why); exit(1); }
    }
    dp_collect(M.dpt, std::vector<double>(DP_KINDS).data());
    CK(cudaMemcpyAsync(&lsum, F.d_loss, sizeof lsum, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    return lsum / (double)d.labelled;
}

/* The reference's own update: its clip over its own norm, AdamW, gradients zeroed. */
static void reference_update(Reference &F, const options &o, int step)
{
    pp_error e;
    if (pp_cuda_l2norm_sumsq(F.norm_plan, F.d_norm, o.clip > 0 ? (float)o.clip : 0.0f, o.clip > 0 ? F.d_norm + 1 : NULL,
                             F.M.stream, &e) != PP_OK) {
        fprintf(stderr, "gpt_gpu: reference: %s\n", e.message);
        exit(1);
    }
    stage_adamw(F.M, F.st, o.clip > 0 ? F.d_norm + 1 : nullptr, (float)o.lr, 0.1f, step + 1);
}

/* Relative error of gradient tensor a against b (device, n floats). */
static double rel_err_dev(Reference &F, const float *a, const float *b, size_t n)
{
    float h[2];
    CK(cudaMemsetAsync(F.d_diff, 0, 2 * sizeof(float), F.M.stream));
    max_diff_kernel<<<grid_for(n), 256, 0, F.M.stream>>>(a, b, n, F.d_diff);
    CK(cudaMemcpyAsync(h, F.d_diff, sizeof h, cudaMemcpyDeviceToHost, F.M.stream));
    CK(cudaStreamSynchronize(F.M.stream));
    return (double)h[0] / std::max((double)h[1], 1e-30);
}

/* ============================================================================================
 * --check
 * ============================================================================================ */

static void print_check_header(const Job &J)
{
    (void)J;
    printf("check: the model whole on each rank's GPU, every bin unsplit; errors relative (the loss's; per tensor the\n"
           "       largest difference over its largest entry), %s: loss at most %g, step 1's gradients at most %g\n",
           GPT_PRECISION, CHECK_LOSS_TOL, CHECK_GRAD_TOL);
}

static int check_setup(Rank &R)
{
    R.ref = new Reference();
    reference_create(*R.ref, *R.job, R.stream);
    return 0;
}

/* After the step's gradients are complete (before the update): the reference's pass over the
 * same batch; on step 1 every gradient this rank holds against its tensor of the whole model,
 * the worst over every rank; every step the loss. Then the reference updates itself. */
static int check_step(Rank &R, int step, double loss)
{
    const Job &J = *R.job;
    Reference &F = *R.ref;
    static Tensor mine[MAX_TENSORS], whole[MAX_TENSORS];
    const step_data &d = J.steps[step];
    F.loss = reference_pass(F, J, d, R.d_ids, R.d_labels, J.o.replay ? R.recording : nullptr, nullptr, J.o.attn_block);
    F.loss_err = fabs(loss - F.loss) / fabs(F.loss);
    F.grad_err = -1;
    if (step == 0) {
        double worst = 0;
        char name[96] = "-";
        const int nw = stage_tensors(&J.cfg, &F.st.shape, &F.st.w, &F.st.g, whole);
        for (int k = 0; k < R.nchunks; k++) {
            const Stage &st = R.chunk[k];
            const int n = stage_tensors(&J.cfg, &st.shape, &st.w, &st.g, mine);
            for (int i = 0; i < n; i++) {
                const int j = find_tensor(whole, nw, mine[i].layer, mine[i].name);
                const double err = j < 0 ? 1.0 : rel_err_dev(F, mine[i].g, whole[j].g, mine[i].n);
                if (!(err <= worst)) { worst = err; snprintf(name, sizeof name, "%s of layer %d", mine[i].name, mine[i].layer); }
            }
        }
        if (!(worst <= CHECK_GRAD_TOL))
            fprintf(stderr, "gpt_gpu: rank %d: gradient %s differs from the whole model's by %.3g\n", R.rank, name, worst);
        std::vector<float> w((size_t)R.world, 0.0f);
        w[R.rank] = (float)worst;
        PPCK(R, pp_nccl_all_reduce_host(R.world_c, w.data(), R.world, R.M.timeout_s, &e_));
        F.grad_err = 0;
        for (float x : w) if (!(x <= F.grad_err)) F.grad_err = x;    /* NaN propagates */
    }
    if (!(F.loss_err <= CHECK_LOSS_TOL) || (F.grad_err >= 0 && !(F.grad_err <= CHECK_GRAD_TOL))) R.check_failures++;
    reference_update(F, J.o, step);
    return 0;
}

static void print_check(const Rank &R, int step)
{
    const Reference &F = *R.ref;
    const bool ok = F.loss_err <= CHECK_LOSS_TOL && (F.grad_err < 0 || F.grad_err <= CHECK_GRAD_TOL);
    char g[16] = "       -";
    if (F.grad_err >= 0) snprintf(g, sizeof g, "%8.1e", F.grad_err);
    (void)step;
    printf("   %12.5f  %8.1e  %s  %s", F.loss, F.loss_err, g, ok ? "yes" : "NO");
}

/* Every rank's verdict is the same (the errors were summed over the world). Returns 0, or 4. */
static int check_verdict(Rank &R)
{
    if (R.lead) {
        if (R.check_failures)
            printf("MISMATCH: %d step(s) differ from the model whole on one GPU (tolerances: loss %g, gradients %g)\n",
                   R.check_failures, CHECK_LOSS_TOL, CHECK_GRAD_TOL);
        else
            printf("gradients match: step 1's loss and every gradient, and the loss of all %d steps, within the "
                   "tolerances of the model whole on one GPU (%s: loss %g, gradients %g)\n", R.job->o.steps,
                   GPT_PRECISION, CHECK_LOSS_TOL, CHECK_GRAD_TOL);
    }
    reference_free(*R.ref);
    delete R.ref;
    R.ref = nullptr;
    return R.check_failures ? 4 : 0;
}

/* ============================================================================================
 * --selftest: the GPU model against gpt_model.h's on the CPU
 * ============================================================================================ */

/* gpt_model.h's view of a whole bin (gpt.c's meta_build for cp 1): host arrays from the plan. */
struct CpuBatch {
    gpt_batch b;
    std::vector<int32_t> ids, labels, pos, gidx, seq_start;
    std::vector<int64_t> rows;
};

static void cpu_batch(CpuBatch &cb, const step_data &d, int bin)
{
    const pp_pack_plan *plan = d.plan;
    const int32_t *cu = pp_pack_plan_cu_seqlens_padded(plan, bin);
    const int nseq = pp_pack_plan_bin_size(plan, bin), T = plan->bin_padded_tokens[bin];
    pp_error e;
    cb.ids.resize(T); cb.labels.resize(T); cb.pos.resize(T); cb.gidx.resize(T); cb.seq_start.resize(T); cb.rows.resize(T);
    pp_pack_plan_gather(plan, bin, NULL, cb.rows.data(), &e);
    for (int i = 0; i < nseq; i++)
        for (int p = cu[i]; p < cu[i + 1]; p++) cb.seq_start[p] = cu[i];
    for (int t = 0; t < T; t++) {
        cb.gidx[t] = t;
        cb.ids[t] = cb.rows[t] >= 0 ? d.ids[cb.rows[t]] : 0;
        cb.labels[t] = cb.rows[t] >= 0 ? d.labels[cb.rows[t]] : -1;
        cb.pos[t] = t - cb.seq_start[t];
    }
    memset(&cb.b, 0, sizeof cb.b);
    cb.b.T = cb.b.Tk = T;
    cb.b.ids = cb.ids.data(); cb.b.labels = cb.labels.data(); cb.b.pos = cb.pos.data(); cb.b.gidx = cb.gidx.data();
    cb.b.seq_start = cb.seq_start.data(); cb.b.src = cb.gidx.data(); cb.b.rows = cb.rows.data();
}

/* The CPU model over every bin of the step: routes replayed from `rec` (host, the step's token
 * order) or, with rec NULL, its own (written to `record` when given); the gradients of the mean
 * loss into cpu.grads. Returns the mean loss. */
static double cpu_pass(const Job &J, gpt_stage &cpu, const step_data &d, const int32_t *rec, int32_t *record, bool backward)
{
    const gpt_config &c = J.cfg;
    const int Tk = J.max_tokens, slots = J.replay_slots, K = c.topk;
    gpt_scratch sc;
    gpt_acts a;
    std::vector<gpt_layer_acts> la(c.layers);
    size_t nf, ni;
    a.layer = la.data();
    gpt_scratch_init(&sc, &c, Tk, Tk);
    gpt_acts_carve(&c, &cpu, Tk, Tk, NULL, NULL, &a, &nf, &ni);
    std::vector<float> f(nf + 1), out((size_t)Tk * c.vocab);
    std::vector<int32_t> ip(ni + 1), replay((size_t)Tk * K * std::max(slots, 1));
    gpt_cp none = { 1, NULL, NULL, NULL };
    double sum = 0;
    memset(cpu.grads, 0, sizeof(float) * cpu.n);
    for (int bin = 0; bin < d.plan->num_bins; bin++) {
        CpuBatch cb;
        cpu_batch(cb, d, bin);
        const int T = cb.b.T;
        gpt_route route = { NULL, record, slots };
        if (rec) {
            for (int n = 0; n < slots; n++)
                for (int t = 0; t < T; t++)
                    for (int k = 0; k < K; k++)
                        replay[((size_t)n * T + t) * K + k] = cb.rows[t] >= 0 ? rec[((size_t)cb.rows[t] * slots + n) * K + k] : -1;
            route.replay = replay.data();
        }
        int count;
        gpt_acts_carve(&c, &cpu, T, T, f.data(), ip.data(), &a, &nf, &ni);
        gpt_forward(&c, &cpu, &cb.b, &route, &none, cb.ids.data(), out.data(), &a, &sc);
        sum += gpt_loss(&c, &cb.b, out.data(), backward ? out.data() : NULL, &count);
        if (backward) gpt_backward(&c, &cpu, &cb.b, &none, out.data(), NULL, &a, &sc);
    }
    for (size_t i = 0; i < cpu.n; i++) cpu.grads[i] /= (float)d.labelled;
    gpt_scratch_free(&sc);
    return sum / (double)d.labelled;
}

/* Every bin packed on the device (pp_cuda_pack) against the host's arrays: ids, labels, positions. */
static int selftest_packing(Reference &F, const Job &J, const step_data &d, const int *d_ids, const int *d_labels)
{
    int bad = 0;
    for (int bin = 0; bin < d.plan->num_bins; bin++) {
        pp_error e;
        CpuBatch cb;
        cpu_batch(cb, d, bin);
        CK(cudaStreamSynchronize(F.M.stream));
        if (mb_host_build(F.mh, d, bin, 1, 0, J.cfg.heads, J.o.attn_block, &e) != PP_OK ||
            mb_upload_and_pack(F.md, F.mh, F.lay, 1, 0, d_ids, d_labels, 1, F.M.stream, F.M.dpt, &e)) {
            fprintf(stderr, "gpt_gpu: selftest, bin %d: %s\n", bin, e.message);
            return 1;
        }
        const int T = F.md.b.T;
        std::vector<int32_t> ids(T), labels(T), pos(T);
        CK(cudaMemcpyAsync(ids.data(), F.md.b.ids, T * 4, cudaMemcpyDeviceToHost, F.M.stream));
        CK(cudaMemcpyAsync(labels.data(), F.md.b.labels, T * 4, cudaMemcpyDeviceToHost, F.M.stream));
        CK(cudaMemcpyAsync(pos.data(), F.md.b.pos, T * 4, cudaMemcpyDeviceToHost, F.M.stream));
        CK(cudaStreamSynchronize(F.M.stream));
        bad += T != cb.b.T || ids != cb.ids || labels != cb.labels || pos != cb.pos;
    }
    std::vector<double> unused(DP_KINDS);
    dp_collect(F.M.dpt, unused.data());
    return bad;
}

/* The loss and every gradient of the GPU pass (F.st.grads) against the CPU model's: prints one
 * line per tensor, returns the worst gradient error. */
static double selftest_compare(Reference &F, const Job &J, gpt_stage &cpu, double gpu_loss, double cpu_loss, int *fails)
{
    static Tensor g[MAX_TENSORS], h[MAX_TENSORS];
    const int ng = stage_tensors(&J.cfg, &F.st.shape, &F.st.w, &F.st.g, g), nh = stage_tensors(&J.cfg, &cpu, &cpu.w, &cpu.g, h);
    const double lerr = fabs(gpu_loss - cpu_loss) / fabs(cpu_loss);
    double worst = 0;
    printf("    loss: GPU %.6f, CPU %.6f, rel err %.2e %s\n", gpu_loss, cpu_loss, lerr, lerr <= SELFTEST_LOSS_TOL ? "ok" : "FAIL");
    *fails += !(lerr <= SELFTEST_LOSS_TOL);
    printf("    gradient   layer   rel err\n");
    for (int i = 0; i < ng; i++) {
        const int j = find_tensor(h, nh, g[i].layer, g[i].name);
        std::vector<float> x(g[i].n);
        CK(cudaMemcpyAsync(x.data(), g[i].g, g[i].n * sizeof(float), cudaMemcpyDeviceToHost, F.M.stream));
        CK(cudaStreamSynchronize(F.M.stream));
        double num = j < 0 ? 1 : 0, den = 1e-30;
        for (size_t k = 0; j >= 0 && k < g[i].n; k++) {
            const double dif = fabs((double)x[k] - h[j].g[k]);
            if (!(dif <= num)) num = dif;
            den = std::max(den, fabs((double)h[j].g[k]));
        }
        const double e = num / den;
        const bool ok = e <= SELFTEST_GRAD_TOL;
        printf("    %-9s %5d   %.2e %s\n", g[i].name, g[i].layer, e, ok ? "ok" : "FAIL");
        *fails += !ok;
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

/* The model whole on this process's GPU (LOCAL_RANK's, else 0) on a stream of its own, and step
 * 1's tokens and labels on the device, for the one-GPU modes (--selftest, --unit-costs). */
static cudaStream_t one_gpu_reference(Reference &F, const Job &J, int **d_ids, int **d_labels)
{
    const step_data &d = J.steps[0];
    const char *lr = getenv("LOCAL_RANK");
    CK(cudaSetDevice(lr ? atoi(lr) : 0));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    reference_create(F, J, s);
    CK(cudaMalloc(d_ids, d.tokens * 4)); CK(cudaMalloc(d_labels, d.tokens * 4));
    CK(cudaMemcpyAsync(*d_ids, d.ids.data(), d.tokens * 4, cudaMemcpyHostToDevice, s));
    CK(cudaMemcpyAsync(*d_labels, d.labels.data(), d.tokens * 4, cudaMemcpyHostToDevice, s));
    return s;
}

/* --selftest. Exits 0 when everything is within its tolerance, else 1. */
static int selftest(Job &J)
{
    const gpt_config &c = J.cfg;
    const step_data &d = J.steps[0];
    static Reference F;
    int *d_ids, *d_labels;
    cudaStream_t s = one_gpu_reference(F, J, &d_ids, &d_labels);
    gpt_stage cpu;
    if (gpt_stage_init(&cpu, &c, 0, c.layers, (uint64_t)J.o.seed)) { fprintf(stderr, "gpt_gpu: out of memory\n"); return 1; }
    const size_t nrec = (size_t)d.tokens * J.replay_slots * c.topk;
    int *recording, *d_bad;
    float *rec_sum;
    CK(cudaMalloc(&recording, nrec * 4)); CK(cudaMalloc(&rec_sum, nrec * 4)); CK(cudaMalloc(&d_bad, 4));
    int fails = 0;
    printf("selftest (%s): %d layers (MoE in every other one: %d experts, top-%d), width %d, %d heads, vocab %d;\n"
           "          %d sequences of %d..%d tokens packed into %d bins of %d; tolerances: loss %g, gradients %g\n",
           GPT_PRECISION, c.layers, c.experts, c.topk, c.width, c.heads, c.vocab, d.n, J.o.min_len, J.o.max_len,
           d.plan->num_bins, J.o.capacity, SELFTEST_LOSS_TOL, SELFTEST_GRAD_TOL);

    /* the data path: the GPU's packing against the host's */
    const int bad_bins = selftest_packing(F, J, d, d_ids, d_labels);
    printf("  packing: the device's ids, labels and positions of %d bins against the host's: %s\n", d.plan->num_bins,
           bad_bins ? "FAIL" : "equal");
    fails += bad_bins != 0;

    /* the routing: a GPU pass records its choices; the CPU model routes on its own */
    int bad = 0;
    CK(cudaMemsetAsync(rec_sum, 0, nrec * 4, s));
    reference_pass(F, J, d, d_ids, d_labels, nullptr, rec_sum, J.o.attn_block);
    CK(cudaMemsetAsync(d_bad, 0, 4, s));
    recording_finish_kernel<<<grid_for(nrec), 256, 0, s>>>(recording, rec_sum, nrec, c.experts, d_bad);
    std::vector<int32_t> gpu_rec(nrec), cpu_rec(nrec, -1);
    CK(cudaMemcpyAsync(gpu_rec.data(), recording, nrec * 4, cudaMemcpyDeviceToHost, s));
    CK(cudaMemcpyAsync(&bad, d_bad, 4, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    cpu_pass(J, cpu, d, NULL, cpu_rec.data(), false);
    size_t same = 0;
    for (size_t i = 0; i < nrec; i++) same += gpu_rec[i] == cpu_rec[i];
    const double agree = nrec ? (double)same / nrec : 1.0;
    printf("  routing: %zu choices recorded (%d missing); the GPU's equal the CPU model's own in %.2f%% (at least %g%%): %s\n",
           nrec, bad, 100.0 * agree, 100.0 * SELFTEST_ROUTES, !bad && agree >= SELFTEST_ROUTES ? "ok" : "FAIL");
    fails += bad || agree < SELFTEST_ROUTES;

    /* the loss and the gradients, the GPU's routes replayed on both */
    double worst = 0;
    const double cpu_loss = cpu_pass(J, cpu, d, gpu_rec.data(), NULL, true);
    for (int block : { J.o.attn_block, 4 }) {
        printf("  attention in query blocks of at most %d rows, the recorded routes replayed (pp_cuda_replay_gather):\n", block);
        const double gpu_loss = reference_pass(F, J, d, d_ids, d_labels, recording, nullptr, block);
        worst = std::max(worst, selftest_compare(F, J, cpu, gpu_loss, cpu_loss, &fails));
    }
    printf("selftest: %s (the worst gradient error %.2e, tolerance %g)\n", fails ? "FAIL" : "PASS", worst, SELFTEST_GRAD_TOL);
    gpt_stage_free(&cpu);
    reference_free(F);
    cudaFree(d_ids); cudaFree(d_labels); cudaFree(recording); cudaFree(rec_sum); cudaFree(d_bad);
    return fails ? 1 : 0;
}

/* ============================================================================================
 * --unit-costs: what a stage split in half layers is made of, for pipepar search
 * ============================================================================================ */

/* The model whole on one GPU over step 1's bins, passes after a warm-up one, an event where each
 * part starts (unit_mark): the mean forward and backward of every unit (a layer's attention, its
 * MLP), of the embedding and of the output layer with its loss, in ms per microbatch. Writes one
 * line per unit, "F B 0" (the backward runs whole: pipepar's unsplit fallback), for pipepar
 * search --layer-costs, and prints the --embedding and --loss flags that go with it, and the
 * --loss-deferred that goes with --defer-head-wgrad (the output layer's weight gradient). Returns 0; 2
 * when the file cannot be opened (before any timing); 1 when writing it fails. */
static int unit_costs(Job &J)
{
    FILE *f = fopen(J.o.unit_costs, "w");
    if (!f) {
        fprintf(stderr, "gpt_gpu: --unit-costs=%s: %s\n", J.o.unit_costs, strerror(errno));
        return 2;
    }
    const gpt_config &c = J.cfg;
    const step_data &d = J.steps[0];
    const int L = c.layers, per = 4 * L + 6, passes = 3;
    static Reference F;
    int *d_ids, *d_labels;
    cudaStream_t s = one_gpu_reference(F, J, &d_ids, &d_labels);
    reference_pass(F, J, d, d_ids, d_labels, nullptr, nullptr, J.o.attn_block);     /* warm-up */
    std::vector<cudaEvent_t> marks;
    F.M.marks = &marks;
    for (int p = 0; p < passes; p++) reference_pass(F, J, d, d_ids, d_labels, nullptr, nullptr, J.o.attn_block);
    F.M.marks = nullptr;
    CK(cudaStreamSynchronize(s));
    const int bins = d.plan->num_bins;
    if ((int)marks.size() != passes * bins * per) {
        fprintf(stderr, "gpt_gpu: --unit-costs: %zu marks, expected %d\n", marks.size(), passes * bins * per);
        exit(1);
    }
    /* per microbatch, in the order they run: embedding F; attention 0 F, MLP 0 F, ...; head F (and
     * the loss); head B: its input gradient, then its weight gradient; MLP L-1 B, attention L-1 B,
     * ...; embedding B */
    std::vector<double> t(per - 1, 0.0);
    for (int k = 0; k < passes * bins; k++)
        for (int i = 0; i + 1 < per; i++) {
            float ms;
            CK(cudaEventElapsedTime(&ms, marks[(size_t)k * per + i], marks[(size_t)k * per + i + 1]));
            t[i] += ms / (passes * bins);
        }
    for (cudaEvent_t e : marks) cudaEventDestroy(e);
    auto unit_f = [&](int u) { return t[1 + u]; };
    auto unit_b = [&](int u) { return t[4 * L + 3 - u]; };
    const double head_b = t[2 * L + 2] + t[2 * L + 3], head_w = t[2 * L + 3];
    int rc = 0;
    fprintf(f, "# gpt_gpu --unit-costs (%s): ms per microbatch of up to %d tokens, forward, backward, 0; a line per\n"
               "# unit in model order, layer l's attention then its MLP (pipepar search --layer-costs)\n",
            GPT_PRECISION, J.max_tokens);
    for (int u = 0; u < 2 * L; u++)
        fprintf(f, "%.6f %.6f 0  # layer %d %s\n", unit_f(u), unit_b(u), u / 2,
                u % 2 == 0 ? "attention" : gpt_layer_is_moe(&c, u / 2) ? "moe" : "mlp");
    if (fflush(f) != 0 || ferror(f)) rc = 1;
    if (fclose(f) != 0) rc = 1;
    if (rc) fprintf(stderr, "gpt_gpu: --unit-costs=%s: write failed: %s\n", J.o.unit_costs, strerror(errno));
    double af = 0, ab = 0, mf = 0, mb = 0;
    for (int l = 0; l < L; l++) { af += unit_f(2 * l); ab += unit_b(2 * l); mf += unit_f(2 * l + 1); mb += unit_b(2 * l + 1); }
    printf("unit costs (%s, ms per microbatch of up to %d tokens, mean of %d passes over %d microbatches):\n"
           "  attention F %.3f B %.3f, MLP F %.3f B %.3f (the mean over %d layers); embedding F %.3f B %.3f; output "
           "layer and loss F %.3f B %.3f (its weight gradient %.3f)\n", GPT_PRECISION, J.max_tokens, passes, bins, af / L,
           ab / L, mf / L, mb / L, L, t[0], t[per - 2], t[2 * L + 1], head_b, head_w);
    if (!rc) {
        std::string pattern;
        for (int l = 0; l < L; l++) pattern += gpt_layer_is_moe(&c, l) ? "*E" : "*-";
        printf("wrote %s; search with: --layer-costs '%s' --embedding %.6f,%.6f,0 --loss %.6f,%.6f,0 --hybrid '%s'\n"
               "with --defer-head-wgrad, add: --loss-deferred %.6f\n", J.o.unit_costs, J.o.unit_costs, t[0], t[per - 2],
               t[2 * L + 1], head_b, pattern.c_str(), head_w);
    }
    reference_free(F);
    cudaFree(d_ids); cudaFree(d_labels);
    return rc;
}
