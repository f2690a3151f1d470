
/* ============================================================================================
 * >>simulate (implementation)
 * ============================================================================================ */

pp_status pp_schedule_rank_peaks(const pp_schedule *s, int rank, const int *stage_class, int classes,
                                 int *live_peak, int *awaiting_w_peak, pp_error *err)
{
    int *live = NULL, *awaiting = NULL, c, i;
    if (!s) return pp__fail(err, PP_EINVAL, "s: must not be NULL");
    if (rank < 0 || rank >= s->pp)
        return pp__fail(err, PP_EINVAL, "rank=%d: must be between 0 and pp-1=%d", rank, s->pp - 1);
    if (classes < 1 || classes > (1 << 20))
        return pp__fail(err, PP_EINVAL, "classes=%d: must be between 1 and %d", classes, 1 << 20);
    if (stage_class)
        for (i = 0; i < s->num_stages; i++)
            if (stage_class[i] < 0 || stage_class[i] >= classes)
                return pp__fail(err, PP_EINVAL, "stage_class[%d]=%d: must be between 0 and classes-1=%d", i,
                                stage_class[i], classes - 1);
    if (!stage_class) classes = 1;   /* every stage in class 0: only [0] is written */
    live = (int *)pp__calloc((size_t)classes * 2, sizeof(int));
    if (!live) return pp__fail(err, PP_ENOMEM, "out of memory");
    awaiting = live + classes;
    if (live_peak) memset(live_peak, 0, (size_t)classes * sizeof(int));
    if (awaiting_w_peak) memset(awaiting_w_peak, 0, (size_t)classes * sizeof(int));
    for (i = 0; i < s->length[rank]; i++) {
        pp_action a = s->actions[rank][i];
        int ops[2], stg[2], mbs[2], h, nh;
        if (pp__is_comm(a.op)) continue;
        nh = pp__halves(a, ops, stg, mbs);
        for (h = 0; h < nh; h++) {
            if (stg[h] < 0 || stg[h] >= s->num_stages) {
                PIPEPAR_FREE(live);
                return pp__fail(err, PP_EINVALID_SCHEDULE, "rank %d position %d: stage %d out of range (%d stages)",
                                rank, i, stg[h], s->num_stages);
            }
            c = stage_class ? stage_class[stg[h]] : 0;
            switch (ops[h]) {
            case PP_OP_F:
                if (++live[c] > (live_peak ? live_peak[c] : 0) && live_peak) live_peak[c] = live[c];
                break;
            case PP_OP_I:
                if (++awaiting[c] > (awaiting_w_peak ? awaiting_w_peak[c] : 0) && awaiting_w_peak)
                    awaiting_w_peak[c] = awaiting[c];
                break;
            case PP_OP_W: live[c]--; awaiting[c]--; break;
            default: live[c]--; break;   /* a whole B */
            }
        }
    }
    PIPEPAR_FREE(live);
    return PP_OK;
}

void pp_sim_result_free(pp_sim_result *r)
{
    int k;
    if (!r) return;
    if (r->start) for (k = 0; k < r->pp; k++) PIPEPAR_FREE(r->start[k]);
    if (r->end) for (k = 0; k < r->pp; k++) PIPEPAR_FREE(r->end[k]);
    PIPEPAR_FREE(r->start); PIPEPAR_FREE(r->end);
    PIPEPAR_FREE(r->busy); PIPEPAR_FREE(r->bubble); PIPEPAR_FREE(r->peak_live);
    PIPEPAR_FREE(r->peak_memory); PIPEPAR_FREE(r->length);
    PIPEPAR_FREE(r);
}

/* Cost of one compute half on a stage. Scalar costs are for a rank's whole share of the model,
 * so a chunk of a vpp-chunk rank costs 1/vpp of them; per-stage arrays are taken as they are.
 * Under the dual placement (DualPipe) each of a rank's two chunks is a whole model stage (the
 * rank holds its share twice, once per direction): a chunk costs the full share. */
static double pp__half_cost(const pp_schedule *s, const pp_sim_costs *c, int op, int stage)
{
    /* a full backward is its two halves when only those were given, else twice the forward */
    double f = c->f > 0 ? c->f : 1.0, i = c->i, w = c->w;
    double b = c->b > 0 ? c->b : (i > 0 || w > 0 ? i + w : 2.0 * f);
    double v = s->placement == PP_PLACEMENT_DUAL ? 1.0 : (double)s->vpp;
    if (i <= 0 && w <= 0) { i = b / 2; w = b / 2; }
    switch (op) {
    case PP_OP_F: return c->f_stage ? c->f_stage[stage] : f / v;
    case PP_OP_B: return c->b_stage ? c->b_stage[stage] : b / v;
    case PP_OP_I: return c->i_stage ? c->i_stage[stage] : i / v;
    default:      return c->w_stage ? c->w_stage[stage] : w / v;
    }
}

/* Grouped transfers (costs->grouped): each rank's communication actions in the groups the
 * lowering made, flat over all ranks (rank r's groups from gofs[r]). A group is posted when its
 * rank reaches it (posting never blocks; the group then waits on the device for the compute
 * before it, which is t[r] then), heads its stream once the rank's previous group ended, and
 * starts once it and every peer's matching group head their streams. */
typedef struct pp__sim_groups {
    int *gid;          /* [sum of lengths]: group of each communication action (pos_ofs[r] + i); -1 compute */
    int *pos_ofs;      /* [pp] */
    int *gofs, *ng;    /* [pp]: rank r's groups are gofs[r] .. gofs[r] + ng[r] - 1 */
    int *next;         /* [pp]: rank r's first group not yet resolved */
    int *first, *last; /* [groups]: positions of the group's actions in its rank's program */
    double *posted;    /* [groups]: time posted, -1 before */
    double *end;       /* [groups] */
} pp__sim_groups;

static void pp__sim_groups_free(pp__sim_groups *G)
{
    PIPEPAR_FREE(G->gid); PIPEPAR_FREE(G->pos_ofs); PIPEPAR_FREE(G->gofs); PIPEPAR_FREE(G->ng);
    PIPEPAR_FREE(G->next); PIPEPAR_FREE(G->first); PIPEPAR_FREE(G->last); PIPEPAR_FREE(G->posted);
    PIPEPAR_FREE(G->end);
}

static int pp__sim_groups_init(const pp_schedule *s, pp__sim_groups *G)
{
    int r, i, total = 0, groups = 0;
    memset(G, 0, sizeof *G);
    for (r = 0; r < s->pp; r++) total += s->length[r];
    G->gid = (int *)PIPEPAR_MALLOC((size_t)(total + 1) * sizeof(int));
    G->pos_ofs = (int *)pp__calloc((size_t)s->pp, sizeof(int));
    G->gofs = (int *)pp__calloc((size_t)s->pp, sizeof(int));
    G->ng = (int *)pp__calloc((size_t)s->pp, sizeof(int));
    G->next = (int *)pp__calloc((size_t)s->pp, sizeof(int));
    G->first = (int *)PIPEPAR_MALLOC((size_t)(total + 1) * sizeof(int));
    G->last = (int *)PIPEPAR_MALLOC((size_t)(total + 1) * sizeof(int));
    G->posted = (double *)PIPEPAR_MALLOC((size_t)(total + 1) * sizeof(double));
    G->end = (double *)PIPEPAR_MALLOC((size_t)(total + 1) * sizeof(double));
    if (!G->gid || !G->pos_ofs || !G->gofs || !G->ng || !G->next || !G->first || !G->last || !G->posted || !G->end)
        return 0;
    total = 0;
    for (r = 0; r < s->pp; r++) {
        G->pos_ofs[r] = total;
        G->gofs[r] = groups;
        for (i = 0; i < s->length[r];) {
            int e = pp_schedule_group_end(s, r, i), j;
            if (!pp__is_comm(s->actions[r][i].op)) { G->gid[total + i] = -1; i++; continue; }
            for (j = i; j < e; j++) G->gid[total + j] = groups;
            G->first[groups] = i; G->last[groups] = e - 1;
            G->posted[groups] = -1; G->end[groups] = -1;
            groups++;
            G->ng[r]++;
            i = e;
        }
        total += s->length[r];
    }
    return 1;
}

/* Resolves every group that can be: in order on each rank, once it and its peers' matching
 * groups are posted and their previous groups over. Its receives then land at its end. */
static void pp__sim_groups_resolve(const pp_schedule *s, const pp_sim_costs *c, pp__sim_groups *G,
                                   const int *send_r, const int *send_p, const int *recv_r, const int *recv_p,
                                   pp_sim_result *res, double *arr_f, double *arr_b, unsigned char *arrived_f,
                                   unsigned char *arrived_b)
{
    int changed = 1, r;
    while (changed) {
        changed = 0;
        for (r = 0; r < s->pp; r++) {
            int g, i, ok = 1, sends = 0, recvs = 0;
            double begin, dur;
            if (G->next[r] >= G->ng[r]) continue;
            g = G->gofs[r] + G->next[r];
            if (G->posted[g] < 0) continue;
            begin = G->posted[g];
            if (G->next[r] > 0 && G->end[g - 1] > begin) begin = G->end[g - 1];
            for (i = G->first[g]; i <= G->last[g] && ok; i++) {
                pp_action a = s->actions[r][i];
                int is_send = a.op == PP_OP_SEND_F || a.op == PP_OP_SEND_B, pr, pos, pg, local;
                size_t k = pp__comm_key(s, a);
                pr = is_send ? recv_r[k] : send_r[k];
                pos = is_send ? recv_p[k] : send_p[k];
                if (is_send) sends++; else recvs++;
                if (pr < 0) { ok = 0; break; }
                pg = G->gid[G->pos_ofs[pr] + pos];
                local = pg - G->gofs[pr];
                /* the peer's group heads its stream: posted, and its previous group over */
                if (G->posted[pg] < 0 || G->next[pr] < local) { ok = 0; break; }
                if (G->posted[pg] > begin) begin = G->posted[pg];
                if (local > 0 && G->end[pg - 1] > begin) begin = G->end[pg - 1];
            }
            if (!ok) continue;
            dur = c->p2p_latency + c->p2p_seconds_per_byte * c->activation_bytes * (sends > recvs ? sends : recvs);
            G->end[g] = begin + dur;
            for (i = G->first[g]; i <= G->last[g]; i++) {
                pp_action a = s->actions[r][i];
                res->start[r][i] = begin;
                res->end[r][i] = begin + dur;
                if (a.op == PP_OP_RECV_F) { arr_f[PP__SM(s, a.stage, a.mb)] = begin + dur; arrived_f[PP__SM(s, a.stage, a.mb)] = 1; }
                if (a.op == PP_OP_RECV_B) { arr_b[PP__SM(s, a.stage, a.mb)] = begin + dur; arrived_b[PP__SM(s, a.stage, a.mb)] = 1; }
            }
            G->next[r]++;
            changed = 1;
        }
    }
}

pp_status pp_simulate(const pp_schedule *sched, const pp_sim_costs *costs, pp_sim_result **out, pp_error *err)
{
    pp_sim_costs zero;
    const pp_schedule *s = sched;
    pp_schedule *lowered = NULL;
    pp_sim_result *res = NULL;
    pp_status st;
    size_t plane, nkeys, k;
    double *post_send = NULL, *post_recv = NULL, *arr_f = NULL, *arr_b = NULL, *t = NULL;
    int *send_r = NULL, *send_p = NULL, *recv_r = NULL, *recv_p = NULL, *pc = NULL;
    unsigned char *arrived_f = NULL, *arrived_b = NULL;
    pp__progress prog = { NULL, NULL, NULL };
    pp__sim_groups groups;
    int r, i, finished = 0, has_comm = 0;
    double t0 = DBL_MAX, t1 = 0, mem_all = 0;

    memset(&groups, 0, sizeof groups);

    if (!sched || !out) return pp__fail(err, PP_EINVAL, "schedule and out: must not be NULL");
    *out = NULL;
    if (!costs) { memset(&zero, 0, sizeof zero); costs = &zero; }
    if (costs->f < 0 || costs->b < 0 || costs->i < 0 || costs->w < 0 || costs->p2p_latency < 0 ||
        costs->p2p_seconds_per_byte < 0 || costs->activation_bytes < 0)
        return pp__fail(err, PP_EINVAL, "costs: every cost must be >= 0 (f=%g b=%g i=%g w=%g p2p=%g)",
                        costs->f, costs->b, costs->i, costs->w, costs->p2p_latency);
    st = pp__check_structure(sched, err);
    if (st != PP_OK) return st;
    if (costs->memory_stage) {
        for (i = 0; i < sched->num_stages; i++) {
            if (!(costs->memory_stage[i] >= 0) || costs->memory_stage[i] > DBL_MAX)
                return pp__fail(err, PP_EINVAL, "costs: memory_stage[%d]=%g: must be a finite number >= 0", i,
                                costs->memory_stage[i]);
            mem_all += costs->memory_stage[i];
        }
        if (!(mem_all > 0) || mem_all > DBL_MAX)
            return pp__fail(err, PP_EINVAL, "costs: memory_stage: the stages weigh %g in all (they need some memory "
                            "to measure against)", mem_all);
    }
    for (r = 0; r < sched->pp && !has_comm; r++)
        for (i = 0; i < sched->length[r]; i++)
            if (pp__is_comm(sched->actions[r][i].op)) { has_comm = 1; break; }
    if (costs->action_cost) {
        if (!has_comm && sched->pp > 1)
            return pp__fail(err, PP_EINVAL, "costs: action_cost: needs a lowered schedule (its entries follow the "
                            "programs' indices, which lowering changes): call pp_schedule_lower first");
        for (r = 0; r < sched->pp; r++) {
            if (!costs->action_cost[r] && sched->length[r] > 0)
                return pp__fail(err, PP_EINVAL, "costs: action_cost[%d]=NULL: needs a time for every action of rank %d", r, r);
            for (i = 0; i < sched->length[r]; i++)
                if (!pp__is_comm(sched->actions[r][i].op) &&
                    (!(costs->action_cost[r][i] >= 0) || costs->action_cost[r][i] > DBL_MAX))
                    return pp__fail(err, PP_EINVAL, "costs: action_cost[%d][%d]=%g: must be a finite number >= 0", r, i,
                                    costs->action_cost[r][i]);
        }
    }
    if (!has_comm && sched->pp > 1) {
        st = pp_schedule_copy(sched, &lowered, err);
        if (st == PP_OK) st = pp_schedule_lower(lowered, err);
        if (st != PP_OK) { pp_schedule_free(lowered); return st; }
        s = lowered;
    }
    plane = (size_t)s->num_stages * (size_t)s->mb;
    nkeys = 2 * plane;
    res = (pp_sim_result *)pp__calloc(1, sizeof *res);
    if (!res) { st = pp__fail(err, PP_ENOMEM, "out of memory"); goto done; }
    res->pp = s->pp; res->vpp = s->vpp;
    res->busy = (double *)pp__calloc((size_t)s->pp, sizeof(double));
    res->bubble = (double *)pp__calloc((size_t)s->pp, sizeof(double));
    res->peak_live = (int *)pp__calloc((size_t)s->pp, sizeof(int));
    res->peak_memory = (double *)pp__calloc((size_t)s->pp, sizeof(double));
    res->length = (int *)pp__calloc((size_t)s->pp, sizeof(int));
    res->start = (double **)pp__calloc((size_t)s->pp, sizeof(double *));
    res->end = (double **)pp__calloc((size_t)s->pp, sizeof(double *));
    post_send = (double *)PIPEPAR_MALLOC(nkeys * sizeof(double));
    post_recv = (double *)PIPEPAR_MALLOC(nkeys * sizeof(double));
    send_r = (int *)PIPEPAR_MALLOC(nkeys * sizeof(int));
    send_p = (int *)PIPEPAR_MALLOC(nkeys * sizeof(int));
    recv_r = (int *)PIPEPAR_MALLOC(nkeys * sizeof(int));
    recv_p = (int *)PIPEPAR_MALLOC(nkeys * sizeof(int));
    arr_f = (double *)pp__calloc(plane, sizeof(double));
    arr_b = (double *)pp__calloc(plane, sizeof(double));
    arrived_f = (unsigned char *)pp__calloc(plane, 1);
    arrived_b = (unsigned char *)pp__calloc(plane, 1);
    t = (double *)pp__calloc((size_t)s->pp, sizeof(double));
    pc = (int *)pp__calloc((size_t)s->pp, sizeof(int));
    if (!res->busy || !res->bubble || !res->peak_live || !res->peak_memory || !res->length || !res->start ||
        !res->end || !post_send || !post_recv || !send_r || !send_p || !recv_r || !recv_p || !arr_f || !arr_b ||
        !arrived_f || !arrived_b || !t || !pc || !pp__progress_init(&prog, s)) {
        st = pp__fail(err, PP_ENOMEM, "out of memory");
        goto done;
    }
    for (r = 0; r < s->pp; r++) {
        size_t n = s->length[r] > 0 ? (size_t)s->length[r] : 1;
        res->length[r] = s->length[r];
        res->start[r] = (double *)pp__calloc(n, sizeof(double));
        res->end[r] = (double *)pp__calloc(n, sizeof(double));
        if (!res->start[r] || !res->end[r]) { st = pp__fail(err, PP_ENOMEM, "out of memory"); goto done; }
        if (s->length[r] == 0) finished++;
    }
    for (k = 0; k < nkeys; k++) { post_send[k] = post_recv[k] = -1; send_r[k] = recv_r[k] = -1; }
    if (costs->grouped) {
        /* every transfer's two ends, known up front: a group resolves only with its peers' */
        if (!pp__sim_groups_init(s, &groups)) { st = pp__fail(err, PP_ENOMEM, "out of memory"); goto done; }
        for (r = 0; r < s->pp; r++)
            for (i = 0; i < s->length[r]; i++) {
                pp_action a = s->actions[r][i];
                if (!pp__is_comm(a.op)) continue;
                k = pp__comm_key(s, a);
                if (a.op == PP_OP_SEND_F || a.op == PP_OP_SEND_B) { send_r[k] = r; send_p[k] = i; }
                else { recv_r[k] = r; recv_p[k] = i; }
            }
    }

    while (finished < s->pp) {
        int progress = 0;
        for (r = 0; r < s->pp; r++) {
            if (pc[r] >= s->length[r]) continue;
            while (pc[r] < s->length[r]) {
                pp_action a = s->actions[r][pc[r]];
                if (pp__is_comm(a.op) && costs->grouped) {
                    /* the whole group is posted at once; it runs when it and its peers' head their streams */
                    int g = groups.gid[groups.pos_ofs[r] + pc[r]];
                    groups.posted[g] = t[r];
                    pc[r] = groups.last[g] + 1;
                    pp__sim_groups_resolve(s, costs, &groups, send_r, send_p, recv_r, recv_p, res, arr_f, arr_b,
                                           arrived_f, arrived_b);
                    progress = 1;
                    continue;
                }
                if (pp__is_comm(a.op)) {
                    /* posting never blocks; the transfer runs once both sides have posted */
                    int is_send = a.op == PP_OP_SEND_F || a.op == PP_OP_SEND_B;
                    k = pp__comm_key(s, a);
                    if (is_send) { post_send[k] = t[r]; send_r[k] = r; send_p[k] = pc[r]; }
                    else { post_recv[k] = t[r]; recv_r[k] = r; recv_p[k] = pc[r]; }
                    if (post_send[k] >= 0 && post_recv[k] >= 0) {
                        double start = post_send[k] > post_recv[k] ? post_send[k] : post_recv[k];
                        double end = start + costs->p2p_latency + costs->p2p_seconds_per_byte * costs->activation_bytes;
                        pp_action rv = s->actions[recv_r[k]][recv_p[k]];
                        size_t ck = PP__SM(s, rv.stage, rv.mb);
                        res->start[send_r[k]][send_p[k]] = res->start[recv_r[k]][recv_p[k]] = start;
                        res->end[send_r[k]][send_p[k]] = res->end[recv_r[k]][recv_p[k]] = end;
                        if (rv.op == PP_OP_RECV_F) { arr_f[ck] = end; arrived_f[ck] = 1; }
                        else { arr_b[ck] = end; arrived_b[ck] = 1; }
                    }
                    pc[r]++;
                    progress = 1;
                    continue;
                }
                {
                    int ops[2], stg[2], mbs[2], h, nh = pp__halves(a, ops, stg, mbs), ready = 1;
                    double start = t[r], dur = 0;
                    char txt[64];
                    for (h = 0; h < nh && ready == 1; h++) {
                        const char *why = "";
                        int from;
                        ready = pp__half_ready(s, &prog, arrived_f, arrived_b, ops[h], stg[h], mbs[h], &why);
                        if (ready < 0) {
                            pp_action_format(a, txt, sizeof txt);
                            st = pp__fail(err, PP_EINVALID_SCHEDULE, "rank %d position %d: %s %s", r, pc[r], txt, why);
                            goto done;
                        }
                        if (ready == 1 && pp__cross_input(s, ops[h], stg[h], mbs[h], &from)) {
                            double at = ops[h] == PP_OP_F ? arr_f[PP__SM(s, stg[h], mbs[h])]
                                                          : arr_b[PP__SM(s, stg[h], mbs[h])];
                            if (at > start) start = at;
                        }
                    }
                    if (!ready) break;
                    for (h = 0; h < nh; h++) {
                        if (!costs->action_cost) dur += pp__half_cost(s, costs, ops[h], stg[h]);
                        pp__mark_done(s, &prog, ops[h], stg[h], mbs[h]);
                    }
                    if (costs->action_cost) dur = costs->action_cost[r][pc[r]];
                    res->start[r][pc[r]] = start;
                    res->end[r][pc[r]] = start + dur;
                    res->busy[r] += dur;
                    t[r] = start + dur;
                    if (start < t0) t0 = start;
                    if (start + dur > t1) t1 = start + dur;
                    pc[r]++;
                    progress = 1;
                }
            }
            if (pc[r] >= s->length[r]) finished++;
        }
        if (!progress && finished < s->pp) {
            st = pp__fail(err, PP_EDEADLOCK, "simulation cannot finish: the schedule waits for tensors that are "
                          "never sent (run pp_schedule_validate for the exact place)");
            goto done;
        }
    }
    if (t0 == DBL_MAX) t0 = 0;
    res->makespan = t1 - t0;

    /* peak live activations: an F's activations live from its start until its B (or W) ends.
     * Compute is sequential per rank, so in program order these instants never go back in time
     * (start <= end <= next start): one walk, no sort; a release at the same instant as the
     * next allocation comes first, as it should. */
    for (r = 0; r < s->pp; r++) {
        const double *ms = costs->memory_stage;
        int live = 0, peak = 0;
        double live_mem = 0, peak_mem = 0;
        for (i = 0; i < s->length[r]; i++) {
            pp_action a = s->actions[r][i];
            int ops[2], stg[2], mbs[2], h, nh;
            if (pp__is_comm(a.op)) continue;
            nh = pp__halves(a, ops, stg, mbs);
            for (h = 0; h < nh; h++) {
                if (ops[h] == PP_OP_F) {
                    if (++live > peak) peak = live;
                    if (ms && (live_mem += ms[stg[h]]) > peak_mem) peak_mem = live_mem;
                } else if (ops[h] == PP_OP_B || ops[h] == PP_OP_W) {
                    live--;
                    if (ms) live_mem -= ms[stg[h]];
                }
            }
        }
        res->peak_live[r] = peak;
        /* dual: every chunk is a whole model stage, so a live chunk counts as one stage's worth */
        if (!ms) {
            res->peak_memory[r] = s->placement == PP_PLACEMENT_DUAL ? (double)peak : (double)peak / (double)s->vpp;
            continue;
        }
        /* one unit is an average rank's share of the model: the same absolute memory on every
         * rank and placement, so one cap means one budget per GPU (dual: the stages are the
         * model twice over) */
        res->peak_memory[r] = peak_mem / (mem_all / (s->placement == PP_PLACEMENT_DUAL ? 2.0 * s->pp : (double)s->pp));
    }
    res->bubble_mean = 0;
    for (r = 0; r < s->pp; r++) {
        res->bubble[r] = res->makespan > 0 ? 1.0 - res->busy[r] / res->makespan : 0.0;
        res->bubble_mean += res->bubble[r] / s->pp;
    }
    *out = res;
    res = NULL;
    st = pp__ok(err);
done:
    pp_sim_result_free(res);
    pp_schedule_free(lowered);
    PIPEPAR_FREE(post_send); PIPEPAR_FREE(post_recv); PIPEPAR_FREE(send_r); PIPEPAR_FREE(send_p);
    PIPEPAR_FREE(recv_r); PIPEPAR_FREE(recv_p); PIPEPAR_FREE(arr_f); PIPEPAR_FREE(arr_b);
    PIPEPAR_FREE(arrived_f); PIPEPAR_FREE(arrived_b); PIPEPAR_FREE(t); PIPEPAR_FREE(pc);
    pp__sim_groups_free(&groups);
    pp__progress_free(&prog);
    return st;
}
