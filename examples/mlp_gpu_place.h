/* mlp_gpu_place.h — placement by speed for examples/mlp_gpu.cu (--place-by-speed): every GPU of
 * the pipeline times the model's largest GEMM at once, pp_place_by_simulation finds the
 * assignment of GPUs to ranks whose simulated step is shortest, and pp_nccl_reorder renumbers the
 * pipeline so. Part of mlp_gpu.cu, split out to keep the training example readable; included
 * there after the Rank definition and the PPCK macro it uses. */

/* --place-by-speed: the mean time of the model's fwd2 GEMM (H x T x 4H, bf16) on this GPU over
 * 1.5 s, after 2 s of the same work, so that the GPU runs at the clock its power cap allows it in
 * a step rather than a cold one's: GPUs of one host differ by about 1%, which a shorter
 * measurement can miss. Every rank runs it at once (the caller's barrier). */
static double measure_gpu_ms(const Options &o, int device)
{
    const int H = o.hidden, T = o.tokens, F = 4 * H, batch = 20;
    const double warm_s = 2.0, measure_s = 1.5;
    bf16 *A, *B, *C;
    cublasHandle_t h;
    cudaStream_t s;
    cudaEvent_t e0, e1;
    float alpha = 1, beta = 0, ms = 0;
    double total_ms = 0, t0;
    long gemms = 0;
    CK(cudaSetDevice(device));
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaMalloc(&A, (size_t)H * F * 2)); CK(cudaMalloc(&B, (size_t)F * T * 2)); CK(cudaMalloc(&C, (size_t)H * T * 2));
    init_kernel<<<grid_for((size_t)H * F), 256, 0, s>>>(A, (size_t)H * F, 11, 0.02f);
    init_kernel<<<grid_for((size_t)F * T), 256, 0, s>>>(B, (size_t)F * T, 12, 0.02f);
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) { fprintf(stderr, "mlp_gpu: cublasCreate failed\n"); exit(1); }
    cublasSetStream(h, s);
    auto run = [&](int n) {
        for (int i = 0; i < n; i++)
            if (cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, H, T, F, &alpha, A, CUDA_R_16BF, H, B, CUDA_R_16BF, F, &beta,
                             C, CUDA_R_16BF, H, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS) {
                fprintf(stderr, "mlp_gpu: cublasGemmEx failed\n");
                exit(1);
            }
    };
    t0 = now_s();
    while (now_s() - t0 < warm_s) { run(batch); CK(cudaStreamSynchronize(s)); }
    t0 = now_s();
    while (now_s() - t0 < measure_s) {
        CK(cudaEventRecord(e0, s));
        run(batch);
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&ms, e0, e1));
        total_ms += ms;
        gemms += batch;
    }
    cublasDestroy(h);
    CK(cudaEventDestroy(e0)); CK(cudaEventDestroy(e1));
    CK(cudaFree(A)); CK(cudaFree(B)); CK(cudaFree(C));
    CK(cudaStreamDestroy(s));
    return total_ms / (double)gemms;
}

/* 3. place (--place-by-speed): each GPU on the rank where the simulated step is shortest, the
 *    schedule simulated with the model's costs (block_costs: a block's F = I = W, block 0's I
 *    half; the transfers as the search prices them) and each rank at its GPU's measured speed.
 *    A slower GPU goes where the schedule leaves the most slack (ranks with the same work differ
 *    there), the rank with the most GEMMs (6 a block and microbatch; block 0 skips its input
 *    gradient, one fewer) on a fast one. One host only: renumbered across nodes, pipeline
 *    neighbours could land on other hosts. */
static int rank_place(Rank &R, const pp_layers *lay)
{
    const Options &o = *R.o;
    const int pp = R.pp, S = R.S;
    if (!o.place_by_speed) return 0;
    std::vector<float> host(pp, 0.0f);
    char name[256] = "";
    unsigned hash = 2166136261u;   /* FNV-1a, 24 bits: exact in a float */
    bool one_host = true;
    gethostname(name, sizeof name - 1);
    for (const char *c = name; *c; c++) hash = (hash ^ (unsigned char)*c) * 16777619u;
    host[pp_nccl_rank(R.pipe)] = (float)(hash & 0xffffffu);
    PPCK(pp_nccl_all_reduce_host(R.pipe, host.data(), pp, o.timeout, &e_));
    for (int g = 1; g < pp; g++) one_host = one_host && host[g] == host[0];
    if (!one_host) {
        if (R.lead) printf("placement by speed: the ranks are on more than one host; kept as launched (renumbered, "
                           "pipeline neighbours could land on other hosts)\n");
        return 0;
    }
    std::vector<double> load(pp, 0.0), gpu(pp, 0.0);
    std::vector<float> shared(pp, 0.0f);
    std::vector<int> rank_of(pp);
    double gain = 0;
    for (int st = 0; st < S; st++)
        load[pp_stage_rank(R.sched, st)] += 6.0 * (lay ? lay->count[st] : o.layers / S) - (st == 0 ? 1 : 0);
    if (o.gpu_ms) {
        const char *p = o.gpu_ms;
        for (int g = 0; g < pp; g++) {
            char *end;
            double x = strtod(p, &end);
            if (end == p || !(x > 0) || (g + 1 < pp ? *end != ',' : *end != '\0')) {
                if (R.lead) fprintf(stderr, "mlp_gpu: --gpu-ms=%s: expected %d positive numbers, comma-separated\n", o.gpu_ms, pp);
                return 2;
            }
            shared[g] = (float)x;
            p = end + 1;
        }
    } else {
        PPCK(pp_nccl_barrier(R.pipe, o.timeout, &e_));
        shared[pp_nccl_rank(R.pipe)] = (float)measure_gpu_ms(o, pp_nccl_device(R.pipe));
        PPCK(pp_nccl_all_reduce_host(R.pipe, shared.data(), pp, o.timeout, &e_));
    }
    for (int g = 0; g < pp; g++) gpu[g] = shared[g];
    /* each stage's costs from its blocks' (block_costs), the transfers as the search prices them */
    std::vector<pp_layer_costs> blocks;
    std::vector<double> storage(5 * (size_t)S);
    pp_sim_costs per_block, c;
    memset(&per_block, 0, sizeof per_block);
    per_block.f = per_block.i = per_block.w = 1;
    search_transfers(o, &per_block);
    block_costs(o, blocks);
    if (lay) PPCK(pp_plan_stage_costs(lay, &per_block, blocks.data(), storage.data(), &c, &e_));
    else {   /* no split: each rank's share of the blocks alike */
        c = per_block;
        c.f = c.i = c.w = (double)o.layers / pp;
    }
    /* any simulated gain moves the ranks: a wrong call on noise costs what the GPUs differ by,
     * which is then little */
    PPCK(pp_place_by_simulation(R.sched, &c, gpu.data(), 0.0005, rank_of.data(), &gain, &e_));
    if (R.lead) {   /* even with --quiet, as the search's choice */
        printf("placement by speed: fwd2 GEMM");
        for (int g = 0; g < pp; g++) printf(" %.4f", gpu[g]);
        printf(" ms by process; GEMMs per rank");
        for (int r = 0; r < pp; r++) printf(" %.0f", load[r] * o.mb);
        printf(";");
        for (int g = 0; g < pp; g++) printf(" process %d -> rank %d%s", g, rank_of[g], g + 1 < pp ? "," : "");
        printf(" (simulated step %.2f%% shorter)\n", 100 * gain);
    }
    if (gain > 0) {   /* the same decision on every rank: the same inputs */
        pp_nccl *renumbered = nullptr;
        PPCK(pp_nccl_reorder(R.pipe, rank_of[R.rank], &renumbered, &e_));
        pp_nccl_free(R.pipe);
        R.pipe = renumbered;
        if (rank_of[R.rank] != R.rank)   /* this process's messages name its pipeline rank from here on */
            fprintf(stderr, "mlp_gpu: process %d runs pipeline rank %d (placement by speed)\n", R.rank, rank_of[R.rank]);
        R.rank = rank_of[R.rank];   /* R.lead, the process that prints, stays world rank 0 */
    }
    return 0;
}
