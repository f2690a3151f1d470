/* mlp_gpu_adapt.h — --adapt: the blocks re-split for the GPUs' measured speeds, pipepar.h's
 * >>adapt protocol between two rounds of timed steps. Part of mlp_gpu.cu, split out to keep the
 * training example readable; included there after rank_slots, rank_time and the report.
 *
 *   1. measure  the last timed step's timeline (CUDA events around every action) gives each
 *               rank's speed, the same numbers on every rank (pp_speed_exchange: one host
 *               all-reduce over the pipeline's transport)
 *   2. plan     pp_layers_replan: the blocks split for those speeds, kept unless the slowest
 *               rank's time falls by more than 2%
 *   3. switch   every rank allocates the blocks it gains; every moved block's weights (and AdamW
 *               state) go from its old rank to its new one over the pipeline's transport
 *               (pp_layers_move); the activation slots and I->W buffers are made again for the new
 *               stage sizes. The schedule and executor stay: a kind's order fits any split, and
 *               the callbacks read the new one from the model.
 * Rounds repeat 1-3 on each new split until a split is kept (mlp_gpu.cu says why).
 * Nothing a block computes changes, so --check still compares every gradient with the single-GPU
 * run (which also shows that every weight arrived: it starts from the initial weights). */

#define ADAPT_MAX_ROUNDS 4   /* the most new splits one --adapt run switches to */

/* 1. and 2.: the speeds and the new split (next = the current one when it is kept). */
static int adapt_plan(Rank &R, std::vector<int> &next, double *gain)
{
    const Options &o = *R.o;
    pp_timeline tl;
    std::vector<double> work(R.S), speed(R.pp);
    for (int s = 0; s < R.S; s++) work[s] = R.m.count[s];
    PPCK(pp_executor_timeline(R.ex, &tl, &e_));
    PPCK(pp_speed_exchange(&R.tp, &tl, work.data(), R.S, o.timeout, speed.data(), NULL, &e_));
    pp_replan_config rc;
    memset(&rc, 0, sizeof rc);
    rc.balance.num_layers = o.layers; rc.balance.pp = R.pp; rc.balance.vpp = R.vpp;
    rc.balance.v_placement = R.sched->placement == PP_PLACEMENT_V;
    rc.balance.rank_speed = speed.data();
    rc.current = R.m.count.data();
    rc.min_gain = 0.02;
    next.assign(R.S, 0);
    PPCK(pp_layers_replan(&rc, next.data(), gain, &e_));
    if (R.lead) {
        std::string sp, was, now;
        for (int r = 0; r < R.pp; r++) {
            char one[32];
            snprintf(one, sizeof one, "%s%.3f", r ? " " : "", speed[r]);
            sp += one;
        }
        for (int s = 0; s < R.S; s++) {
            was += (s ? "," : "") + std::to_string(R.m.count[s]);
            now += (s ? "," : "") + std::to_string(next[s]);
        }
        printf("adapt: rank speeds %s (the last step's timeline); blocks per stage %s -> %s (the slowest rank "
               "%.1f%% faster%s)\n", sp.c_str(), was.c_str(), now.c_str(), 100.0 * *gain,
               *gain > 0 ? "" : ": kept, not over 2%");
        fflush(stdout);
    }
    return 0;
}

/* 3.: the blocks moved to their new ranks and the slots made for the new split. */
static int adapt_switch(Rank &R, const std::vector<int> &next)
{
    const Options &o = *R.o;
    const int L = o.layers, v = R.sched->placement == PP_PLACEMENT_V, K = R.adamw ? 6 : 2;
    const size_t wn = (size_t)R.m.F * R.m.H;
    std::vector<int> was(L), now(L), gained;
    PPCK(pp_layers_owners(R.m.count.data(), R.pp, R.vpp, v, L, was.data(), &e_));
    PPCK(pp_layers_owners(next.data(), R.pp, R.vpp, v, L, now.data(), &e_));
    for (int b = 0; b < L; b++)
        if (now[b] == R.rank && was[b] != R.rank) gained.push_back(b);
    model_init_blocks(R.m, gained, R.adamw, false);
    /* tensors of block b: W1, W2 (bf16), then AdamW's m1, v1, m2, v2 (fp32) */
    std::vector<void *> buf((size_t)L * K, nullptr);
    std::vector<size_t> bytes((size_t)L * K);
    for (int b = 0; b < L; b++) {
        void *t[6] = { R.m.W1[b], R.m.W2[b], R.m.m1[b], R.m.v1[b], R.m.m2[b], R.m.v2[b] };
        for (int k = 0; k < K; k++) { buf[(size_t)b * K + k] = t[k]; bytes[(size_t)b * K + k] = wn * (k < 2 ? 2 : 4); }
    }
    PPCK(pp_nccl_sync(R.pipe, R.stream, 0, &e_));   /* the last step is done with the weights */
    PPCK(pp_layers_move(&R.tp, was.data(), now.data(), L, K, buf.data(), bytes.data(), o.timeout, &e_));
    PPCK(pp_nccl_sync(R.pipe, R.stream, 0, &e_));   /* the moved weights have landed */
    int moved = 0;
    for (int b = 0; b < L; b++) {
        moved += was[b] != now[b];
        if (was[b] != R.rank || now[b] == R.rank) continue;
        /* sent away: the copy engines keep a peer's buffers mapped until the transport is freed,
         * so the weights wait for that (run_rank); the gradients never travelled */
        for (int k = 0; k < K; k++) R.retired.push_back(buf[(size_t)b * K + k]);
        CK(cudaFree(R.m.dW1[b])); CK(cudaFree(R.m.dW2[b]));
        R.m.bytes -= 2 * wn * 4;
        R.m.W1[b] = R.m.W2[b] = nullptr;
        R.m.dW1[b] = R.m.dW2[b] = R.m.m1[b] = R.m.v1[b] = R.m.m2[b] = R.m.v2[b] = nullptr;
    }
    /* the slots and I->W buffers of the old stage sizes give way to the new ones' */
    for (size_t i = 0; i < R.m.slots.size(); i++) {
        CK(cudaFree(R.m.slots[i]));
        R.m.bytes -= slot_size(R.m, R.m.slot_nb[i]);
    }
    for (bf16 *p : R.m.iw_bufs) { CK(cudaFree(p)); R.m.bytes -= iw_size(R.m); }
    R.m.slots.clear(); R.m.slot_nb.clear();
    R.m.iw_bufs.clear(); R.m.iw_free.clear(); R.m.iw_nb = 0;
    model_split(R.m, R.S, next.data());
    R.blocks.clear();
    for (int c = 0; c < R.vpp; c++) {
        int s = pp_rank_chunk_stage(R.sched, R.rank, c);
        for (int j = 0; j < R.m.count[s]; j++) R.blocks.push_back(R.m.first[s] + j);
    }
    PHASE(rank_slots(R));
    CK(cudaStreamSynchronize(R.stream));
    if (R.lead) {
        printf("adapt: %d block%s moved; rank %d's activation slots now %s\n", moved, moved == 1 ? "" : "s", R.rank,
               R.slot_summary.c_str());
        fflush(stdout);
    }
    return 0;
}

/* --adapt, between the timed steps and the report: *switched = the split changed. */
static int rank_adapt(Rank &R, bool *switched)
{
    std::vector<int> next;
    double gain = 0;
    *switched = false;
    PHASE(adapt_plan(R, next, &gain));
    if (gain <= 0) return 0;
    PHASE(adapt_switch(R, next));
    *switched = true;
    return 0;
}
