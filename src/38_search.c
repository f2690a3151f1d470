
/* ============================================================================================
 * >>search (implementation): greedy zero-bubble schedules, and the search over every kind.
 * ============================================================================================ */

#ifndef PIPEPAR_NO_THREADS
#include <pthread.h>   /* pp_search_config.threads */
#endif

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
    const pp_search_config *cfg;    /* the working copy: under cfg.layers, its costs are the current split's */
    pp_search_entry *entries;
    int count, cap;
    int has_stage_costs;            /* DualPipe's chunks are whole model stages: per-stage costs do not fit it */
    /* cfg.layers: each entry keeps its schedule's fastest split, stages ints at pool + layout_at[entry] */
    const int32_t *layout;          /* the current split [stages]; NULL without cfg.layers */
    const int32_t *even;            /* the even split [stages] */
    int stages;
    int first;                      /* entries of the current vpp start here */
    int cursor;                     /* the entry the next candidate most likely matches */
    size_t *layout_at;              /* [cap] */
    int32_t *pool;
    size_t pool_len, pool_cap;
    int split_fits;                 /* the current split's best entry: fits the cap? */
    double split_makespan;          /*   and its step time (DBL_MAX before any) */
    pp_search_progress where;       /* what cfg->progress is told */
    long split_index;               /* cfg.layers: the current split's place in the vpp's enumeration */
    long *best_at;                  /* [cap] the split_index of each entry's kept split */
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

/* Adds entry t, or under cfg.layers keeps the faster of t and its schedule's entry from an
 * earlier split of this vpp (with the current split). Candidates come in the same order for
 * every split, so the entry at the cursor is nearly always t's. */
/* Distance of a split from the even one: layers moved. */
static long pp__split_distance(const int32_t *split, const int32_t *even, int stages)
{
    long d = 0;
    int s;
    for (s = 0; s < stages; s++) d += labs((long)split[s] - even[s]);
    return d;
}

static pp_status pp__search_keep(pp__search *S, const pp_search_entry *t, pp_error *err)
{
    int k = -1, j;
    if (S->layout && (t->fits > S->split_fits || (t->fits == S->split_fits && t->makespan < S->split_makespan))) {
        S->split_fits = t->fits;
        S->split_makespan = t->makespan;
    }
    if (S->layout) {
        if (S->cursor < S->count && !strcmp(S->entries[S->cursor].name, t->name)) k = S->cursor;
        for (j = S->first; k < 0 && j < S->count; j++)
            if (!strcmp(S->entries[j].name, t->name)) k = j;
    }
    if (k >= 0) {
        int order = pp__entry_cmp(t, &S->entries[k]);
        S->cursor = k + 1;
        if (order == 0) {
            /* a tie: the split nearer the even one wins (fewer layers moved) */
            order = pp__split_distance(S->layout, S->even, S->stages) <
                    pp__split_distance(S->pool + S->layout_at[k], S->even, S->stages) ? -1 : 0;
        }
        if (order < 0) {
            S->entries[k] = *t;
            memcpy(S->pool + S->layout_at[k], S->layout, (size_t)S->stages * sizeof *S->pool);
            S->best_at[k] = S->split_index;
        }
        return pp__ok(err);
    }
    if (S->count == S->cap) {
        int ncap = S->cap ? 2 * S->cap : 64;
        pp_search_entry *ne = (pp_search_entry *)PIPEPAR_REALLOC(S->entries, (size_t)ncap * sizeof *ne);
        size_t *na;
        long *nb;
        if (!ne) return pp__fail(err, PP_ENOMEM, "out of memory");
        S->entries = ne;
        na = (size_t *)PIPEPAR_REALLOC(S->layout_at, (size_t)ncap * sizeof *na);
        if (!na) return pp__fail(err, PP_ENOMEM, "out of memory");
        S->layout_at = na;
        nb = (long *)PIPEPAR_REALLOC(S->best_at, (size_t)ncap * sizeof *nb);
        if (!nb) return pp__fail(err, PP_ENOMEM, "out of memory");
        S->best_at = nb;
        S->cap = ncap;
    }
    if (S->layout) {
        if (S->pool_len + (size_t)S->stages > S->pool_cap) {
            size_t ncap = 2 * S->pool_cap + (size_t)S->stages + 256;
            int32_t *np = (int32_t *)PIPEPAR_REALLOC(S->pool, ncap * sizeof *np);
            if (!np) return pp__fail(err, PP_ENOMEM, "out of memory");
            S->pool = np; S->pool_cap = ncap;
        }
        memcpy(S->pool + S->pool_len, S->layout, (size_t)S->stages * sizeof *S->pool);
        S->layout_at[S->count] = S->pool_len;
        S->pool_len += (size_t)S->stages;
    }
    S->best_at[S->count] = S->split_index;
    S->entries[S->count++] = *t;
    S->cursor = S->count;
    return pp__ok(err);
}

/* Builds, proves and times one candidate and keeps its entry (pp__search_keep). A candidate that its kind
 * refuses is skipped (the enumeration only proposes allowed ones, so this is rare); any other
 * failure stops the search. */
static pp_status pp__search_try(pp__search *S, const pp__candidate *c, pp_error *err)
{
    const pp_search_config *cfg = S->cfg;
    pp_schedule *s = NULL;
    pp_sim_result *sim = NULL;
    pp_search_entry t, *e;
    pp_status st;
    int r, split_b = 0;
    if (cfg->kind != PP_KIND_NONE && c->kind != cfg->kind) return pp__ok(err);
    st = pp__candidate_build(cfg, c, &s, err);
    if (st == PP_EUNSUPPORTED) return pp__ok(err);
    if (st != PP_OK) return st;
    if (c->split) st = pp_schedule_split_overlaps(s, err);
    if (st == PP_OK && cfg->split_backward) {
        int i;
        for (r = 0; r < s->pp && !split_b; r++)
            for (i = 0; i < s->length[r]; i++) split_b |= s->actions[r][i].op == PP_OP_B;
        st = pp_schedule_split_backward(s, err);
    }
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
    memset(&t, 0, sizeof t);
    e = &t;
    pp__candidate_name(c, e->name, sizeof e->name);
    if (split_b) {
        size_t n = strlen(e->name);
        snprintf(e->name + n, sizeof e->name - n, ", B as I then W");
    }
    e->kind = c->kind; e->placement = c->placement; e->vpp = c->vpp; e->group = c->group;
    e->max_live = c->max_live; e->greedy_flags = c->flags; e->split_overlaps = c->split;
    e->split_backward = split_b;
    e->makespan = sim->makespan;
    e->bubble = sim->bubble_mean;
    for (r = 0; r < sim->pp; r++) {
        if (sim->peak_memory[r] > e->peak_memory) e->peak_memory = sim->peak_memory[r];
        if (sim->peak_live[r] > e->peak_live) e->peak_live = sim->peak_live[r];
    }
    e->fits = cfg->max_memory <= 0 || e->peak_memory <= cfg->max_memory * (1 + 1e-12);
    pp_sim_result_free(sim);
    S->where.simulated++;
    if (cfg->progress) cfg->progress(cfg->progress_user, &S->where);
    return pp__search_keep(S, &t, err);
}

void pp_search_result_free(pp_search_result *r)
{
    if (!r) return;
    PIPEPAR_FREE(r->entries);
    PIPEPAR_FREE(r->layout_pool);
    pp_schedule_free(r->best);
    PIPEPAR_FREE(r);
}

int pp_search_layout_text(const int32_t *stage_layers, int stages, char *buf, size_t size)
{
    size_t n = 0;
    int k;
    char piece[32];
    if (!buf) size = 0;
    if (size) buf[0] = '\0';
    for (k = 0; k < stages; k++) {
        int len = snprintf(piece, sizeof piece, "%s%s%s%.0d%s", k ? "|" : "E", "t", stage_layers[k] > 1 ? "*" : "",
                           stage_layers[k] > 1 ? (int)stage_layers[k] : 0, k == stages - 1 ? "L" : "");
        if (n < size) {   /* as snprintf: as much as fits, always terminated */
            size_t room = size - 1 - n, take = (size_t)len < room ? (size_t)len : room;
            memcpy(buf + n, piece, take);
            buf[n + take] = '\0';
        }
        n += (size_t)len;
    }
    return (int)n;
}

/* Every kind with every parameter worth trying at this vpp, each through pp__search_try. */
static pp_status pp__search_vpp(pp__search *S, int vpp, pp_error *err)
{
    const pp_search_config *cfg = S->cfg;
    pp__candidate c;
    pp_status st = PP_OK;
    int groups[40], ng = 0, g, L, Lcap, k;
    memset(&c, 0, sizeof c);
    c.vpp = vpp;
#define PP__TRY() do { st = pp__search_try(S, &c, err); if (st != PP_OK) return st; } while (0)
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
        /* microbatch groups: pp (Megatron's default), 2pp, 4pp, ... below mb, PyTorch's
         * mb / max(1, mb/pp), and all mb. A larger group starts the later ranks sooner when the
         * first stage is small (the layout search's interleaved winners) */
        for (g = cfg->pp; g < cfg->mb && ng < 32; g *= 2) groups[ng++] = g;
        if (ng == 0) groups[ng++] = cfg->pp;
        g = cfg->mb / (cfg->mb / cfg->pp > 1 ? cfg->mb / cfg->pp : 1);
        for (k = 0; k < ng && groups[k] != g; k++) {}
        if (k == ng) groups[ng++] = g;
        for (k = 0; k < ng && groups[k] != cfg->mb; k++) {}
        if (k == ng) groups[ng++] = cfg->mb;
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
                if (!S->has_stage_costs && cfg->pp % 2 == 0 && cfg->mb % 2 == 0) {
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
     * looped and, for vpp = 2, V. A cap below one microbatch through every chunk (max_live vpp)
     * fits no schedule: each rank holds a microbatch in all its chunks while it reaches the last
     * stage. The greedy at vpp live is then built anyway, over the cap, so that the least memory
     * the caller is told of is the least any schedule has. */
    Lcap = cfg->max_memory > 0 ? (int)(cfg->max_memory * vpp + 1e-9) : 2 * cfg->pp * vpp;
    c.kind = PP_CUSTOM;
    for (k = 0; k < (vpp == 2 ? 2 : 1); k++) {
        int Ls[2], nL = 0, li;
        c.placement = k ? PP_PLACEMENT_V : PP_PLACEMENT_LOOPED;
        if (cfg->pp * vpp <= Lcap) Ls[nL++] = cfg->pp * vpp;
        if (Lcap != cfg->pp * vpp && Lcap >= vpp) Ls[nL++] = Lcap;
        else if (Lcap < vpp) Ls[nL++] = vpp;
        for (li = 0; li < nL; li++)
            for (c.flags = 0; c.flags < PP_GREEDY_FLAG_LIMIT; c.flags++) {
                if ((c.flags & PP_GREEDY_I_FIRST) && (c.flags & PP_GREEDY_READY_ORDER)) continue;
                if ((c.flags & PP_GREEDY_EAGER_ADMIT) && vpp != 2) continue;   /* same as without */
                c.max_live = Ls[li]; PP__TRY();
            }
        c.flags = 0;
    }
#undef PP__TRY
    return PP_OK;
}

/* --- the layout search (cfg.layers) ------------------------------------------------------------ */

/* Splits of `layers` into `stages` stages of lo..hi layers each: how many (any count over `limit`
 * reads limit + 1), the first, and the next one after `split` in lexicographic order. */
static long pp__splits_count(int layers, int stages, int lo, int hi, long limit)
{
    /* ways[n]: splits of n layers into the stages counted so far, capped at limit + 1 (limit is at
     * most 2^40 and layers at most 4096, so a window's sum of capped values stays exact in a long);
     * each stage is a sliding-window sum: O(stages x layers) */
    long *ways = (long *)pp__calloc((size_t)layers + 1, sizeof(long)), *next, total, window;
    int s, n;
    if (!ways) return -1;
    next = (long *)pp__calloc((size_t)layers + 1, sizeof(long));
    if (!next) { PIPEPAR_FREE(ways); return -1; }
    ways[0] = 1;
    for (s = 0; s < stages; s++) {
        window = 0;   /* ways[n - hi .. n - lo] */
        for (n = 0; n <= layers; n++) {
            if (n - lo >= 0) window += ways[n - lo];
            if (n - hi - 1 >= 0) window -= ways[n - hi - 1];
            next[n] = window > limit ? limit + 1 : window;
        }
        memcpy(ways, next, ((size_t)layers + 1) * sizeof(long));
    }
    total = ways[layers];
    PIPEPAR_FREE(ways);
    PIPEPAR_FREE(next);
    return total;
}

/* Fills split with the first split (lexicographically smallest) whose stages from `from` on hold
 * `left` layers; 0 when there is none. */
static int pp__split_fill(int32_t *split, int from, int stages, int left, int lo, int hi)
{
    int s;
    for (s = from; s < stages; s++) {
        int rest = stages - s - 1, n = left - rest * hi;
        if (n < lo) n = lo;
        if (n > hi || left - n < rest * lo) return 0;
        split[s] = n;
        left -= n;
    }
    return left == 0;
}

static int pp__split_next(int32_t *split, int stages, int lo, int hi)
{
    int s, left = 0;
    for (s = stages - 1; s >= 0; s--) {
        left += split[s];
        /* raise stage s by one and refill the rest as low as they go */
        if (split[s] < hi && pp__split_fill(split, s + 1, stages, left - split[s] - 1, lo, hi)) {
            split[s]++;
            return 1;
        }
    }
    return 0;
}

/* The enumeration of a vpp's splits: the even split first (split holds it), then every split in
 * lexicographic order but that one. Moves split to the next; 0 when there is none. first: split
 * is the even one, the enumeration's start. */
static int pp__split_advance(int32_t *split, const int32_t *even, int stages, int layers, int lo, int hi, int first)
{
    if (first ? !pp__split_fill(split, 0, stages, layers, lo, hi) : !pp__split_next(split, stages, lo, hi)) return 0;
    return memcmp(split, even, (size_t)stages * sizeof *split) || pp__split_next(split, stages, lo, hi);
}

/* Per-stage costs of a split: each stage its layers times the per-layer costs, the first stage
 * the embedding's on top and the last the loss's. */
static void pp__split_costs(const pp_search_config *cfg, const pp_sim_costs *per_layer, const int32_t *split,
                            int stages, double **arrays)
{
    const pp_layer_costs *ends[2];
    int e;
    double f = per_layer->f > 0 ? per_layer->f : 1, b, i, w;
    int s;
    b = per_layer->b > 0 ? per_layer->b : per_layer->i + per_layer->w > 0 ? per_layer->i + per_layer->w : 2 * f;
    i = per_layer->i + per_layer->w > 0 ? per_layer->i : b / 2;
    w = per_layer->i + per_layer->w > 0 ? per_layer->w : b / 2;
    for (s = 0; s < stages; s++) {
        arrays[0][s] = f * split[s]; arrays[1][s] = b * split[s];
        arrays[2][s] = i * split[s]; arrays[3][s] = w * split[s];
        arrays[4][s] = split[s];
    }
    if (cfg->layer_costs) {   /* each layer its own: the stage sums its layers */
        int layer = 0, k;
        for (s = 0; s < stages; s++) {
            arrays[0][s] = arrays[1][s] = arrays[2][s] = arrays[3][s] = arrays[4][s] = 0;
            for (k = 0; k < split[s]; k++, layer++) {
                const pp_layer_costs *lc = &cfg->layer_costs[layer];
                arrays[0][s] += lc->f; arrays[1][s] += lc->i + lc->w;
                arrays[2][s] += lc->i; arrays[3][s] += lc->w;
                arrays[4][s] += lc->memory;
            }
        }
    }
    ends[0] = &cfg->embedding; ends[1] = &cfg->loss;
    for (e = 0; e < 2; e++) {
        s = e ? stages - 1 : 0;
        arrays[0][s] += ends[e]->f; arrays[1][s] += ends[e]->i + ends[e]->w;
        arrays[2][s] += ends[e]->i; arrays[3][s] += ends[e]->w;
        arrays[4][s] += ends[e]->memory;
    }
}

/* Whether the layout search can build `kind` (PP_KIND_NONE: any) at this vpp, so that it spends
 * no splits on a vpp the asked-for kind never runs at. DualPipe never: its chunks are whole model
 * stages, which per-stage costs of a split do not describe. */
static int pp__layout_kind_takes_vpp(pp_schedule_kind kind, int vpp)
{
    switch (kind) {
    case PP_GPIPE: case PP_1F1B: case PP_ZB_H1: case PP_ZB_H2: return vpp == 1;
    case PP_ZBV: case PP_DUALPIPEV: return vpp == 2;
    case PP_DUALPIPE: return 0;
    case PP_INTERLEAVED_1F1B: case PP_INTERLEAVED_ZB: case PP_LOOPED_BFS: return vpp >= 2;
    default: return 1;
    }
}

/* Searches every kind at vpp on one split (S->layout, S->stages), each entry keeping its best
 * split so far; S->split_fits / split_makespan end as this split's best. */
static pp_status pp__search_split(pp__search *S, const pp_sim_costs *per_layer, int vpp, double **split_cost,
                                  pp_error *err)
{
    S->cursor = S->first;
    S->split_fits = -1;
    S->split_makespan = DBL_MAX;
    pp__split_costs(S->cfg, per_layer, S->layout, S->stages, split_cost);
    S->where.splits_done++;   /* counted as it starts: "split 1 of N" while the first runs */
    return pp__search_vpp(S, vpp, err);
}

/* --- the splits of one vpp on several threads (cfg.threads) --------------------------------------
 * Worker t of T enumerates the splits in the same order as the single-threaded loop and searches
 * those whose index is t mod T, into a pp__search of its own (its own copy of the config, whose
 * per-stage costs are its split's). The merge keeps, for every schedule, the best of the workers'
 * entries under the single-threaded loop's rule: faster (pp__entry_cmp), then nearer the even
 * split, then earlier in the enumeration; so the result does not depend on the thread count. */
#ifndef PIPEPAR_NO_THREADS
typedef struct pp__split_shared {
    pthread_mutex_t mu;
    int stop;                       /* a worker failed: the others stop at their next split */
    pp_search_progress where;       /* summed over workers, for the caller's progress */
    void (*progress)(void *user, const pp_search_progress *where);
    void *progress_user;
} pp__split_shared;

typedef struct pp__split_worker {
    pp__search W;
    pp_search_config cfg;
    double *cost[5];
    int32_t *split;
    const pp_sim_costs *per_layer;
    int vpp, lo, hi, t, T;
    long splits_seen;               /* W.where.splits_done already added to the shared count */
    pp__split_shared *shared;
    pp_status st;
    pp_error err;
} pp__split_worker;

static void pp__split_worker_progress(void *user, const pp_search_progress *w)
{
    pp__split_worker *k = (pp__split_worker *)user;
    pp__split_shared *sh = k->shared;
    pthread_mutex_lock(&sh->mu);
    sh->where.simulated++;
    sh->where.splits_done += w->splits_done - k->splits_seen;
    k->splits_seen = w->splits_done;
    if (sh->progress) sh->progress(sh->progress_user, &sh->where);
    pthread_mutex_unlock(&sh->mu);
}

static void *pp__split_worker_main(void *arg)
{
    pp__split_worker *k = (pp__split_worker *)arg;
    pp__search *W = &k->W;
    const int stages = W->stages, layers = k->cfg.layers;
    long idx;
    int have, stop;
    memcpy(k->split, W->even, (size_t)stages * sizeof *k->split);
    for (have = 0, idx = 0;; have = 1, idx++) {
        if (idx % k->T == k->t) {
            pthread_mutex_lock(&k->shared->mu);
            stop = k->shared->stop;
            pthread_mutex_unlock(&k->shared->mu);
            if (stop) break;
            W->split_index = idx;
            k->st = pp__search_split(W, k->per_layer, k->vpp, k->cost, &k->err);
            if (k->st != PP_OK) {
                pthread_mutex_lock(&k->shared->mu);
                k->shared->stop = 1;
                pthread_mutex_unlock(&k->shared->mu);
                break;
            }
        }
        if (!pp__split_advance(k->split, W->even, stages, layers, k->lo, k->hi, !have)) break;
    }
    return NULL;
}

/* Searches every split of this vpp (count of them, in S's enumeration order) on T threads and
 * merges the results into S. */
static pp_status pp__search_splits_threaded(pp__search *S, const pp_search_config *cfg_copy, int vpp, int lo, int hi,
                                            long count, int T, pp_error *err)
{
    pp__split_shared sh;
    pp__split_worker *k = NULL;
    pthread_t *tid = NULL;
    pp_status st = PP_OK;
    const int32_t *layout = S->layout;
    int t, started = 0, c, j, e;
    memset(&sh, 0, sizeof sh);
    if (pthread_mutex_init(&sh.mu, NULL) != 0) return pp__fail(err, PP_ENOMEM, "search: cannot create a mutex");
    sh.where = S->where;
    sh.progress = cfg_copy->progress;
    sh.progress_user = cfg_copy->progress_user;
    if ((long)T > count) T = (int)count;
    k = (pp__split_worker *)pp__calloc((size_t)T, sizeof *k);
    tid = (pthread_t *)pp__calloc((size_t)T, sizeof *tid);
    if (!k || !tid) { st = pp__fail(err, PP_ENOMEM, "out of memory"); goto done; }
    for (t = 0; t < T; t++) {
        pp__split_worker *w = &k[t];
        w->cfg = *cfg_copy;
        for (c = 0; c < 5; c++) {
            w->cost[c] = (double *)pp__calloc((size_t)S->stages, sizeof(double));
            if (!w->cost[c]) { st = pp__fail(err, PP_ENOMEM, "out of memory"); goto done; }
        }
        w->split = (int32_t *)pp__calloc((size_t)S->stages, sizeof(int32_t));
        if (!w->split) { st = pp__fail(err, PP_ENOMEM, "out of memory"); goto done; }
        w->cfg.costs.f_stage = w->cost[0]; w->cfg.costs.b_stage = w->cost[1];
        w->cfg.costs.i_stage = w->cost[2]; w->cfg.costs.w_stage = w->cost[3];
        w->cfg.costs.memory_stage = w->cost[4];
        w->cfg.progress = cfg_copy->progress ? pp__split_worker_progress : NULL;
        w->cfg.progress_user = w;
        w->per_layer = &cfg_copy->costs;
        w->W.cfg = &w->cfg;
        w->W.has_stage_costs = S->has_stage_costs;
        w->W.stages = S->stages;
        w->W.even = S->even;
        w->W.layout = w->split;
        w->vpp = vpp; w->lo = lo; w->hi = hi; w->t = t; w->T = T;
        w->shared = &sh;
    }
    for (t = 0; t < T; t++) {
        if (pthread_create(&tid[t], NULL, pp__split_worker_main, &k[t]) != 0) {
            pthread_mutex_lock(&sh.mu);
            sh.stop = 1;
            pthread_mutex_unlock(&sh.mu);
            st = pp__fail(err, PP_ENOMEM, "search: cannot start thread %d of %d", t, T);
            break;
        }
        started++;
    }
    for (t = 0; t < started; t++) pthread_join(tid[t], NULL);
    if (st != PP_OK) goto done;
    for (t = 0; t < T; t++)
        if (k[t].st != PP_OK) {
            st = k[t].st;
            if (err) *err = k[t].err;
            goto done;
        }
    /* the merge */
    for (t = 0; t < T && st == PP_OK; t++) {
        const pp__search *W = &k[t].W;
        for (e = 0; e < W->count && st == PP_OK; e++) {
            const pp_search_entry *we = &W->entries[e];
            const int32_t *wl = W->pool + W->layout_at[e];
            for (j = S->first; j < S->count && strcmp(S->entries[j].name, we->name); j++) {}
            if (j == S->count) {   /* new here: appended as the loop would, with its split */
                S->layout = wl;
                S->split_index = W->best_at[e];
                S->cursor = S->count;
                st = pp__search_keep(S, we, err);
            } else {
                int order = pp__entry_cmp(we, &S->entries[j]);
                if (order == 0) {
                    long dw = pp__split_distance(wl, S->even, S->stages);
                    long dk = pp__split_distance(S->pool + S->layout_at[j], S->even, S->stages);
                    order = dw < dk ? -1 : dw > dk ? 1 : (W->best_at[e] < S->best_at[j] ? -1 : 1);
                }
                if (order < 0) {
                    S->entries[j] = *we;
                    memcpy(S->pool + S->layout_at[j], wl, (size_t)S->stages * sizeof *S->pool);
                    S->best_at[j] = W->best_at[e];
                }
            }
        }
    }
    S->where = sh.where;
    S->where.splits_done = count;
done:
    S->layout = layout;
    for (t = 0; k && t < T; t++) {
        for (c = 0; c < 5; c++) PIPEPAR_FREE(k[t].cost[c]);
        PIPEPAR_FREE(k[t].split);
        PIPEPAR_FREE(k[t].W.entries);
        PIPEPAR_FREE(k[t].W.layout_at);
        PIPEPAR_FREE(k[t].W.best_at);
        PIPEPAR_FREE(k[t].W.pool);
    }
    PIPEPAR_FREE(k);
    PIPEPAR_FREE(tid);
    pthread_mutex_destroy(&sh.mu);
    return st;
}
#endif

pp_status pp_search(const pp_search_config *user_cfg, pp_search_result **out, pp_error *err)
{
    pp__search S;
    pp__candidate c;
    pp_search_config cfg_copy;
    const pp_search_config *cfg = &cfg_copy;
    pp_search_result *res = NULL;
    pp_status st = PP_OK;
    double *b_stage = NULL, *split_cost[5] = { NULL, NULL, NULL, NULL, NULL };
    int32_t *split = NULL, *even = NULL, *trial = NULL;
    int vpp, vlo, vhi, max_vpp, k, spread, local = 0, threads;
    long max_layouts, layouts = 0, count;
    if (!user_cfg || !out) return pp__fail(err, PP_EINVAL, "cfg and out: must not be NULL");
    *out = NULL;
    cfg_copy = *user_cfg;
    if (cfg->pp < 1) return pp__fail(err, PP_EINVAL, "pp=%d: must be at least 1", cfg->pp);
    if (cfg->mb < 1) return pp__fail(err, PP_EINVAL, "mb=%d: must be at least 1", cfg->mb);
    if (cfg->vpp < 0) return pp__fail(err, PP_EINVAL, "vpp=%d: must be at least 1 (0 tries 1..max_vpp)", cfg->vpp);
    if (cfg->max_vpp < 0) return pp__fail(err, PP_EINVAL, "max_vpp=%d: must be at least 1 (0 means 4)", cfg->max_vpp);
    if (cfg->max_memory < 0 || cfg->max_memory != cfg->max_memory)
        return pp__fail(err, PP_EINVAL, "max_memory=%g: must be >= 0 (0 means no cap)", cfg->max_memory);
    if ((int)cfg->kind < PP_KIND_NONE || (int)cfg->kind > PP_CUSTOM)
        return pp__fail(err, PP_EINVAL, "kind=%d: not a schedule kind (PP_KIND_NONE searches every kind)", (int)cfg->kind);
    if (cfg->layers < 0) return pp__fail(err, PP_EINVAL, "layers=%d: must be >= 0 (0: the costs as given)", cfg->layers);
    if (cfg->layout_spread < 0)
        return pp__fail(err, PP_EINVAL, "layout_spread=%d: must be >= 0 (0 means 1)", cfg->layout_spread);
    if (cfg->threads < 0 || cfg->threads > 1024)
        return pp__fail(err, PP_EINVAL, "threads=%d: must be in 0..1024 (0 or 1: the calling thread alone)", cfg->threads);
    if (cfg->max_layouts < 0 || cfg->max_layouts > (1L << 40))
        return pp__fail(err, PP_EINVAL, "max_layouts=%ld: must be in 0..2^40 (0 means 4096)", cfg->max_layouts);
    if (cfg->layers > 4096)
        return pp__fail(err, PP_EINVAL, "layers=%d: at most 4096 for a layout search", cfg->layers);
    for (k = 0; k < 2; k++) {
        const pp_layer_costs *lc = k ? &cfg->loss : &cfg->embedding;
        const char *name = k ? "loss" : "embedding";
        if (!(lc->f >= 0 && lc->f <= DBL_MAX && lc->i >= 0 && lc->i <= DBL_MAX && lc->w >= 0 && lc->w <= DBL_MAX &&
              lc->memory >= 0 && lc->memory <= DBL_MAX))
            return pp__fail(err, PP_EINVAL, "%s: f=%g i=%g w=%g memory=%g: each must be a finite number >= 0", name,
                            lc->f, lc->i, lc->w, lc->memory);
        if (!cfg->layers && (lc->f > 0 || lc->i > 0 || lc->w > 0 || lc->memory > 0))
            return pp__fail(err, PP_EINVAL, "%s: only with layers (the layout search); otherwise put it in the "
                            "per-stage costs", name);
    }
    if (cfg->layer_costs && !cfg->layers)
        return pp__fail(err, PP_EINVAL, "layer_costs: only with layers (they hold one entry per layer)");
    for (k = 0; cfg->layer_costs && k < cfg->layers; k++) {
        const pp_layer_costs *lc = &cfg->layer_costs[k];
        if (!(lc->f >= 0 && lc->f <= DBL_MAX && lc->i >= 0 && lc->i <= DBL_MAX && lc->w >= 0 && lc->w <= DBL_MAX &&
              lc->memory >= 0 && lc->memory <= DBL_MAX))
            return pp__fail(err, PP_EINVAL, "layer_costs[%d]: f=%g i=%g w=%g memory=%g: each must be a finite number "
                            ">= 0", k, lc->f, lc->i, lc->w, lc->memory);
    }
    if (cfg->costs.action_cost)
        return pp__fail(err, PP_EINVAL, "costs: action_cost: times one schedule's own actions; a search builds "
                        "others (give per-stage costs)");
    if (cfg->costs.grouped)
        return pp__fail(err, PP_EINVAL, "costs: grouped=%d: a search ranks with each transfer on its own (its "
                        "greedy schedules are built that way; leave it 0)", cfg->costs.grouped);
    memset(&S, 0, sizeof S);
    S.cfg = cfg;
    S.has_stage_costs = cfg->costs.f_stage || cfg->costs.b_stage || cfg->costs.i_stage || cfg->costs.w_stage ||
                        cfg->costs.memory_stage;
    if (S.has_stage_costs && cfg->layers)
        return pp__fail(err, PP_EINVAL, "layers=%d with per-stage costs: the layout search sets every stage's cost "
                        "from the per-layer costs f, b, i, w (leave the per-stage arrays NULL)", cfg->layers);
    if (S.has_stage_costs && !cfg->vpp)
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
    spread = cfg->layout_spread ? cfg->layout_spread : 1;
    max_layouts = cfg->max_layouts ? cfg->max_layouts : 4096;
#ifdef PIPEPAR_NO_THREADS
    threads = 1;
#else
    threads = cfg->threads > 1 ? cfg->threads : 1;
#endif
    if (cfg->layers) {
        /* every vpp's splits are counted before any is searched: a refusal costs no time */
        long most = (long)cfg->pp * vhi;
        if ((long)cfg->pp * vlo > cfg->layers) {
            st = pp__fail(err, PP_EINVAL, "layers=%d: fewer than the pp*vpp = %ld stages of %s", cfg->layers,
                          (long)cfg->pp * vlo, cfg->vpp ? "this vpp" : "vpp 1 (every stage needs a layer)");
            goto done;
        }
        if (most > cfg->layers) most = cfg->layers;
        split = (int32_t *)pp__calloc((size_t)most, sizeof *split);
        even = (int32_t *)pp__calloc((size_t)most, sizeof *even);
        for (k = 0; k < 5; k++) split_cost[k] = (double *)pp__calloc((size_t)most, sizeof(double));
        if (!split || !even || !split_cost[0] || !split_cost[1] || !split_cost[2] || !split_cost[3] || !split_cost[4]) {
            st = pp__fail(err, PP_ENOMEM, "out of memory");
            goto done;
        }
        trial = (int32_t *)pp__calloc((size_t)most, sizeof *trial);
        if (!trial) { st = pp__fail(err, PP_ENOMEM, "out of memory"); goto done; }
        cfg_copy.costs.f_stage = split_cost[0]; cfg_copy.costs.b_stage = split_cost[1];
        cfg_copy.costs.i_stage = split_cost[2]; cfg_copy.costs.w_stage = split_cost[3];
        cfg_copy.costs.memory_stage = split_cost[4];
        S.has_stage_costs = 1;
    }
    for (vpp = vlo; vpp <= vhi; vpp++) {
        int stages = cfg->pp * vpp, lo, hi, sn, have;
        S.where.vpp = vpp;
        S.where.splits_done = S.where.splits_total = 0;
        if (!cfg->layers) {
            st = pp__search_vpp(&S, vpp, err);
            if (st != PP_OK) goto done;
            continue;
        }
        if (stages > cfg->layers) break;
        if (!pp__layout_kind_takes_vpp(cfg->kind, vpp)) continue;
        lo = cfg->layers / stages - spread;
        if (lo < 1) lo = 1;
        hi = (cfg->layers + stages - 1) / stages + spread;
        /* the even split first, so that a tie keeps it; then every other split in order */
        for (sn = 0; sn < stages; sn++) even[sn] = cfg->layers / stages + (sn >= stages - cfg->layers % stages);
        S.stages = stages;
        S.first = S.count;
        S.layout = split;
        S.even = even;
        memcpy(split, even, (size_t)stages * sizeof *split);
        count = pp__splits_count(cfg->layers, stages, lo, hi, max_layouts);
        if (count < 0) { st = pp__fail(err, PP_ENOMEM, "out of memory"); goto done; }
        S.where.splits_total = count <= max_layouts ? count : max_layouts;
        if (count <= max_layouts && threads > 1 && count > 1) {
#ifndef PIPEPAR_NO_THREADS
            st = pp__search_splits_threaded(&S, &cfg_copy, vpp, lo, hi, count, threads, err);
            if (st != PP_OK) goto done;
            layouts += count;
#endif
        } else if (count <= max_layouts) {
            for (have = 0, S.split_index = 0;; have = 1, S.split_index++) {
                st = pp__search_split(&S, &cfg_copy.costs, vpp, split_cost, err);
                if (st != PP_OK) goto done;
                layouts++;
                if (!pp__split_advance(split, even, stages, cfg->layers, lo, hi, !have)) break;
            }
        } else {
            /* too many to try them all: descend from the even split, each round taking the move of
             * one layer from a stage to another that shortens the step most, until none does or
             * max_layouts splits have been tried */
            int fits, a, b, best_a, best_b, last_a = -1, last_b = -1;
            double makespan;
            long tried = 0;
            local = 1;
            st = pp__search_split(&S, &cfg_copy.costs, vpp, split_cost, err);
            if (st != PP_OK) goto done;
            tried++;
            fits = S.split_fits;
            makespan = S.split_makespan;
            for (;;) {
                best_a = -1; best_b = -1;
                memcpy(trial, split, (size_t)stages * sizeof *trial);
                S.layout = trial;
                for (a = 0; a < stages && tried < max_layouts; a++)
                    for (b = 0; b < stages && tried < max_layouts; b++) {
                        if (a == b || split[a] <= lo || split[b] >= hi) continue;
                        if (a == last_b && b == last_a) continue;   /* back where the last round came from */
                        trial[a]--; trial[b]++;
                        st = pp__search_split(&S, &cfg_copy.costs, vpp, split_cost, err);
                        trial[a]++; trial[b]--;
                        if (st != PP_OK) goto done;
                        tried++;
                        if (S.split_fits > fits || (S.split_fits == fits && S.split_makespan < makespan * (1 - 1e-12))) {
                            fits = S.split_fits; makespan = S.split_makespan;
                            best_a = a; best_b = b;
                        }
                    }
                S.layout = split;
                if (best_a < 0) break;
                split[best_a]--; split[best_b]++;
                last_a = best_a; last_b = best_b;
            }
            layouts += tried;
        }
    }
    if (S.count == 0 && cfg->kind != PP_KIND_NONE) {
        st = pp__fail(err, PP_EUNSUPPORTED, "kind=%s: none of this kind at pp=%d mb=%d vpp %d..%d%s (gpipe, 1f1b, zb-h1 "
                      "and zb-h2 run at vpp 1; zbv, dualpipev and dualpipe at vpp 2, dualpipe only with even pp and "
                      "mb and no per-stage costs or layers; interleaved, interleaved-zb and looped-bfs at vpp 2 and up)",
                      cfg->kind == PP_CUSTOM ? "greedy" : pp_schedule_kind_name(cfg->kind), cfg->pp, cfg->mb, vlo, vhi,
                      cfg->layers && (long)cfg->pp * vhi > cfg->layers ? " (fewer, as every stage needs a layer)" : "");
        goto done;
    }
    if (cfg->layers)
        for (k = 0; k < S.count; k++) S.entries[k].stage_layers = S.pool + S.layout_at[k];
    qsort(S.entries, (size_t)S.count, sizeof *S.entries, pp__entry_cmp);
    res = (pp_search_result *)pp__calloc(1, sizeof *res);
    if (!res) { st = pp__fail(err, PP_ENOMEM, "out of memory"); goto done; }
    res->count = S.count;
    res->entries = S.entries;
    S.entries = NULL;
    res->layouts = layouts;
    res->layouts_local = local;
    res->layout_pool = S.pool;
    S.pool = NULL;
    if (res->count > 0 && res->entries[0].fits) {
        const pp_search_entry *b = &res->entries[0];
        memset(&c, 0, sizeof c);
        c.kind = b->kind; c.placement = b->placement; c.vpp = b->vpp; c.group = b->group;
        c.max_live = b->max_live; c.flags = b->greedy_flags; c.split = b->split_overlaps;
        /* a greedy order comes from the costs: the winner's split's */
        if (b->stage_layers) pp__split_costs(cfg, &cfg_copy.costs, b->stage_layers, cfg->pp * b->vpp, split_cost);
        st = pp__candidate_build(cfg, &c, &res->best, err);
        if (st == PP_OK && c.split) st = pp_schedule_split_overlaps(res->best, err);
        if (st == PP_OK && b->split_backward) st = pp_schedule_split_backward(res->best, err);
        if (st == PP_OK) st = pp_schedule_lower(res->best, err);
        if (st != PP_OK) goto done;
    }
    *out = res;
    res = NULL;
    st = pp__ok(err);
done:
    PIPEPAR_FREE(S.entries);
    PIPEPAR_FREE(S.layout_at);
    PIPEPAR_FREE(S.best_at);
    PIPEPAR_FREE(S.pool);
    PIPEPAR_FREE(b_stage);
    PIPEPAR_FREE(split);
    PIPEPAR_FREE(even);
    PIPEPAR_FREE(trial);
    for (k = 0; k < 5; k++) PIPEPAR_FREE(split_cost[k]);
    pp_search_result_free(res);
    return st;
}
