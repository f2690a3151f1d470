/* mlp_gpu_adapt.h — --adapt: the blocks re-split for the GPUs' measured speeds, pipepar.h's
 * >>adapt protocol between two rounds of timed steps. Part of mlp_gpu.cu, split out to keep the
 * training example readable; included there after rank_slots, rank_time and the report.
 *
 *   1. measure  the last timed step's timeline (CUDA events around every action) gives each
 *               rank's speed and one block's costs, the same numbers on every rank
 *               (pp_speed_exchange: one host all-reduce over the pipeline's transport)
 *   2. plan     a --schedule kind: pp_layers_replan, the blocks split for those speeds, kept
 *               unless the slowest rank's time falls by more than 2%. --schedule search
 *               --search-layout: pp_plan_replan, order and split searched again on the measured
 *               costs and speeds, kept unless the simulated step falls by more than 2%
 *   3. switch   every rank allocates the blocks it gains; every moved block's weights (and AdamW
 *               state) go from its old rank to its new one over the pipeline's transport
 *               (pp_layers_move); the activation slots and I->W buffers are made again for the new
 *               stage sizes. A kind's order fits any split: its schedule and executor stay, and
 *               the callbacks read the new split from the model. A searched order comes with its
 *               split: the executor is made again for it (the boundary arena kept when it fits).
 * Rounds repeat 1-3 on each new split until a split is kept (mlp_gpu.cu says why).
 * Nothing a block computes changes, so --check still compares every gradient with the single-GPU
 * run (which also shows that every weight arrived: it starts from the initial weights). */

#define ADAPT_MAX_ROUNDS 4   /* the most new splits one --adapt run switches to */

/* Which rank holds each block under a schedule and its split (stage s holds counts[s] blocks). */
static std::vector<int> block_owners(const pp_schedule *sched, const std::vector<int> &counts)
{
    std::vector<int> owner;
    for (int st = 0; st < sched->num_stages; st++)
        for (int j = 0; j < counts[st]; j++) owner.push_back(pp_stage_rank(sched, st));
    return owner;
}

/* The device bytes this rank's activation slots and I->W buffers take under a schedule and its
 * split (rank_slots makes them so). */
static size_t plan_buffer_bytes(Rank &R, const pp_schedule *sched, const std::vector<int> &counts)
{
    int nb = *std::max_element(counts.begin(), counts.end()), iw_nb = 0, awaiting = 0;
    std::vector<int> peak(nb + 1, 0), unused(nb + 1, 0);
    pp_error e;
    if (pp_schedule_rank_peaks(sched, R.rank, counts.data(), nb + 1, peak.data(), unused.data(), &e) != PP_OK ||
        pp_schedule_rank_peaks(sched, R.rank, nullptr, 1, nullptr, &awaiting, &e) != PP_OK)
        return SIZE_MAX;
    size_t bytes = 0;
    for (int c = 1; c <= nb; c++) bytes += (size_t)peak[c] * slot_size(R.m, c);
    for (int c = 0; c < sched->vpp; c++) iw_nb = std::max(iw_nb, counts[pp_rank_chunk_stage(sched, R.rank, c)]);
    if (iw_nb > 0) bytes += (size_t)awaiting * ((size_t)iw_nb * R.m.T * R.m.F + (size_t)(iw_nb - 1) * R.m.T * R.m.H) * 2;
    return bytes;
}

/* Whether every rank can hold a new plan: the blocks it gains and its new slots and I->W buffers
 * within its free device memory, with the slots and buffers of the running plan given back (a
 * searched order may keep many microbatches live on a rank that gains blocks; the search counts
 * activations, not what the device has). The same answer on every rank. */
static int plan_fits(Rank &R, const pp_schedule *sched, const std::vector<int> &next, bool *fits)
{
    const size_t wn = (size_t)R.m.F * R.m.H, per_block = wn * (2 * 2 + 2 * 4 + (R.adamw ? 4 * 4 : 0));
    std::vector<int> was = block_owners(R.sched, R.m.count), now = block_owners(sched, next);
    size_t need = plan_buffer_bytes(R, sched, next), have = plan_buffer_bytes(R, R.sched, R.m.count), gained = 0;
    size_t free_b = 0, total = 0;
    for (size_t b = 0; b < now.size(); b++) gained += now[b] == R.rank && was[b] != R.rank ? per_block : 0;
    CK(cudaMemGetInfo(&free_b, &total));
    const size_t margin = (size_t)1 << 30;   /* the executor's boundary tensors, the allocator's rounding */
    if (need != SIZE_MAX) need += gained;
    /* adapt_switch gives the running plan's buffers back before the gained blocks arrive */
    const bool mine = need != SIZE_MAX && need + margin <= free_b + have;
    float short_of = mine ? 0.0f : 1.0f;
    if (!mine && need == SIZE_MAX)
        printf("adapt: rank %d: the new plan's buffers could not be counted\n", R.rank);
    else if (!mine)
        printf("adapt: rank %d: the new plan needs %.2f GiB for the blocks it gains, its slots and I->W buffers, with "
               "1 GiB to spare; %.2f GiB are free with the running plan's buffers given back\n", R.rank,
               need / 1073741824.0, (free_b + have) / 1073741824.0);
    PPCK(pp_nccl_all_reduce_host(R.pipe, &short_of, 1, R.o->timeout, &e_));
    *fits = short_of == 0.0f;
    if (R.lead && !*fits)
        printf("adapt: the new plan does not fit in the device memory of %d rank%s: the running one is kept\n",
               (int)short_of, short_of > 1 ? "s" : "");
    return 0;
}

/* 1. and 2.: the speeds and the new split (next = the current one when it is kept); with a
 * searched order, *plan gets the new plan (NULL when the current one is kept). */
static int adapt_plan(Rank &R, std::vector<int> &next, double *gain, pp_plan **plan)
{
    const Options &o = *R.o;
    pp_timeline tl;
    pp_layer_costs layer;
    std::vector<double> work(R.S), speed(R.pp);
    std::vector<int> refused;       /* a searched plan's split that does not fit the devices */
    double refused_gain = 0;
    for (int s = 0; s < R.S; s++) work[s] = R.m.count[s];
    *plan = nullptr;
    PPCK(pp_executor_timeline(R.ex, &tl, &e_));
    PPCK(pp_speed_exchange(&R.tp, &tl, work.data(), R.S, o.timeout, speed.data(), &layer, &e_));
    if (o.search_layout) {   /* the plan's own config, on the measured costs and speeds */
        pp_plan_config pc;
        std::vector<char> csv;
        std::vector<pp_layer_costs> per_block;
        PHASE(plan_config(R, pc, csv, per_block));
        for (int b = 0; b < o.layers; b++) {   /* block 0's I is one GEMM, as plan_config has it */
            per_block[b].f = layer.f; per_block[b].i = b == 0 ? 0.5 * layer.i : layer.i; per_block[b].w = layer.w;
        }
        pc.costs.f = layer.f; pc.costs.i = layer.i; pc.costs.w = layer.w;
        pc.costs.p2p_latency *= layer.f;   /* plan_config's is in units of a block's forward */
        pc.costs.rank_speed = speed.data();
        PPCK(pp_plan_replan(&pc, R.sched, R.m.count.data(), 0.02, plan, gain, &e_));
        next = *plan ? std::vector<int>((*plan)->layers->count, (*plan)->layers->count + (*plan)->layers->num_stages)
                     : R.m.count;
        bool fits = true;
        if (*plan) PHASE(plan_fits(R, (*plan)->schedule, next, &fits));
        if (!fits) {
            refused = next;
            refused_gain = *gain;
            pp_plan_free(*plan);
            *plan = nullptr;
            *gain = 0;
            next = R.m.count;
        }
    } else {
        pp_replan_config rc;
        memset(&rc, 0, sizeof rc);
        rc.balance.num_layers = o.layers; rc.balance.pp = R.pp; rc.balance.vpp = R.vpp;
        rc.balance.v_placement = R.sched->placement == PP_PLACEMENT_V;
        rc.balance.rank_speed = speed.data();
        rc.current = R.m.count.data();
        rc.min_gain = 0.02;
        next.assign(R.S, 0);
        PPCK(pp_layers_replan(&rc, next.data(), gain, &e_));
    }
    if (R.lead) {
        std::string sp, was, now;
        for (int r = 0; r < R.pp; r++) {
            char one[32];
            snprintf(one, sizeof one, "%s%.3f", r ? " " : "", speed[r]);
            sp += one;
        }
        const std::vector<int> &shown = refused.empty() ? next : refused;
        const double g = refused.empty() ? *gain : refused_gain;
        for (int s = 0; s < R.S; s++) was += (s ? "," : "") + std::to_string(R.m.count[s]);
        for (size_t s = 0; s < shown.size(); s++) now += (s ? "," : "") + std::to_string(shown[s]);
        printf("adapt: rank speeds %s (the last step's timeline); blocks per stage %s -> %s (%s %.1f%% faster%s)\n",
               sp.c_str(), was.c_str(), now.c_str(), o.search_layout ? "the simulated step" : "the slowest rank",
               100.0 * g, !refused.empty() ? ", but it does not fit: kept" : *plan && g <= 0 ? ": the running plan "
               "is over --max-memory" : g > 0 ? "" : ": kept, not over 2%");
        if (*plan) print_search(R, *plan);
        fflush(stdout);
    }
    if (*plan) (*plan)->costs.rank_speed = nullptr;   /* speed is this function's */
    return 0;
}

/* A searched plan's schedule (taken: this call owns it) in place of the running one: a new
 * executor (and event timer) for it, the boundary arena kept when the new plan's peak fits in it
 * (else kept aside for the transport's lifetime, as moved weights are, and a larger one made),
 * and the input or targets where this rank now holds the first or last stage. Between steps,
 * with nothing in flight. */
static int adapt_take_schedule(Rank &R, pp_schedule *sched, const char *name)
{
    const Options &o = *R.o;
    pp_executor_free(R.ex);
    R.ex = nullptr;
    pp_nccl_timer_free(&R.timer);
    pp_schedule_free(R.sched);
    R.sched = sched;
    snprintf(R.sched_name, sizeof R.sched_name, "%s", name);
    R.S = R.sched->num_stages;
    R.vpp = R.sched->vpp;
    R.maxlen = 0;
    R.split = 0;
    for (int r = 0; r < R.pp; r++) {
        R.maxlen = std::max(R.maxlen, R.sched->length[r]);
        for (int i = 0; i < R.sched->length[r]; i++) R.split |= R.sched->actions[r][i].op == PP_OP_I;
    }
    bool first = false, last = false;
    for (int c = 0; c < R.vpp; c++) {
        int st = pp_rank_chunk_stage(R.sched, R.rank, c);
        first |= st == 0;
        last |= st == R.S - 1;
    }
    model_data(R.m, first && !R.m.inputs, last && !R.m.targets);
    R.first = first;
    R.last = last;
    R.m.saved.assign((size_t)R.vpp * o.mb, -1);
    R.m.iw_of.assign((size_t)R.vpp * o.mb, -1);
    PHASE(rank_executor(R));
    pp_executor_stats stats;
    pp_executor_get_stats(R.ex, &stats);
    size_t tb = ((size_t)R.m.T * R.m.H * sizeof(bf16) + 255) & ~(size_t)255;
    size_t need = tb * (size_t)(stats.planned_slots > 0 ? stats.planned_slots : 1);
    if (need > R.arena_bytes) {   /* a peer may still map the old one: it goes with the transport */
        R.retired.push_back(R.arena);
        R.arena_bytes = need;
        R.arena = (char *)dev_alloc(R.m, R.arena_bytes);
    }
    R.arena_used = 0;
    return 0;
}

/* 3.: the blocks moved to their new ranks and the slots made for the new split (with a searched
 * order, sched is the new schedule, which takes the running one's place: this call owns it). */
static int adapt_switch(Rank &R, const std::vector<int> &next, pp_schedule *sched, const char *name)
{
    const Options &o = *R.o;
    const int L = o.layers, K = R.adamw ? 6 : 2;
    const size_t wn = (size_t)R.m.F * R.m.H;
    std::vector<int> was = block_owners(R.sched, R.m.count), now = block_owners(sched ? sched : R.sched, next);
    std::vector<int> gained;
    for (int b = 0; b < L; b++)
        if (now[b] == R.rank && was[b] != R.rank) gained.push_back(b);
    /* the slots and I->W buffers of the old stage sizes give way first (the gained blocks need
     * the room; the new ones' are made below, for the new split) */
    PHASE(release_slots(R));
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
    if (sched) PHASE(adapt_take_schedule(R, sched, name));
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

/* A split that ran: its blocks per stage, its schedule (a searched order's, copied; NULL for a
 * kind, whose order stays) and name, and its measured step (the same number on every rank). */
struct Tried {
    std::vector<int> counts;
    pp_schedule *sched = nullptr;
    std::string name;
    double step = 0;
};

/* Whether two schedules run the same actions in the same order on every rank. */
static bool same_order(const pp_schedule *a, const pp_schedule *b)
{
    if (!a || !b || a->pp != b->pp || a->num_stages != b->num_stages || a->placement != b->placement) return false;
    for (int r = 0; r < a->pp; r++)
        if (a->length[r] != b->length[r] ||
            memcmp(a->actions[r], b->actions[r], (size_t)a->length[r] * sizeof(pp_action)) != 0)
            return false;
    return true;
}

/* The timed steps' median, the same on every rank (their mean over the pipeline): rounds decide
 * by it, and every rank must decide alike. */
static int agreed_step(Rank &R, const Timing &T, double *step)
{
    float v = (float)median(T.times);
    PPCK(pp_nccl_all_reduce_host(R.pipe, &v, 1, R.o->timeout, &e_));
    *step = (double)v / R.pp;
    return 0;
}

/* The running split into tried[], once its steps are timed. */
static int adapt_note(Rank &R, const Timing &T, std::vector<Tried> &tried)
{
    Tried t;
    t.counts = R.m.count;
    t.name = R.sched_name;
    if (R.o->search_layout) PPCK(pp_schedule_copy(R.sched, &t.sched, &e_));
    PHASE(agreed_step(R, T, &t.step));
    tried.push_back(t);
    return 0;
}

/* One round: measure and plan; switch unless the plan keeps the running split or returns to one
 * already run (the measured speeds swing with the split, since a rank that waits clocks higher:
 * rounds can go to and fro). *switched = the split changed. */
static int rank_adapt(Rank &R, const std::vector<Tried> &tried, bool *switched)
{
    std::vector<int> next;
    double gain = 0;
    pp_plan *plan = nullptr;
    *switched = false;
    PHASE(adapt_plan(R, next, &gain, &plan));
    if (gain <= 0 && !plan) return 0;
    for (const Tried &t : tried)
        if (t.counts == next && (!plan || same_order(t.sched, plan->schedule))) {
            if (R.lead) printf("adapt: that split and order ran in an earlier round (%.1f ms): no switch\n", t.step * 1e3);
            pp_plan_free(plan);
            return 0;
        }
    pp_schedule *sched = plan ? plan->schedule : nullptr;
    if (plan) plan->schedule = nullptr;
    int rc = adapt_switch(R, next, sched, plan ? plan->name : "");
    pp_plan_free(plan);
    if (rc) return rc;
    *switched = true;
    return 0;
}

/* --adapt, between the timed steps and the report: rounds of measure, plan and switch until a
 * split is kept (or one already run comes back, or ADAPT_MAX_ROUNDS), then the fastest split
 * measured, if that is not the running one. T and M are the last timed steps' and their report. */
static int rank_adapt_rounds(Rank &R, Timing &T, Measured &M)
{
    std::vector<Tried> tried;
    int rounds = 0;
    PHASE(adapt_note(R, T, tried));
    const double before = tried[0].step;
    for (bool switched = true; switched && rounds < ADAPT_MAX_ROUNDS;) {
        PHASE(rank_adapt(R, tried, &switched));
        if (!switched) break;
        rounds++;
        T = Timing();
        M = Measured();
        PHASE(rank_time(R, T));
        PHASE(rank_measure(R, T, M));
        PHASE(adapt_note(R, T, tried));
        if (R.lead) printf("adapt: round %d: step %.1f ms\n", rounds, tried.back().step * 1e3);
    }
    size_t best = 0;
    for (size_t k = 1; k < tried.size(); k++)
        if (tried[k].step < tried[best].step) best = k;
    if (best + 1 != tried.size()) {   /* back to the fastest that ran */
        const Tried &b = tried[best];
        pp_schedule *sched = nullptr;
        if (b.sched) PPCK(pp_schedule_copy(b.sched, &sched, &e_));
        if (R.lead) {
            std::string was;
            for (size_t s = 0; s < b.counts.size(); s++) was += (s ? "," : "") + std::to_string(b.counts[s]);
            printf("adapt: back to blocks per stage %s, the fastest of the %zu splits run (%.1f ms)\n", was.c_str(),
                   tried.size(), b.step * 1e3);
        }
        PHASE(adapt_switch(R, b.counts, sched, b.name.c_str()));
        T = Timing();
        M = Measured();
        PHASE(rank_time(R, T));
        PHASE(rank_measure(R, T, M));
        PHASE(adapt_note(R, T, tried));
    }
    if (R.lead) {
        std::string now;
        for (int s = 0; s < R.S; s++) now += (s ? "," : "") + std::to_string(R.m.count[s]);
        printf("adapt: runs blocks per stage %s (%s)\n", now.c_str(),
               R.sched_name[0] ? R.sched_name : pp_schedule_kind_name(R.sched->kind));
        printf("adapt: step %.1f ms before, %.1f ms after%s\n", before * 1e3, tried.back().step * 1e3,
               rounds ? "" : " (the split kept)");
    }
    for (Tried &t : tried) pp_schedule_free(t.sched);
    return 0;
}
