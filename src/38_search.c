
/* ============================================================================================
 * >>search (implementation): greedy zero-bubble schedules, and the search over every kind.
 * ============================================================================================ */

/* --- greedy ---------------------------------------------------------------------------------- */

typedef struct pp__greedy {
    pp_schedule *s;
    const pp_sim_costs *costs;
    int L;                      /* cap on live activations per rank */
    unsigned flags;
    double comm;                /* time of one transfer between two ranks */
    double *f_end, *i_end;      /* [num_stages * mb]; < 0 while not scheduled */
    int *next_f, *next_i;       /* [num_stages] next microbatch to forward / backward */
    double *t;                  /* [pp] when the rank is free */
    int *live, *reserved;       /* [pp] activations held, and promised to admitted microbatches */
    int *left_fi;               /* [pp] F and I actions still to schedule */
    int *last_op;               /* [pp] the rank's last F or I (PP_OP_W before any) */
    pp__wfifo *wq;              /* [pp] pending W's, oldest first */
} pp__greedy;

/* What a free rank does next: commit an action at its free time, or wait until `wake`. */
typedef struct pp__greedy_move {
    int commit;
    pp_action a;
    double wake;                /* DBL_MAX: until something changes */
} pp__greedy_move;

#define PP__GREEDY_EPS 1e-12

static double pp__greedy_comm(const pp__greedy *g, int from_stage, int to_stage)
{
    return pp_stage_rank(g->s, from_stage) == pp_stage_rank(g->s, to_stage) ? 0.0 : g->comm;
}

/* Decides rank r's next move at time t[r], from what is scheduled so far. */
static pp__greedy_move pp__greedy_decide(const pp__greedy *g, int r)
{
    const pp_schedule *s = g->s;
    pp__greedy_move mv;
    double t = g->t[r], next_known = DBL_MAX, arr_i = 0, arr_f = 0;
    int c, best_i = -1, best_f = -1, mem_blocked = 0;
    mv.commit = 0; mv.wake = DBL_MAX; mv.a = pp__action(PP_OP_W, 0, 0);
    for (c = 0; c < s->vpp; c++) {
        int st = pp_rank_chunk_stage(s, r, c), m;
        double arr;
        /* the next I of this chunk: needs its F and the gradient from the next stage */
        m = g->next_i[st];
        if (m < s->mb && g->f_end[PP__SM(s, st, m)] >= 0) {
            arr = g->f_end[PP__SM(s, st, m)];
            if (st + 1 < s->num_stages) {
                double e = g->i_end[PP__SM(s, st + 1, m)];
                arr = e < 0 ? -1 : (e + pp__greedy_comm(g, st + 1, st) > arr ? e + pp__greedy_comm(g, st + 1, st) : arr);
            }
            if (arr >= 0) {
                if (arr <= t + PP__GREEDY_EPS) {
                    /* oldest microbatch first, then the deeper stage (closer to the loss) */
                    if (best_i < 0 || m < g->next_i[best_i] || (m == g->next_i[best_i] && st > best_i)) {
                        best_i = st; arr_i = arr;
                    }
                } else if (arr < next_known) next_known = arr;
            }
        }
        /* the next F of this chunk: needs the previous stage's output and room in memory */
        m = g->next_f[st];
        if (m < s->mb) {
            int admit;
            if (s->vpp == 2 && (g->flags & PP_GREEDY_EAGER_ADMIT))   /* one slot for the oldest's chunk 1 */
                admit = g->live[r] + (c == 0 ? 2 : 1) <= g->L;
            else               /* a new microbatch reserves room for all its chunks */
                admit = c == 0 ? g->live[r] + g->reserved[r] + s->vpp <= g->L : 1;
            arr = 0;
            if (st > 0) {
                double e = g->f_end[PP__SM(s, st - 1, m)];
                arr = e < 0 ? -1 : e + pp__greedy_comm(g, st - 1, st);
            }
            if (arr >= 0) {
                if (!admit) {
                    if (arr <= t + PP__GREEDY_EPS) mem_blocked = 1;
                } else if (arr <= t + PP__GREEDY_EPS) {
                    int shallow = (g->flags & PP_GREEDY_SHALLOW_FIRST) != 0;
                    if (best_f < 0 || (shallow ? st < best_f : st > best_f)) { best_f = st; arr_f = arr; }
                } else if (arr < next_known) next_known = arr;
            }
        }
    }
    /* an I and an F both ready: by default the other kind than the rank's last F or I (1F1B's
     * alternation); PP_GREEDY_I_FIRST always the I; PP_GREEDY_READY_ORDER the one that became
     * ready first (the I on a tie) */
    if (best_i >= 0 && best_f >= 0) {
        int take_i;
        if (g->flags & PP_GREEDY_I_FIRST) take_i = 1;
        else if (g->flags & PP_GREEDY_READY_ORDER) take_i = arr_i <= arr_f;
        else take_i = g->last_op[r] != PP_OP_I;
        if (take_i) best_f = -1; else best_i = -1;
    }
    if (best_i >= 0) {
        mv.commit = 1; mv.a = pp__action(PP_OP_I, best_i, g->next_i[best_i]);
        return mv;
    }
    if (best_f >= 0) {
        mv.commit = 1; mv.a = pp__action(PP_OP_F, best_f, g->next_f[best_f]);
        return mv;
    }
    if (g->wq[r].head < g->wq[r].tail) {
        const pp__wfifo *q = &g->wq[r];
        double w = pp__half_cost(s, g->costs, PP_OP_W, q->stage[q->head]);
        int run;
        if (mem_blocked || g->left_fi[r] == 0) run = 1;                 /* must free memory / tail */
        else if (g->flags & PP_GREEDY_LAZY_W) run = 0;
        else if (next_known == DBL_MAX) run = 1;                        /* no input in sight */
        else run = t + w <= next_known + PP__GREEDY_EPS || (g->flags & PP_GREEDY_FILL_ANY_GAP);
        if (run) {
            mv.commit = 1; mv.a = pp__action(PP_OP_W, q->stage[q->head], q->mb[q->head]);
            return mv;
        }
    }
    mv.wake = next_known;
    return mv;
}

static void pp__greedy_free(pp__greedy *g)
{
    int r;
    if (g->wq && g->s) for (r = 0; r < g->s->pp; r++) pp__wfifo_free(&g->wq[r]);
    PIPEPAR_FREE(g->wq);
    PIPEPAR_FREE(g->f_end); PIPEPAR_FREE(g->i_end); PIPEPAR_FREE(g->next_f); PIPEPAR_FREE(g->next_i);
    PIPEPAR_FREE(g->t); PIPEPAR_FREE(g->live); PIPEPAR_FREE(g->reserved); PIPEPAR_FREE(g->left_fi);
    PIPEPAR_FREE(g->last_op);
}

pp_status pp_schedule_build_greedy(const pp_greedy_config *cfg, pp_schedule **out, pp_error *err)
{
    pp__greedy g;
    pp_sim_costs unit;
    pp_schedule *s = NULL;
    pp_status st;
    int vpp, r, L;
    size_t n, k, remaining;
    if (!cfg || !out) return pp__fail(err, PP_EINVAL, "cfg and out: must not be NULL");
    *out = NULL;
    memset(&g, 0, sizeof g);
    if (cfg->pp < 1) return pp__fail(err, PP_EINVAL, "pp=%d: must be at least 1", cfg->pp);
    if (cfg->mb < 1) return pp__fail(err, PP_EINVAL, "mb=%d: must be at least 1", cfg->mb);
    if (cfg->placement == PP_PLACEMENT_DUAL)
        return pp__fail(err, PP_EUNSUPPORTED, "placement=dual: the greedy scheduler builds looped and V placements "
                        "(DualPipe's two routes: build kind dualpipe)");
    if (cfg->placement != PP_PLACEMENT_LOOPED && cfg->placement != PP_PLACEMENT_V)
        return pp__fail(err, PP_EINVAL, "placement=%d: unknown", (int)cfg->placement);
    vpp = cfg->vpp ? cfg->vpp : (cfg->placement == PP_PLACEMENT_V ? 2 : 1);
    if (vpp < 1) return pp__fail(err, PP_EINVAL, "vpp=%d: must be at least 1 (0 means the default)", cfg->vpp);
    if (cfg->placement == PP_PLACEMENT_V && vpp != 2)
        return pp__fail(err, PP_EUNSUPPORTED, "vpp=%d: the V placement has exactly 2 chunks per rank", vpp);
    if (cfg->max_live < 0)
        return pp__fail(err, PP_EINVAL, "max_live=%d: must be at least 1 (0 means pp*vpp)", cfg->max_live);
    if (cfg->costs && cfg->costs->action_cost)
        return pp__fail(err, PP_EINVAL, "costs: action_cost: times an existing schedule's actions; the greedy "
                        "scheduler builds a new one (give per-stage costs)");
    if (cfg->costs && cfg->costs->grouped)
        return pp__fail(err, PP_EINVAL, "costs: grouped=%d: the greedy scheduler places its actions with each "
                        "transfer on its own (leave it 0; pp_simulate can then time the result grouped)",
                        cfg->costs->grouped);
    L = cfg->max_live ? cfg->max_live : cfg->pp * vpp;
    if (L < vpp)
        return pp__fail(err, PP_EUNSUPPORTED,
                        "max_live=%d: a greedy schedule needs room for one microbatch on each of a rank's vpp=%d "
                        "chunks", L, vpp);
    if (cfg->flags >= PP_GREEDY_FLAG_LIMIT)
        return pp__fail(err, PP_EINVAL, "flags=%u: unknown bits (PP_GREEDY_* are below %u)", cfg->flags,
                        PP_GREEDY_FLAG_LIMIT);
    if (!cfg->costs) { memset(&unit, 0, sizeof unit); unit.f = 1; unit.b = 2; }
    g.costs = cfg->costs ? cfg->costs : &unit;
    if (g.costs->f < 0 || g.costs->b < 0 || g.costs->i < 0 || g.costs->w < 0 || g.costs->p2p_latency < 0 ||
        g.costs->p2p_seconds_per_byte < 0 || g.costs->activation_bytes < 0)
        return pp__fail(err, PP_EINVAL, "costs: every cost must be >= 0 (f=%g b=%g i=%g w=%g p2p=%g)", g.costs->f,
                        g.costs->b, g.costs->i, g.costs->w, g.costs->p2p_latency);
    st = pp_schedule_create(cfg->pp, vpp, cfg->mb, cfg->placement, &s, err);
    if (st != PP_OK) return st;
    g.s = s; g.L = L; g.flags = cfg->flags;
    g.comm = g.costs->p2p_latency + g.costs->p2p_seconds_per_byte * g.costs->activation_bytes;
    n = (size_t)s->num_stages * (size_t)s->mb;
    g.f_end = (double *)PIPEPAR_MALLOC(n * sizeof(double));
    g.i_end = (double *)PIPEPAR_MALLOC(n * sizeof(double));
    g.next_f = (int *)pp__calloc((size_t)s->num_stages, sizeof(int));
    g.next_i = (int *)pp__calloc((size_t)s->num_stages, sizeof(int));
    g.t = (double *)pp__calloc((size_t)s->pp, sizeof(double));
    g.live = (int *)pp__calloc((size_t)s->pp, sizeof(int));
    g.reserved = (int *)pp__calloc((size_t)s->pp, sizeof(int));
    g.left_fi = (int *)pp__calloc((size_t)s->pp, sizeof(int));
    g.last_op = (int *)pp__calloc((size_t)s->pp, sizeof(int));
    g.wq = (pp__wfifo *)pp__calloc((size_t)s->pp, sizeof(pp__wfifo));
    if (!g.f_end || !g.i_end || !g.next_f || !g.next_i || !g.t || !g.live || !g.reserved || !g.left_fi || !g.last_op || !g.wq) {
        st = pp__fail(err, PP_ENOMEM, "out of memory");
        goto done;
    }
    for (k = 0; k < n; k++) g.f_end[k] = g.i_end[k] = -1;
    for (r = 0; r < s->pp; r++) {
        if (!pp__wfifo_init(&g.wq[r], vpp * s->mb)) { st = pp__fail(err, PP_ENOMEM, "out of memory"); goto done; }
        g.left_fi[r] = 2 * vpp * s->mb;
        g.last_op[r] = PP_OP_W;
    }
    remaining = 3 * n;
    while (remaining > 0) {
        pp__greedy_move best, mv;
        int best_r = -1;
        double best_time = DBL_MAX;
        best.commit = 0; best.wake = DBL_MAX; best.a = pp__action(PP_OP_W, 0, 0);
        /* the earliest event of all ranks: a commit at the rank's free time, or a wake-up */
        for (r = 0; r < s->pp; r++) {
            double when;
            if (g.left_fi[r] == 0 && g.wq[r].head == g.wq[r].tail) continue;
            mv = pp__greedy_decide(&g, r);
            when = mv.commit ? g.t[r] : mv.wake;
            if (best_r < 0 || when < best_time || (when == best_time && mv.commit && !best.commit)) {
                best_r = r; best_time = when; best = mv;
            }
        }
        if (best_time == DBL_MAX) {
            /* everyone waits for something not scheduled yet: the rank that is free first runs a W
             * (one always exists: the oldest microbatch can move unless a rank holds W's back) */
            best_r = -1;
            for (r = 0; r < s->pp; r++)
                if (g.wq[r].head < g.wq[r].tail && (best_r < 0 || g.t[r] < g.t[best_r])) best_r = r;
            if (best_r < 0) {
                st = pp__fail(err, PP_EINVALID_SCHEDULE, "greedy schedule: no rank can move (internal error; "
                              "pp=%d vpp=%d mb=%d max_live=%d)", s->pp, vpp, s->mb, L);
                goto done;
            }
            best.commit = 1;
            best.a = pp__action(PP_OP_W, g.wq[best_r].stage[g.wq[best_r].head], g.wq[best_r].mb[g.wq[best_r].head]);
        }
        r = best_r;
        if (!best.commit) { g.t[r] = best.wake; continue; }
        {
            pp_action a = best.a;
            size_t key = PP__SM(s, a.stage, a.mb);
            double start = g.t[r], end = start + pp__half_cost(s, g.costs, a.op, a.stage);
            st = pp_schedule_append(s, r, a, err);
            if (st != PP_OK) goto done;
            g.t[r] = end;
            remaining--;
            if (a.op != PP_OP_W) g.last_op[r] = a.op;
            if (a.op == PP_OP_F) {
                g.f_end[key] = end;
                g.next_f[a.stage]++;
                g.live[r]++;
                if (pp_stage_chunk(s, a.stage) == 0) g.reserved[r] += vpp - 1;
                else g.reserved[r]--;
                g.left_fi[r]--;
            } else if (a.op == PP_OP_I) {
                g.i_end[key] = end;
                g.next_i[a.stage]++;
                pp__wfifo_push(&g.wq[r], a.stage, a.mb);
                g.left_fi[r]--;
            } else {
                g.wq[r].head++;
                g.live[r]--;
            }
        }
    }
    *out = s;
    s = NULL;
    st = pp__ok(err);
done:
    pp__greedy_free(&g);
    pp_schedule_free(s);
    return st;
}

/* --- search ------------------------------------------------------------------------------------ */

typedef struct pp__candidate {
    pp_schedule_kind kind;      /* PP_CUSTOM: greedy */
    pp_placement placement;
    int vpp, group, max_live;
    unsigned flags;
    int split;                  /* pp_schedule_split_overlaps before lowering */
} pp__candidate;

typedef struct pp__search {
    const pp_search_config *cfg;
    pp_search_entry *entries;
    int count, cap;
} pp__search;

static void pp__candidate_name(const pp__candidate *c, char *buf, size_t size)
{
    const char *kn = c->kind == PP_CUSTOM ? "greedy" : pp_schedule_kind_name(c->kind);
    switch (c->kind) {
    case PP_INTERLEAVED_1F1B: case PP_INTERLEAVED_ZB:
        snprintf(buf, size, "%s vpp=%d group=%d", kn, c->vpp, c->group); break;
    case PP_LOOPED_BFS:
        snprintf(buf, size, "%s vpp=%d", kn, c->vpp); break;
    case PP_ZB_H2:
        snprintf(buf, size, "%s max_live=%d", kn, c->max_live); break;
    case PP_CUSTOM:
        snprintf(buf, size, "greedy %s vpp=%d max_live=%d%s%s%s%s%s", c->placement == PP_PLACEMENT_V ? "V" : "looped",
                 c->vpp, c->max_live, c->flags & PP_GREEDY_FILL_ANY_GAP ? " fill" : "",
                 c->flags & PP_GREEDY_SHALLOW_FIRST ? " shallow" : "", c->flags & PP_GREEDY_LAZY_W ? " lazy-w" : "",
                 c->flags & PP_GREEDY_I_FIRST ? " i-first" : c->flags & PP_GREEDY_READY_ORDER ? " ready-order" : "",
                 c->flags & PP_GREEDY_EAGER_ADMIT ? " eager" : "");
        break;
    default:
        snprintf(buf, size, "%s%s", kn, c->split ? " split" : ""); break;
    }
}

static pp_status pp__candidate_build(const pp_search_config *cfg, const pp__candidate *c, pp_schedule **out,
                                     pp_error *err)
{
    if (c->kind == PP_CUSTOM) {
        pp_greedy_config g;
        memset(&g, 0, sizeof g);
        g.pp = cfg->pp; g.mb = cfg->mb; g.vpp = c->vpp; g.placement = c->placement; g.max_live = c->max_live;
        g.costs = &cfg->costs; g.flags = c->flags;
        return pp_schedule_build_greedy(&g, out, err);
    } else {
        pp_schedule_config sc;
        memset(&sc, 0, sizeof sc);
        sc.kind = c->kind; sc.pp = cfg->pp; sc.mb = cfg->mb; sc.vpp = c->vpp; sc.group = c->group;
        sc.max_live = c->max_live;
        return pp_schedule_build(&sc, out, err);
    }
}

/* Builds, proves and times one candidate and appends its entry. A candidate that its kind
 * refuses is skipped (the enumeration only proposes allowed ones, so this is rare); any other
 * failure stops the search. */
static pp_status pp__search_try(pp__search *S, const pp__candidate *c, pp_error *err)
{
    const pp_search_config *cfg = S->cfg;
    pp_schedule *s = NULL;
    pp_sim_result *sim = NULL;
    pp_search_entry *e;
    pp_status st;
    int r;
    st = pp__candidate_build(cfg, c, &s, err);
    if (st == PP_EUNSUPPORTED) return pp__ok(err);
    if (st != PP_OK) return st;
    if (c->split) st = pp_schedule_split_overlaps(s, err);
    if (st == PP_OK) st = pp_schedule_lower(s, err);
    if (st == PP_OK) st = pp_schedule_validate(s, err);
    if (st == PP_OK) st = pp_simulate(s, &cfg->costs, &sim, err);
    pp_schedule_free(s);
    if (st != PP_OK) {
        char name[128];
        pp__candidate_name(c, name, sizeof name);
        if (err) {
            char msg[PP_ERROR_MESSAGE_SIZE];
            snprintf(msg, sizeof msg, "%s", err->message);
            pp__fail(err, st, "search: %s: %s", name, msg);
        }
        pp_sim_result_free(sim);
        return st;
    }
    if (S->count == S->cap) {
        int ncap = S->cap ? 2 * S->cap : 64;
        pp_search_entry *ne = (pp_search_entry *)PIPEPAR_REALLOC(S->entries, (size_t)ncap * sizeof *ne);
        if (!ne) { pp_sim_result_free(sim); return pp__fail(err, PP_ENOMEM, "out of memory"); }
        S->entries = ne; S->cap = ncap;
    }
    e = &S->entries[S->count++];
    memset(e, 0, sizeof *e);
    pp__candidate_name(c, e->name, sizeof e->name);
    e->kind = c->kind; e->placement = c->placement; e->vpp = c->vpp; e->group = c->group;
    e->max_live = c->max_live; e->greedy_flags = c->flags; e->split_overlaps = c->split;
    e->makespan = sim->makespan;
    e->bubble = sim->bubble_mean;
    for (r = 0; r < sim->pp; r++) {
        if (sim->peak_memory[r] > e->peak_memory) e->peak_memory = sim->peak_memory[r];
        if (sim->peak_live[r] > e->peak_live) e->peak_live = sim->peak_live[r];
    }
    e->fits = cfg->max_memory <= 0 || e->peak_memory <= cfg->max_memory * (1 + 1e-12);
    pp_sim_result_free(sim);
    return pp__ok(err);
}

/* Ranking: within the cap first; then shorter step, smaller bubble, less memory; then name, so
 * that equal schedules come out in a stable order. Step times equal within 1e-9 relative count
 * as equal (the same schedule found two ways must tie). */
static int pp__entry_cmp(const void *pa, const void *pb)
{
    const pp_search_entry *a = (const pp_search_entry *)pa, *b = (const pp_search_entry *)pb;
    double tol = 1e-9 * (a->makespan > b->makespan ? a->makespan : b->makespan);
    if (a->fits != b->fits) return a->fits ? -1 : 1;
    if (a->makespan < b->makespan - tol) return -1;
    if (a->makespan > b->makespan + tol) return 1;
    if (a->bubble < b->bubble - 1e-12) return -1;
    if (a->bubble > b->bubble + 1e-12) return 1;
    if (a->peak_memory < b->peak_memory - 1e-12) return -1;
    if (a->peak_memory > b->peak_memory + 1e-12) return 1;
    if ((a->kind == PP_CUSTOM) != (b->kind == PP_CUSTOM)) return a->kind == PP_CUSTOM ? 1 : -1;  /* named kinds win ties */
    return strcmp(a->name, b->name);
}

void pp_search_result_free(pp_search_result *r)
{
    if (!r) return;
    PIPEPAR_FREE(r->entries);
    pp_schedule_free(r->best);
    PIPEPAR_FREE(r);
}

pp_status pp_search(const pp_search_config *user_cfg, pp_search_result **out, pp_error *err)
{
    pp__search S;
    pp__candidate c;
    pp_search_config cfg_copy;
    const pp_search_config *cfg = &cfg_copy;
    pp_search_result *res = NULL;
    pp_status st = PP_OK;
    double *b_stage = NULL;
    int vpp, vlo, vhi, max_vpp, has_stage_costs, k;
    if (!user_cfg || !out) return pp__fail(err, PP_EINVAL, "cfg and out: must not be NULL");
    *out = NULL;
    cfg_copy = *user_cfg;
    if (cfg->pp < 1) return pp__fail(err, PP_EINVAL, "pp=%d: must be at least 1", cfg->pp);
    if (cfg->mb < 1) return pp__fail(err, PP_EINVAL, "mb=%d: must be at least 1", cfg->mb);
    if (cfg->vpp < 0) return pp__fail(err, PP_EINVAL, "vpp=%d: must be at least 1 (0 tries 1..max_vpp)", cfg->vpp);
    if (cfg->max_vpp < 0) return pp__fail(err, PP_EINVAL, "max_vpp=%d: must be at least 1 (0 means 4)", cfg->max_vpp);
    if (cfg->max_memory < 0 || cfg->max_memory != cfg->max_memory)
        return pp__fail(err, PP_EINVAL, "max_memory=%g: must be >= 0 (0 means no cap)", cfg->max_memory);
    if (cfg->costs.action_cost)
        return pp__fail(err, PP_EINVAL, "costs: action_cost: times one schedule's own actions; a search builds "
                        "others (give per-stage costs)");
    if (cfg->costs.grouped)
        return pp__fail(err, PP_EINVAL, "costs: grouped=%d: a search ranks with each transfer on its own (its "
                        "greedy schedules are built that way; leave it 0)", cfg->costs.grouped);
    has_stage_costs = cfg->costs.f_stage || cfg->costs.b_stage || cfg->costs.i_stage || cfg->costs.w_stage ||
                      cfg->costs.memory_stage;
    if (has_stage_costs && !cfg->vpp)
        return pp__fail(err, PP_EINVAL, "vpp=0: per-stage costs hold pp*vpp entries, so the search needs the vpp "
                        "they describe");
    if (cfg->costs.f < 0 || cfg->costs.b < 0 || cfg->costs.i < 0 || cfg->costs.w < 0)
        return pp__fail(err, PP_EINVAL, "costs: every cost must be >= 0 (f=%g b=%g i=%g w=%g)", cfg->costs.f,
                        cfg->costs.b, cfg->costs.i, cfg->costs.w);
    /* Kinds mix full B's with split I/W (DualPipeV does both): when only the halves are given, a
     * full backward costs their sum, not pp_simulate's default of 2F. */
    if (cfg_copy.costs.b == 0 && cfg_copy.costs.i + cfg_copy.costs.w > 0)
        cfg_copy.costs.b = cfg_copy.costs.i + cfg_copy.costs.w;
    if (!cfg->costs.b_stage && cfg->costs.i_stage && cfg->costs.w_stage && cfg->vpp > 0) {
        int n = cfg->pp * cfg->vpp;
        b_stage = (double *)pp__calloc((size_t)n, sizeof(double));
        if (!b_stage) return pp__fail(err, PP_ENOMEM, "out of memory");
        for (k = 0; k < n; k++) b_stage[k] = cfg->costs.i_stage[k] + cfg->costs.w_stage[k];
        cfg_copy.costs.b_stage = b_stage;
    }
    max_vpp = cfg->max_vpp ? cfg->max_vpp : 4;
    vlo = cfg->vpp ? cfg->vpp : 1;
    vhi = cfg->vpp ? cfg->vpp : max_vpp;
    memset(&S, 0, sizeof S);
    S.cfg = cfg;
#define PP__TRY() do { st = pp__search_try(&S, &c, err); if (st != PP_OK) goto done; } while (0)
    for (vpp = vlo; vpp <= vhi; vpp++) {
        int groups[3], ng = 0, g, L, Lcap;
        memset(&c, 0, sizeof c);
        c.vpp = vpp;
        if (vpp == 1) {
            c.kind = PP_GPIPE; PP__TRY();
            c.kind = PP_1F1B; PP__TRY();
            c.kind = PP_ZB_H1; PP__TRY();
            /* zb-h2 at every cap from 1F1B's pp up to its own 2pp-1 (capped by max_memory) */
            c.kind = PP_ZB_H2;
            for (L = cfg->pp; L <= 2 * cfg->pp - 1; L++) {
                if (cfg->max_memory > 0 && L > cfg->max_memory + 1e-9 && L > cfg->pp) break;
                c.max_live = L; PP__TRY();
                if (cfg->pp > 16 && L < 2 * cfg->pp - 2) L = 2 * cfg->pp - 2;   /* ends only, when large */
            }
            c.max_live = 0;
        } else {
            /* microbatch groups: pp (Megatron's default), PyTorch's mb / max(1, mb/pp), and all mb */
            groups[ng++] = cfg->pp;
            g = cfg->mb / (cfg->mb / cfg->pp > 1 ? cfg->mb / cfg->pp : 1);
            if (g != groups[0]) groups[ng++] = g;
            if (cfg->mb != groups[0] && cfg->mb != g) groups[ng++] = cfg->mb;
            for (k = 0; k < ng; k++) {
                c.group = groups[k];
                c.kind = PP_INTERLEAVED_1F1B; PP__TRY();
                c.kind = PP_INTERLEAVED_ZB; PP__TRY();
            }
            c.group = 0;
            c.kind = PP_LOOPED_BFS; PP__TRY();
            if (vpp == 2) {
                c.placement = PP_PLACEMENT_V;
                c.kind = PP_ZBV; PP__TRY();
                /* the FB kinds twice: as built, and split into F then B (what a runtime without an
                 * overlapped F&B callback runs; the simulator costs an FB as F + B either way) */
                for (c.split = 0; c.split <= 1; c.split++) {
                    c.kind = PP_DUALPIPEV; PP__TRY();
                    /* DualPipe (even pp and mb): its two chunks are whole model stages, so per-stage
                     * costs written for a vpp = 2 split of the model do not describe it */
                    if (!has_stage_costs && cfg->pp % 2 == 0 && cfg->mb % 2 == 0) {
                        c.placement = PP_PLACEMENT_DUAL;
                        c.kind = PP_DUALPIPE; PP__TRY();
                        c.placement = PP_PLACEMENT_V;
                    }
                }
                c.split = 0;
                c.placement = PP_PLACEMENT_LOOPED;
            }
        }
        /* greedy: at 1F1B's memory and at the cap (or twice 1F1B's without one), every policy,
         * looped and, for vpp = 2, V */
        Lcap = cfg->max_memory > 0 ? (int)(cfg->max_memory * vpp + 1e-9) : 2 * cfg->pp * vpp;
        c.kind = PP_CUSTOM;
        for (k = 0; k < (vpp == 2 ? 2 : 1); k++) {
            int Ls[2], nL = 0, li;
            c.placement = k ? PP_PLACEMENT_V : PP_PLACEMENT_LOOPED;
            if (cfg->pp * vpp <= Lcap) Ls[nL++] = cfg->pp * vpp;
            if (Lcap != cfg->pp * vpp && Lcap >= vpp) Ls[nL++] = Lcap;
            for (li = 0; li < nL; li++)
                for (c.flags = 0; c.flags < PP_GREEDY_FLAG_LIMIT; c.flags++) {
                    if ((c.flags & PP_GREEDY_I_FIRST) && (c.flags & PP_GREEDY_READY_ORDER)) continue;
                    if ((c.flags & PP_GREEDY_EAGER_ADMIT) && vpp != 2) continue;   /* same as without */
                    c.max_live = Ls[li]; PP__TRY();
                }
            c.flags = 0;
        }
    }
#undef PP__TRY
    qsort(S.entries, (size_t)S.count, sizeof *S.entries, pp__entry_cmp);
    res = (pp_search_result *)pp__calloc(1, sizeof *res);
    if (!res) { st = pp__fail(err, PP_ENOMEM, "out of memory"); goto done; }
    res->count = S.count;
    res->entries = S.entries;
    S.entries = NULL;
    if (res->count > 0 && res->entries[0].fits) {
        const pp_search_entry *b = &res->entries[0];
        memset(&c, 0, sizeof c);
        c.kind = b->kind; c.placement = b->placement; c.vpp = b->vpp; c.group = b->group;
        c.max_live = b->max_live; c.flags = b->greedy_flags; c.split = b->split_overlaps;
        st = pp__candidate_build(cfg, &c, &res->best, err);
        if (st == PP_OK && c.split) st = pp_schedule_split_overlaps(res->best, err);
        if (st == PP_OK) st = pp_schedule_lower(res->best, err);
        if (st != PP_OK) goto done;
    }
    *out = res;
    res = NULL;
    st = pp__ok(err);
done:
    PIPEPAR_FREE(S.entries);
    PIPEPAR_FREE(b_stage);
    pp_search_result_free(res);
    return st;
}
