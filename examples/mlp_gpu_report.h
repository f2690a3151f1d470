/* mlp_gpu_report.h — what examples/mlp_gpu.cu reports about its timed steps: the step and its
 * efficiency, the simulator run on the measured compute (per stage, then per action, with
 * transfers free, at the measured bandwidth, and grouped as posted), each rank's compute and
 * memory, the transfers, where the last step's time went (pp_timeline_idle) and its trace.
 * Part of mlp_gpu.cu, split out to keep the training example readable; included there after the
 * Rank and Timing definitions and the PPCK macro it uses. Every rank runs rank_measure and
 * rank_where (each all-reduce needs all ranks); the lead prints. */

/* What rank_measure made of the last step, for the report. */
struct Measured {
    pp_timeline tl;                            /* this rank's, from the executor */
    double span = 0;                           /* the end of its compute, from the step's start */
    std::vector<float> busy_of;                /* each rank's compute time, s */
    std::vector<float> step_busy;              /* [rank * steps + step]: each rank's compute in each timed step */
    float mem_alloc = 0, mem_used = 0;         /* the most of any rank, GiB */
    double sim_step = 0;                       /* simulated on per-stage compute, transfers free */
    double sim_free = 0, sim_action = 0, sim_grouped = 0;   /* simulated on each action's time: transfers
                                                  free, p2p_s each, and grouped as posted */
    double sim_bound = 0;                      /* what no order of those actions beats (p2p_s each) */
    double p2p_s = 0;                          /* one boundary tensor at the best group bandwidth */
    double bytes_moved = 0, xfer_time = 0, best_bw = 0;   /* this rank's transfer groups */
    bool has_fb = false;                       /* FB actions run as F then B inside one action */
};

/* The simulator again, with every action's own measured time (they drift within a step: the GPUs
 * run at their power cap, so later actions are slower than early ones): with every transfer free
 * (what communication adds to the step is the measured step less this: a rank that waits for a
 * transfer while the other rank is the bottleneck adds nothing), with each transfer at the best
 * bandwidth any rank's group reached, and with the transfers grouped as the runtime posts them. */
static int rank_simulate_actions(Rank &R, Measured &M)
{
    const Options &o = *R.o;
    const int pp = R.pp, world = R.world;
    const pp_timeline &tl = M.tl;
    for (int i = 0; i < tl.length; i++) M.has_fb = M.has_fb || tl.actions[i].op == PP_OP_FB;
    std::vector<int> aoff(pp + 1, 0);
    for (int r = 0; r < pp; r++) aoff[r + 1] = aoff[r] + R.sched->length[r];
    std::vector<float> adur(aoff[pp] + 1, 0.0f);
    for (int i = 0; i < tl.length; i++)
        if (tl.actions[i].op <= PP_OP_FB && tl.ready[i] >= 0) adur[aoff[R.rank] + i] = (float)(tl.end[i] - tl.ready[i]);
    PPCK(pp_nccl_all_reduce_host(R.pipe, adur.data(), (int)adur.size(), 0, &e_));
    std::vector<std::vector<double>> acost(pp);
    std::vector<const double *> aptr(pp);
    for (int r = 0; r < pp; r++) {
        acost[r].assign(R.sched->length[r] + 1, 0.0);
        for (int i = 0; i < R.sched->length[r]; i++) acost[r][i] = adur[aoff[r] + i];
        aptr[r] = acost[r].data();
    }
    pp_sim_costs ac;
    pp_sim_result *sim = NULL;
    memset(&ac, 0, sizeof ac);
    ac.action_cost = aptr.data();
    PPCK(pp_simulate(R.sched, &ac, &sim, &e_));
    M.sim_free = sim->makespan;
    pp_sim_result_free(sim);
    /* the best group of any rank: a group's time includes its wait for the peer, and in some
     * schedules every group of one rank waits a little */
    std::vector<float> bw_of(world, 0.0f);
    bw_of[R.rank] = (float)(M.best_bw / 1e9);
    PPCK(pp_nccl_all_reduce_host(R.pipe, bw_of.data(), world, 0, &e_));
    double bw = 0;
    for (int r = 0; r < world; r++) bw = std::max(bw, (double)bw_of[r] * 1e9);
    M.p2p_s = bw > 0 ? (double)o.tokens * o.hidden * sizeof(bf16) / bw : 0;
    ac.p2p_latency = M.p2p_s;
    PPCK(pp_simulate(R.sched, &ac, &sim, &e_));
    M.sim_action = sim->makespan;
    M.sim_bound = sim->bound;
    pp_sim_result_free(sim);
    ac.grouped = R.tp.independent_peers ? 2 : 1;   /* as posted: a group ends as a whole, after the one
                                                      before it on its stream (a peer's, or the rank's) */
    PPCK(pp_simulate(R.sched, &ac, &sim, &e_));
    M.sim_grouped = sim->makespan;
    pp_sim_result_free(sim);
    return 0;
}

/* 6. report, measured part: every rank's compute per stage, its busy time and memory, summed over
 *    the pipeline, and the simulator run on them (all ranks take part in each all-reduce). */
static int rank_measure(Rank &R, const Timing &T, Measured &M)
{
    const int S = R.S, world = R.world, rank = R.rank;
    PPCK(pp_executor_timeline(R.ex, &M.tl, &e_));
    const pp_timeline &tl = M.tl;
    /* per-stage compute: F, B, I, W durations summed, and their counts */
    std::vector<float> red(8 * S + 4, 0.0f);
    double busy = 0, last_end = -1e300;
    for (int i = 0; i < tl.length; i++) {
        int op = tl.actions[i].op;
        if (op > PP_OP_FB || tl.ready[i] < 0) continue;
        double d = tl.end[i] - tl.ready[i];
        busy += d;
        last_end = std::max(last_end, tl.end[i]);
        if (op == PP_OP_FB) continue;   /* an overlapped F&B: the stage costs come from plain F and B */
        int col = op == PP_OP_F ? 0 : op == PP_OP_B ? 1 : op == PP_OP_I ? 2 : 3;
        red[4 * tl.actions[i].stage + col] += (float)d;
        red[4 * S + 4 * tl.actions[i].stage + col] += 1;
    }
    M.span = last_end - T.last_t0;   /* this rank's compute span end, from the step start */
    red[8 * S] = (float)M.span;
    red[8 * S + 1] = (float)busy;
    red[8 * S + 2] = (float)(R.m.peak_bytes / 1073741824.0);
    {
        size_t free_b, total_b;
        CK(cudaMemGetInfo(&free_b, &total_b));
        red[8 * S + 3] = (float)((total_b - free_b) / 1073741824.0);
    }
    const float mem_alloc_mine = red[8 * S + 2], mem_used_mine = red[8 * S + 3];
    PPCK(pp_nccl_all_reduce_host(R.pipe, red.data(), (int)red.size(), 0, &e_));
    M.busy_of.assign(world, 0.0f);   /* each rank's compute time: shows a slow rank */
    M.busy_of[rank] = (float)busy;
    PPCK(pp_nccl_all_reduce_host(R.pipe, M.busy_of.data(), world, 0, &e_));
    const int nsteps = (int)T.busy.size();
    M.step_busy.assign((size_t)world * nsteps, 0.0f);
    for (int i = 0; i < nsteps; i++) M.step_busy[(size_t)rank * nsteps + i] = (float)T.busy[i];
    PPCK(pp_nccl_all_reduce_host(R.pipe, M.step_busy.data(), world * nsteps, 0, &e_));
    std::vector<float> mem_of(2 * (size_t)world, 0.0f);   /* the sum reduces: each rank fills its own pair */
    mem_of[2 * rank] = mem_alloc_mine; mem_of[2 * rank + 1] = mem_used_mine;
    PPCK(pp_nccl_all_reduce_host(R.pipe, mem_of.data(), 2 * world, 0, &e_));
    for (int r = 0; r < world; r++) { M.mem_alloc = std::max(M.mem_alloc, mem_of[2 * r]); M.mem_used = std::max(M.mem_used, mem_of[2 * r + 1]); }
    printf("rank %d peak memory: %.2f GiB allocated by the program, %.2f GiB in use on the device\n", rank,
           (double)mem_alloc_mine, (double)mem_used_mine);
    /* the simulator on the measured per-stage compute, transfers free */
    std::vector<double> fst(S), bst(S), ist(S), wst(S);
    for (int s = 0; s < S; s++) {
        auto avg = [&](int col) { return red[4 * S + 4 * s + col] > 0 ? red[4 * s + col] / red[4 * S + 4 * s + col] : 0.0; };
        fst[s] = avg(0); bst[s] = avg(1); ist[s] = avg(2); wst[s] = avg(3);
        if (R.split) bst[s] = ist[s] + wst[s];
    }
    pp_sim_costs costs;
    pp_sim_result *sim = NULL;
    memset(&costs, 0, sizeof costs);
    costs.f = fst[0] > 0 ? fst[0] : 1e-3;
    costs.f_stage = fst.data();
    costs.b_stage = bst.data();
    if (R.split) { costs.i_stage = ist.data(); costs.w_stage = wst.data(); }
    PPCK(pp_simulate(R.sched, &costs, &sim, &e_));
    M.sim_step = sim->makespan;
    pp_sim_result_free(sim);
    /* transfers of the last step: bytes and device time of every group (its begin is when the
     * communication stream may start it: the compute that produced its data is done); the
     * link's speed from groups that send (a copy-engine group that only receives is timed by
     * its local copy out of the ring, once the bytes are there) */
    for (int g = 0; g < T.ngroups; g++) {
        double dt = T.groups[g].end - T.groups[g].begin;
        double b = (double)std::max(T.groups[g].bytes_sent, T.groups[g].bytes_received);
        M.bytes_moved += (double)(T.groups[g].bytes_sent + T.groups[g].bytes_received);
        M.xfer_time += dt;
        if (dt > 0 && T.groups[g].bytes_sent > 0 && b / dt > M.best_bw) M.best_bw = b / dt;
    }
    return rank_simulate_actions(R, M);
}

/* The lead's summary of the timed steps: the step, its efficiency, the simulator's view of it,
 * each rank's compute, the transfers, memory. */
static void report_print(Rank &R, const Timing &T, const Measured &M, double single_s)
{
    const Options &o = *R.o;
    const int pp = R.pp, vpp = R.vpp, world = R.world;
    double step = median(T.times), step_min = *std::min_element(T.times.begin(), T.times.end()), last = T.times.back();
    double flop = 6.0 * 2.0 * o.tokens * (double)o.hidden * 4.0 * o.hidden * o.layers * o.mb;
    double ideal = (double)o.mb * vpp / ((double)o.mb * vpp + pp - 1);
    printf("pipeline %-14s pp %d vpp %d mb %d  step %8.1f ms (min %8.1f)  %6.1f TFLOP/s/gpu  loss %.5f\n",
           pp_schedule_kind_name(R.sched->kind), pp, vpp, o.mb, step * 1e3, step_min * 1e3, flop / step / world / 1e12,
           (double)T.loss);
    if (single_s > 0)
        printf("  efficiency %.1f%% (single %.1f ms / pp / step)   textbook mb*vpp/(mb*vpp+pp-1) %.1f%%\n",
               100.0 * single_s / pp / step, single_s * 1e3, 100.0 * ideal);
    printf("  simulator with measured compute (free transfers): %.1f ms; measured compute span %.1f ms; "
           "exposed transfer + overhead %.2f%% of the step\n",
           M.sim_step * 1e3, M.span * 1e3, 100.0 * std::max(0.0, M.span - M.sim_step) / step);
    printf("  simulator with each action's measured time, transfers %.2f ms each: %.1f ms (no order of these "
           "actions beats %.1f); that step took %.1f ms, %.2f%% more (%.1f ms with the transfers grouped as posted)\n",
           M.p2p_s * 1e3, M.sim_action * 1e3, M.sim_bound * 1e3, last * 1e3, 100.0 * (last - M.sim_action) / M.sim_action,
           M.sim_grouped * 1e3);
    printf("  exposed on the critical path: each action as measured with every transfer free takes %.1f ms; "
           "transfers, waits and launch gaps added %.1f ms, %.2f%% of that step%s\n", M.sim_free * 1e3,
           (last - M.sim_free) * 1e3, 100.0 * (last - M.sim_free) / last,
           M.has_fb ? " (an FB's B half waits inside its action: this counts it as compute)" : "");
    /* step to step: a step that is slower with the same compute waited (the host, a transfer);
       one whose busiest rank computed longer ran at lower clocks */
    const int nsteps = (int)T.times.size();
    if (single_s > 0 && nsteps > 0 && M.step_busy.size() == (size_t)world * nsteps) {
        /* the medians over the timed steps, as the step is: the busiest rank's compute bounds the
         * step, and what the steps took beyond it is waiting (start-up, drain, transfers) */
        std::vector<double> most(nsteps, 0.0), over(nsteps, 0.0);
        for (int i = 0; i < nsteps; i++) {
            for (int r = 0; r < world; r++) most[i] = std::max(most[i], (double)M.step_busy[(size_t)r * nsteps + i]);
            over[i] = T.times[i] - most[i];
        }
        double busiest = median(most);
        printf("  bound: the busiest rank computed %.1f ms (median of the timed steps), so with this compute no step "
               "is faster than %.1f%%; the steps took %.1f ms more (median)\n", busiest * 1e3,
               100.0 * single_s / pp / busiest, median(over) * 1e3);
    }
    printf("  compute busy per rank in the last step (ms of %.1f):", last * 1e3);
    for (int r = 0; r < world; r++) printf(" %.1f", M.busy_of[r] * 1e3);
    printf("\n  each timed step, ms, and each rank's compute in it:");
    for (int i = 0; i < nsteps; i++) {
        printf(" %.1f (", T.times[i] * 1e3);
        for (int r = 0; r < world; r++) printf("%s%.1f", r ? " " : "", M.step_busy[(size_t)r * nsteps + i] * 1e3);
        printf(")");
    }
    printf("\n  rank %d transfers: %d groups, %.0f MiB, best %.1f GB/s per group, %.1f ms on the comm stream%s\n",
           R.rank, T.ngroups, M.bytes_moved / 1048576.0, M.best_bw / 1e9, M.xfer_time * 1e3,
           o.send_parts > 1 ? " (sends streamed: a group counts from the end of its compute, as its receiver waits)" : "");
    if (o.copy_engine) {
        long long how[3] = { 0, 0, 0 };
        pp_error e;
        long long streamed = 0;
        if (pp_nccl_transport_copy_engine_counts(&R.tp, how, &e) == PP_OK && how[0] + how[1] + how[2] > 0 &&
            pp_nccl_transport_streamed_sends(&R.tp, &streamed, &e) == PP_OK)
            printf("  rank %d copy-engine transfers (every step): %lld pushed (receive posted first), %lld pulled "
                   "(send posted first), %lld through the ring; %lld sends streamed\n", R.rank, how[0], how[1], how[2],
                   streamed);
    }
    printf("  peak memory (max over ranks): %.2f GiB allocated by the program, %.2f GiB in use on the device\n",
           (double)M.mem_alloc, (double)M.mem_used);
    fflush(stdout);
}

/* Where the lead's timelines go: each idle stretch of every rank by what ended it (the peer's
 * compute, the schedule's bubble; a transfer after the peer had computed, communication not
 * hidden; or neither), and with --trace the Perfetto file. */
static int report_where(Rank &R, std::vector<pp_timeline> &tls)
{
    const Options &o = *R.o;
    const int pp = R.pp;
    std::vector<pp_idle> idle(pp);
    pp_error e0;
    if (pp_timeline_idle(tls.data(), pp, idle.data(), &e0) == PP_OK) {
        double worst_xfer = 0;
        printf("  where the last step went, ms = compute + waiting for the peer's compute + for transfers + "
               "other gaps + tail:\n");
        for (int r = 0; r < pp; r++) {
            printf("    rank %d: %.1f = %.1f + %.1f + %.2f + %.2f + %.1f\n", r, idle[r].step * 1e3,
                   idle[r].busy * 1e3, idle[r].wait_compute * 1e3, idle[r].wait_transfer * 1e3,
                   idle[r].wait_other * 1e3, idle[r].tail * 1e3);
            worst_xfer = std::max(worst_xfer, idle[r].wait_transfer);
        }
        printf("  exposed transfer (the most of any rank): %.2f ms, %.2f%% of the step\n", worst_xfer * 1e3,
               100.0 * worst_xfer / std::max(1e-12, idle[0].step));
    } else {
        printf("  where the last step went: %s\n", e0.message);
    }
    if (o.trace) {
        FILE *f = fopen(o.trace, "w");
        if (!f) { fprintf(stderr, "mlp_gpu: --trace=%s: cannot create the file\n", o.trace); return 1; }
        pp_status st = pp_timeline_write_chrome_trace(tls.data(), pp, f, &e0);
        if (fclose(f) != 0 && st == PP_OK) { fprintf(stderr, "mlp_gpu: --trace=%s: %s\n", o.trace, strerror(errno)); return 1; }
        if (st != PP_OK) { fprintf(stderr, "mlp_gpu: trace: %s\n", e0.message); return 1; }
        printf("trace of the last step written to %s (open in ui.perfetto.dev)\n", o.trace);
        pp_timeline_draw_ascii(tls.data(), pp, 100, stdout, NULL);
    }
    fflush(stdout);
    return 0;
}

/* Every rank's timeline of the last timed step to the lead, through the pipeline communicator,
 * on one clock: the host's (processes and threads of one machine share it), from rank 0's step
 * start (each rank's own start differs by how it left the barrier, which would shift every
 * cross-rank wait). The start travels as two floats, whole 16-second periods (exact below 2^24)
 * and the seconds within one (microsecond precision); ranks more than a second apart do not share
 * a clock (other hosts) and keep their own start. */
static int rank_where(Rank &R, const Timing &T, const Measured &M)
{
    const int pp = R.pp, world = R.world, rank = R.rank;
    const pp_timeline &tl = M.tl;
    std::vector<float> start_at(2 * world, 0.0f);
    start_at[2 * rank] = (float)fmod(floor(T.last_t0 / 16.0), 16777216.0);
    start_at[2 * rank + 1] = (float)(T.last_t0 - 16.0 * floor(T.last_t0 / 16.0));
    PPCK(pp_nccl_all_reduce_host(R.pipe, start_at.data(), 2 * world, 0, &e_));
    double shift = 16.0 * ((double)start_at[2 * rank] - (double)start_at[0]) +
                   ((double)start_at[2 * rank + 1] - (double)start_at[1]);
    if (fabs(shift) > 1.0) shift = 0;
    int total = 0;
    std::vector<int> off(pp + 1, 0);
    for (int r = 0; r < pp; r++) { off[r] = total; total += 3 * R.sched->length[r]; }
    std::vector<float> all(total, 0.0f);
    for (int i = 0; i < tl.length; i++) {
        const double *src[3] = { tl.start, tl.ready, tl.end };
        for (int k = 0; k < 3; k++)
            all[off[rank] + 3 * i + k] = src[k][i] < 0 ? -1e9f : (float)(src[k][i] - T.last_t0 + shift);
    }
    PPCK(pp_nccl_all_reduce_host(R.pipe, all.data(), total, 0, &e_));
    if (!R.lead) return 0;
    std::vector<pp_timeline> tls(pp);   /* zeroed: fields not set here stay 0 */
    std::vector<std::vector<double>> buf(3 * pp);
    for (int r = 0; r < pp; r++) {
        int len = R.sched->length[r];
        for (int k = 0; k < 3; k++) {
            buf[3 * r + k].resize(len);
            for (int i = 0; i < len; i++) {
                float v = all[off[r] + 3 * i + k];
                buf[3 * r + k][i] = v < -1e8f ? -1.0 : (double)v;
            }
        }
        tls[r].rank = r; tls[r].length = len; tls[r].actions = R.sched->actions[r]; tls[r].schedule = R.sched;
        tls[r].start = buf[3 * r].data(); tls[r].ready = buf[3 * r + 1].data(); tls[r].end = buf[3 * r + 2].data();
    }
    return report_where(R, tls);
}
