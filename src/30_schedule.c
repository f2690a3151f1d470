
/* ============================================================================================
 * >>schedule (implementation)
 * ============================================================================================ */

static const char *const pp__kind_names[PP_KIND_COUNT] = {
    "none", "gpipe", "1f1b", "interleaved", "looped-bfs", "zb-h1", "zb-h2", "zbv",
    "dualpipev", "interleaved-zb", "dualpipe", "custom"
};

const char *pp_schedule_kind_name(pp_schedule_kind kind)
{
    return (kind >= 0 && kind < PP_KIND_COUNT) ? pp__kind_names[kind] : "unknown";
}

pp_status pp_schedule_kind_parse(const char *name, pp_schedule_kind *kind, pp_error *err)
{
    int k;
    if (!name) return pp__fail(err, PP_EINVAL, "kind: missing");
    for (k = 1; k < PP_KIND_COUNT; k++)
        if (strcmp(name, pp__kind_names[k]) == 0) { *kind = (pp_schedule_kind)k; return pp__ok(err); }
    return pp__fail(err, PP_EINVAL,
                    "kind '%s': unknown (one of gpipe, 1f1b, interleaved, looped-bfs, zb-h1, zb-h2, "
                    "zbv, dualpipev, interleaved-zb, dualpipe)", name);
}

const char *pp_op_name(pp_op op)
{
    static const char *const names[PP_OP_COUNT] = {
        "F", "B", "I", "W", "FB", "SEND_F", "RECV_F", "SEND_B", "RECV_B"
    };
    return (op >= 0 && op < PP_OP_COUNT) ? names[op] : "?";
}

static int pp__is_comm(int op) { return op >= PP_OP_SEND_F && op <= PP_OP_RECV_B; }

static pp_action pp__action(int op, int stage, int mb)
{
    pp_action a;
    a.op = op; a.stage = stage; a.mb = mb; a.stage2 = -1; a.mb2 = -1; a.group = 0;
    return a;
}

static pp_status pp__lower(pp_schedule *s, unsigned char *stuck_on_backward, pp_error *err);

/* --- create / append / free -------------------------------------------------------------- */

pp_status pp_schedule_create(int pp, int vpp, int mb, pp_placement placement, pp_schedule **out,
                             pp_error *err)
{
    pp_schedule *s;
    if (!out) return pp__fail(err, PP_EINVAL, "out: must not be NULL");
    *out = NULL;
    if (pp < 1 || pp > 65536) return pp__fail(err, PP_EINVAL, "pp=%d: must be between 1 and 65536", pp);
    if (vpp < 1 || vpp > 1024) return pp__fail(err, PP_EINVAL, "vpp=%d: must be between 1 and 1024", vpp);
    if (mb < 1 || mb > (1 << 24)) return pp__fail(err, PP_EINVAL, "mb=%d: must be between 1 and %d", mb, 1 << 24);
    if ((long long)pp * vpp > (1 << 20))
        return pp__fail(err, PP_EINVAL, "pp*vpp=%lld: at most %d stages", (long long)pp * vpp, 1 << 20);
    /* A schedule holds two compute actions per (stage, microbatch) and about as many transfers;
     * the cap keeps a schedule and its proof within about half a gigabyte. */
    if ((long long)pp * vpp * mb > PP_MAX_STAGE_MICROBATCHES)
        return pp__fail(err, PP_EINVAL, "pp*vpp*mb=%lld: at most %d (stage, microbatch) pairs in one schedule",
                        (long long)pp * vpp * mb, PP_MAX_STAGE_MICROBATCHES);
    if (placement == PP_PLACEMENT_V && vpp != 2)
        return pp__fail(err, PP_EINVAL, "vpp=%d: a V-shaped placement has exactly 2 chunks per rank", vpp);
    if (placement == PP_PLACEMENT_DUAL) {
        /* DualPipe: one down and one up stage per rank, half the microbatches each way */
        if (vpp != 2)
            return pp__fail(err, PP_EINVAL, "vpp=%d: the bidirectional (DualPipe) placement has exactly 2 chunks "
                            "per rank", vpp);
        if (pp % 2 != 0)
            return pp__fail(err, PP_EINVAL, "pp=%d: the bidirectional (DualPipe) placement needs an even pp (rank r "
                            "pairs with rank pp-1-r)", pp);
        if (mb % 2 != 0)
            return pp__fail(err, PP_EINVAL, "mb=%d: the bidirectional (DualPipe) placement needs an even mb (half "
                            "the microbatches run each way)", mb);
    }
    if (placement != PP_PLACEMENT_LOOPED && placement != PP_PLACEMENT_V && placement != PP_PLACEMENT_DUAL)
        return pp__fail(err, PP_EINVAL, "placement=%d: unknown", (int)placement);
    s = (pp_schedule *)pp__calloc(1, sizeof *s);
    if (!s) return pp__fail(err, PP_ENOMEM, "out of memory");
    s->kind = PP_CUSTOM;
    s->placement = placement;
    s->pp = pp; s->vpp = vpp; s->mb = mb; s->group = pp;
    s->num_stages = pp * vpp;
    s->length = (int *)pp__calloc((size_t)pp, sizeof(int));
    s->capacity = (int *)pp__calloc((size_t)pp, sizeof(int));
    s->actions = (pp_action **)pp__calloc((size_t)pp, sizeof(pp_action *));
    if (!s->length || !s->capacity || !s->actions) {
        pp_schedule_free(s);
        return pp__fail(err, PP_ENOMEM, "out of memory");
    }
    *out = s;
    return pp__ok(err);
}

void pp_schedule_free(pp_schedule *s)
{
    int r;
    if (!s) return;
    if (s->actions)
        for (r = 0; r < s->pp; r++) PIPEPAR_FREE(s->actions[r]);
    PIPEPAR_FREE(s->actions);
    PIPEPAR_FREE(s->length);
    PIPEPAR_FREE(s->capacity);
    PIPEPAR_FREE(s);
}

static int pp__reserve(pp_schedule *s, int rank, int need)
{
    if (need > s->capacity[rank]) {
        int cap = s->capacity[rank] ? s->capacity[rank] : 16;
        pp_action *a;
        while (cap < need) {
            if (cap > INT_MAX / 2) return 0;
            cap *= 2;
        }
        a = (pp_action *)PIPEPAR_REALLOC(s->actions[rank], (size_t)cap * sizeof(pp_action));
        if (!a) return 0;
        s->actions[rank] = a;
        s->capacity[rank] = cap;
    }
    return 1;
}

pp_status pp_schedule_append(pp_schedule *s, int rank, pp_action action, pp_error *err)
{
    if (!s) return pp__fail(err, PP_EINVAL, "schedule: must not be NULL");
    if (rank < 0 || rank >= s->pp)
        return pp__fail(err, PP_EINVAL, "rank=%d: must be between 0 and pp-1=%d", rank, s->pp - 1);
    if (action.op < 0 || action.op >= PP_OP_COUNT)
        return pp__fail(err, PP_EINVAL, "op=%d: unknown", (int)action.op);
    if (action.stage < 0 || action.stage >= s->num_stages)
        return pp__fail(err, PP_EINVAL, "stage=%d: must be between 0 and %d", (int)action.stage, s->num_stages - 1);
    if (action.mb < 0 || action.mb >= s->mb)
        return pp__fail(err, PP_EINVAL, "mb=%d: must be between 0 and %d", (int)action.mb, s->mb - 1);
    if (action.op == PP_OP_FB) {
        if (action.stage2 < 0 || action.stage2 >= s->num_stages || action.mb2 < 0 || action.mb2 >= s->mb)
            return pp__fail(err, PP_EINVAL, "FB action: backward half (stage %d, mb %d) out of range",
                            (int)action.stage2, (int)action.mb2);
    } else {
        action.stage2 = -1; action.mb2 = -1;
    }
    if (!pp__is_comm(action.op)) action.group = 0;
    if (!pp__reserve(s, rank, s->length[rank] + 1)) return pp__fail(err, PP_ENOMEM, "out of memory");
    s->actions[rank][s->length[rank]++] = action;
    if (pp__is_comm(action.op)) s->lowered = 1;
    return pp__ok(err);
}

pp_status pp_schedule_copy(const pp_schedule *s, pp_schedule **out, pp_error *err)
{
    pp_schedule *c;
    pp_status st;
    int r;
    if (!s) return pp__fail(err, PP_EINVAL, "schedule: must not be NULL");
    st = pp_schedule_create(s->pp, s->vpp, s->mb, s->placement, &c, err);
    if (st != PP_OK) return st;
    c->kind = s->kind; c->group = s->group; c->lowered = s->lowered;
    for (r = 0; r < s->pp; r++) {
        if (!pp__reserve(c, r, s->length[r] > 0 ? s->length[r] : 1)) {
            pp_schedule_free(c);
            return pp__fail(err, PP_ENOMEM, "out of memory");
        }
        if (s->length[r]) memcpy(c->actions[r], s->actions[r], (size_t)s->length[r] * sizeof(pp_action));
        c->length[r] = s->length[r];
    }
    *out = c;
    return pp__ok(err);
}

/* --- placement ----------------------------------------------------------------------------- */

int pp_stage_rank(const pp_schedule *s, int stage)
{
    if (!s || stage < 0 || stage >= s->num_stages) return -1;
    if (s->placement != PP_PLACEMENT_LOOPED) return stage < s->pp ? stage : 2 * s->pp - 1 - stage;
    return stage % s->pp;
}

int pp_stage_chunk(const pp_schedule *s, int stage)
{
    if (!s || stage < 0 || stage >= s->num_stages) return -1;
    if (s->placement != PP_PLACEMENT_LOOPED) return stage < s->pp ? 0 : 1;
    return stage / s->pp;
}

int pp_rank_chunk_stage(const pp_schedule *s, int rank, int chunk)
{
    if (!s || rank < 0 || rank >= s->pp || chunk < 0 || chunk >= s->vpp) return -1;
    if (s->placement != PP_PLACEMENT_LOOPED) return chunk == 0 ? rank : 2 * s->pp - 1 - rank;
    return chunk * s->pp + rank;
}

/* Routes (see >>schedule): unchecked forms for the inner loops, m in range. Under the dual
 * placement microbatches below mb/2 go down (stages 0..pp-1), the others up (pp..2pp-1). */
static int pp__first(const pp_schedule *s, int m)
{
    return s->placement == PP_PLACEMENT_DUAL && m >= s->mb / 2 ? s->pp : 0;
}

static int pp__last(const pp_schedule *s, int m)
{
    return s->placement == PP_PLACEMENT_DUAL && m < s->mb / 2 ? s->pp - 1 : s->num_stages - 1;
}

static int pp__on_route(const pp_schedule *s, int stage, int m)
{
    return stage >= pp__first(s, m) && stage <= pp__last(s, m);
}

int pp_mb_first_stage(const pp_schedule *s, int mb)
{
    return (!s || mb < 0 || mb >= s->mb) ? -1 : pp__first(s, mb);
}

int pp_mb_last_stage(const pp_schedule *s, int mb)
{
    return (!s || mb < 0 || mb >= s->mb) ? -1 : pp__last(s, mb);
}

int pp_stage_model_stage(const pp_schedule *s, int stage)
{
    if (!s || stage < 0 || stage >= s->num_stages) return -1;
    return s->placement == PP_PLACEMENT_DUAL ? stage % s->pp : stage;
}

/* --- generators ---------------------------------------------------------------------------- */

#define PP__EMIT(op_, stage_, mb_) \
    do { st = pp_schedule_append(s, r, pp__action((op_), (stage_), (mb_)), err); \
         if (st != PP_OK) return st; } while (0)

/* GPipe (Huang et al., 2019): every forward, then every backward, in microbatch order
 * (the order of PyTorch's ScheduleGPipe). */
static pp_status pp__build_gpipe(pp_schedule *s, pp_error *err)
{
    pp_status st;
    int r, m;
    for (r = 0; r < s->pp; r++) {
        for (m = 0; m < s->mb; m++) PP__EMIT(PP_OP_F, r, m);
        for (m = 0; m < s->mb; m++) PP__EMIT(PP_OP_B, r, m);
    }
    return pp__ok(err);
}

/* 1F1B / PipeDream-flush (Narayanan et al., 2019): rank r runs pp-r-1 warmup forwards, then
 * alternates one forward and one backward, then drains the remaining backwards. The warmup is
 * what keeps at most pp-r activations alive on rank r. */
static pp_status pp__build_1f1b(pp_schedule *s, pp_error *err)
{
    pp_status st;
    int r;
    for (r = 0; r < s->pp; r++) {
        int warmup = s->pp - r - 1, f = 0, b = 0;
        if (warmup > s->mb) warmup = s->mb;
        for (; f < warmup; f++) PP__EMIT(PP_OP_F, r, f);
        while (f < s->mb) {
            PP__EMIT(PP_OP_F, r, f); f++;
            PP__EMIT(PP_OP_B, r, b); b++;
        }
        for (; b < s->mb; b++) PP__EMIT(PP_OP_B, r, b);
    }
    return pp__ok(err);
}

/* Interleaved 1F1B with Megatron-LM's semantics (schedules.py, get_schedule_table and
 * get_pp_rank_microbatches): the k-th forward of every rank runs table[k] = (microbatch, chunk),
 * where the table walks microbatches in groups of G = microbatch_group_size_per_vp_stage, each
 * group through every chunk in turn (a last, smaller group takes what remains); the k-th backward
 * runs the same table entry with the chunk mirrored (vpp-1-chunk). Rank r first runs
 *     warmup = 2*(pp-r-1) + (vpp-1)*G         forwards (vpp > 1; 1F1B's pp-r-1 when vpp = 1)
 * capped at mb*vpp, then alternates F and B, then drains. With G = mb / max(1, mb / pp) this is
 * exactly PyTorch's ScheduleInterleaved1F1B order. */
static pp_status pp__build_interleaved(pp_schedule *s, const int *extra_warmup, pp_error *err)
{
    pp_status st;
    int total = s->mb * s->vpp, G = s->group, r, k, n = 0, lo;
    int *table_mb = (int *)pp__calloc((size_t)total, sizeof(int));
    int *table_chunk = (int *)pp__calloc((size_t)total, sizeof(int));
    if (!table_mb || !table_chunk) {
        PIPEPAR_FREE(table_mb); PIPEPAR_FREE(table_chunk);
        return pp__fail(err, PP_ENOMEM, "out of memory");
    }
    for (lo = 0; lo < s->mb; lo += G) {
        int hi = (lo + G >= s->mb) ? s->mb : lo + G, c, m;
        for (c = 0; c < s->vpp; c++)
            for (m = lo; m < hi; m++) { table_mb[n] = m; table_chunk[n] = c; n++; }
        if (hi == s->mb) break;
    }
    PIPEPAR_ASSERT(n == total);
    st = PP_OK;
    for (r = 0; r < s->pp && st == PP_OK; r++) {
        int warmup = s->vpp > 1 ? 2 * (s->pp - r - 1) + (s->vpp - 1) * G : s->pp - r - 1;
        int f = 0, b = 0;
        if (extra_warmup) warmup += extra_warmup[r];
        if (warmup > total) warmup = total;
#define PP__F_K(k_) pp__action(PP_OP_F, pp_rank_chunk_stage(s, r, table_chunk[k_]), table_mb[k_])
#define PP__B_K(k_) pp__action(PP_OP_B, pp_rank_chunk_stage(s, r, s->vpp - 1 - table_chunk[k_]), table_mb[k_])
        for (k = 0; k < warmup && st == PP_OK; k++, f++) st = pp_schedule_append(s, r, PP__F_K(f), err);
        while (f < total && st == PP_OK) {
            st = pp_schedule_append(s, r, PP__F_K(f), err); f++;
            if (st == PP_OK) { st = pp_schedule_append(s, r, PP__B_K(b), err); b++; }
        }
        for (; b < total && st == PP_OK; b++) st = pp_schedule_append(s, r, PP__B_K(b), err);
#undef PP__F_K
#undef PP__B_K
    }
    PIPEPAR_FREE(table_mb);
    PIPEPAR_FREE(table_chunk);
    return st == PP_OK ? pp__ok(err) : st;
}

/* Looped breadth-first (Lamy-Poirier, 2023; PyTorch's ScheduleLoopedBFS): each rank runs every
 * microbatch through its first chunk, then its second, ...; backwards mirror that, last chunk
 * first, microbatches in reverse. */
static pp_status pp__build_looped_bfs(pp_schedule *s, pp_error *err)
{
    pp_status st;
    int r, c, m;
    for (r = 0; r < s->pp; r++) {
        for (c = 0; c < s->vpp; c++)
            for (m = 0; m < s->mb; m++) PP__EMIT(PP_OP_F, pp_rank_chunk_stage(s, r, c), m);
        for (c = s->vpp - 1; c >= 0; c--)
            for (m = s->mb - 1; m >= 0; m--) PP__EMIT(PP_OP_B, pp_rank_chunk_stage(s, r, c), m);
    }
    return pp__ok(err);
}
#undef PP__EMIT

/* Megatron's table deadlocks outside the range Megatron-LM accepts (schedules.py raises unless
 * pp <= group <= mb and the last group is empty or at least pp). A last, smaller group with vpp >= 3:
 * e.g. pp=4, vpp=3, mb=5: rank 0's F(mb 4, chunk 2) waits for rank 3's F(4, chunk 1), which rank
 * 3 runs only after B(0, chunk 1), which waits for rank 0's B(0, chunk 2), which rank 0 runs after
 * that F. A group below pp (pp=4, vpp=2, mb=8, group 2): a rank's warmup ends before the microbatch
 * its first backward needs has reached the last stage. pipepar accepts any group and mb: where the
 * exact order deadlocks, every rank found waiting on a backward takes one more warmup forward,
 * until the order runs (this always ends: all-forward warmup is GPipe-like and deadlock-free).
 * Where Megatron's order runs, it is kept exactly. */
static pp_status pp__build_interleaved_deadlock_free(pp_schedule *s, pp_error *err)
{
    int *extra = NULL, r, attempt, total = s->mb * s->vpp;
    unsigned char *stuck = NULL;
    pp_status st;
    if ((s->mb % s->group == 0 && s->group >= s->pp) || s->vpp == 1 || s->pp == 1)
        return pp__build_interleaved(s, NULL, err);   /* Megatron's own range: its order runs as is */
    extra = (int *)pp__calloc((size_t)s->pp, sizeof(int));
    stuck = (unsigned char *)pp__calloc((size_t)s->pp, 1);
    if (!extra || !stuck) { st = pp__fail(err, PP_ENOMEM, "out of memory"); goto done; }
    for (attempt = 0;; attempt++) {
        pp_schedule *c = NULL;
        int changed = 0;
        for (r = 0; r < s->pp; r++) s->length[r] = 0;
        st = pp__build_interleaved(s, extra, err);
        if (st != PP_OK) goto done;
        st = pp_schedule_copy(s, &c, err);
        if (st != PP_OK) goto done;
        memset(stuck, 0, (size_t)s->pp);
        st = pp__lower(c, stuck, err);
        pp_schedule_free(c);
        if (st != PP_EDEADLOCK) goto done;
        for (r = 0; r < s->pp; r++)
            if (stuck[r] && extra[r] < total) { extra[r]++; changed = 1; }
        if (!changed) goto done;   /* keeps the deadlock message */
    }
done:
    PIPEPAR_FREE(extra);
    PIPEPAR_FREE(stuck);
    return st == PP_OK ? pp__ok(err) : st;
}

/* The zero-bubble family lives in its own section (>>zerobubble). */
static pp_status pp__build_zero_bubble(const pp_schedule_config *cfg, pp_schedule *s, pp_error *err);

pp_status pp_schedule_build(const pp_schedule_config *cfg, pp_schedule **out, pp_error *err)
{
    pp_schedule_config c;
    pp_placement placement = PP_PLACEMENT_LOOPED;
    pp_schedule *s = NULL;
    pp_status st;
    const char *kn;
    if (!cfg || !out) return pp__fail(err, PP_EINVAL, "cfg and out: must not be NULL");
    *out = NULL;
    c = *cfg;
    kn = pp_schedule_kind_name(c.kind);
    if (c.kind <= PP_KIND_NONE || c.kind >= PP_CUSTOM)
        return pp__fail(err, PP_EINVAL, "kind=%d: not a schedule kind that can be built", (int)c.kind);
    if (c.pp < 1) return pp__fail(err, PP_EINVAL, "pp=%d: must be at least 1", c.pp);
    if (c.mb < 1) return pp__fail(err, PP_EINVAL, "mb=%d: must be at least 1", c.mb);
    if (c.vpp < 0) return pp__fail(err, PP_EINVAL, "vpp=%d: must be at least 1 (0 means the default)", c.vpp);
    if (c.group < 0) return pp__fail(err, PP_EINVAL, "group=%d: must be at least 1 (0 means pp)", c.group);
    if (c.max_live < 0) return pp__fail(err, PP_EINVAL, "max_live=%d: must be at least 1 (0 means the kind's own)", c.max_live);
    if (c.kind == PP_ZBV || c.kind == PP_DUALPIPEV || c.kind == PP_DUALPIPE) {
        placement = c.kind == PP_DUALPIPE ? PP_PLACEMENT_DUAL : PP_PLACEMENT_V;
        if (c.vpp == 0) c.vpp = 2;
        if (c.vpp != 2)
            return pp__fail(err, PP_EUNSUPPORTED, "vpp=%d: %s uses %s, exactly 2 chunks per rank", c.vpp, kn,
                            c.kind == PP_DUALPIPE ? "two pipelines in opposite directions" : "a V-shaped placement");
    }
    if (c.kind == PP_DUALPIPE) {
        /* deepseek-ai/DualPipe asserts num_ranks % 2 == 0 and num_chunks % 2 == 0 (half of the
         * microbatches enter at each end); see >>zerobubble for why we need no more than that */
        if (c.pp % 2 != 0)
            return pp__fail(err, PP_EUNSUPPORTED, "pp=%d: dualpipe needs an even pp (rank r runs the down stage r "
                            "and the up stage of rank pp-1-r)", c.pp);
        if (c.mb % 2 != 0)
            return pp__fail(err, PP_EUNSUPPORTED, "mb=%d: dualpipe needs an even mb (mb/2 microbatches run down from "
                            "rank 0, mb/2 up from rank pp-1)", c.mb);
    }
    if (c.vpp == 0) c.vpp = 1;
    /* interleaved-zb defaults to PyTorch's round size, mb / max(1, mb / pp), so that its order is
     * PyTorch's; interleaved 1F1B defaults to Megatron's microbatch_group_size_per_vp_stage = pp. */
    if (c.group == 0)
        c.group = c.kind == PP_INTERLEAVED_ZB ? c.mb / (c.mb / c.pp > 1 ? c.mb / c.pp : 1) : c.pp;
    switch (c.kind) {
    case PP_GPIPE: case PP_1F1B: case PP_ZB_H1: case PP_ZB_H2:
        if (c.vpp != 1)
            return pp__fail(err, PP_EUNSUPPORTED,
                            "vpp=%d: %s runs one chunk per rank (use interleaved or looped-bfs for several)",
                            c.vpp, kn);
        break;
    case PP_INTERLEAVED_1F1B:
        /* any mb >= 1 and group >= 1: outside Megatron-LM's range (pp <= group <= mb, a last group
         * of 0 or >= pp) the deadlock-free builder below makes the order run. Below pp, each of its
         * tries lowers the whole schedule again and the tries grow with pp: up to pp 64 (3 s at
         * vpp 4, mb 256, group 1), where 256 took 80 s */
        if (c.group < c.pp && c.group < c.mb && c.pp > 64 && c.vpp > 1)
            return pp__fail(err, PP_EUNSUPPORTED, "group=%d: below pp=%d, outside Megatron-LM's range (pp <= group <= "
                            "mb); pipepar builds such orders up to pp=64 (larger ones take minutes)", c.group, c.pp);
        break;
    default: break;
    }
    if (c.max_live && c.kind != PP_ZB_H2)   /* for every kind, not only the zero-bubble family */
        return pp__fail(err, PP_EUNSUPPORTED, "max_live=%d: %s has a fixed memory profile and takes no cap (zb-h2 "
                        "and the greedy schedule of pp_search do)", c.max_live, kn);
    if (cfg->group != 0 && c.kind != PP_INTERLEAVED_1F1B && c.kind != PP_INTERLEAVED_ZB)
        return pp__fail(err, PP_EUNSUPPORTED, "group=%d: only interleaved schedules take a microbatch group size",
                        cfg->group);
    st = pp_schedule_create(c.pp, c.vpp, c.mb, placement, &s, err);
    if (st != PP_OK) return st;
    s->kind = c.kind;
    s->group = c.group;
    switch (c.kind) {
    case PP_GPIPE: st = pp__build_gpipe(s, err); break;
    case PP_1F1B: st = pp__build_1f1b(s, err); break;
    case PP_INTERLEAVED_1F1B: st = pp__build_interleaved_deadlock_free(s, err); break;
    case PP_LOOPED_BFS: st = pp__build_looped_bfs(s, err); break;
    default: st = pp__build_zero_bubble(&c, s, err); break;
    }
    if (st != PP_OK) { pp_schedule_free(s); return st; }
    *out = s;
    return pp__ok(err);
}

/* --- action text ---------------------------------------------------------------------------- */

int pp_action_format(pp_action a, char *buf, size_t size)
{
    if (a.op == PP_OP_FB)
        return snprintf(buf, size, "(%dF%d;%dB%d)OVERLAP_F_B", (int)a.stage, (int)a.mb, (int)a.stage2, (int)a.mb2);
    return snprintf(buf, size, "%d%s%d", (int)a.stage, pp_op_name((pp_op)a.op), (int)a.mb);
}

/* Reads a non-negative decimal at *p (no sign, at most 9 digits); -1 when there is none. */
static int pp__read_uint(const char **p)
{
    int v = 0, n = 0;
    while (**p >= '0' && **p <= '9') {
        if (n == 9) return -1;
        v = v * 10 + (**p - '0');
        (*p)++; n++;
    }
    return n ? v : -1;
}

static pp_status pp__parse_simple_action(const char *text, const char *end, pp_action *out, pp_error *err)
{
    static const struct { const char *name; int op; } ops[] = {
        { "SEND_F", PP_OP_SEND_F }, { "RECV_F", PP_OP_RECV_F }, { "SEND_B", PP_OP_SEND_B },
        { "RECV_B", PP_OP_RECV_B }, { "F", PP_OP_F }, { "B", PP_OP_B }, { "I", PP_OP_I }, { "W", PP_OP_W }
    };
    const char *p = text;
    int stage, mb;
    size_t k, n;
    stage = pp__read_uint(&p);
    if (stage < 0)
        return pp__fail(err, PP_EPARSE, "action '%.*s': expected <stage><op><microbatch>, e.g. 4F0",
                        (int)(end - text), text);
    for (k = 0; k < sizeof ops / sizeof ops[0]; k++) {
        n = strlen(ops[k].name);
        if ((size_t)(end - p) > n && strncmp(p, ops[k].name, n) == 0 && p[n] >= '0' && p[n] <= '9') break;
    }
    if (k == sizeof ops / sizeof ops[0])
        return pp__fail(err, PP_EPARSE, "action '%.*s': unknown operation (F, B, I, W, SEND_F, RECV_F, "
                        "SEND_B, RECV_B)", (int)(end - text), text);
    p += strlen(ops[k].name);
    mb = pp__read_uint(&p);
    if (mb < 0 || p != end)
        return pp__fail(err, PP_EPARSE, "action '%.*s': expected <stage><op><microbatch>, e.g. 4F0",
                        (int)(end - text), text);
    *out = pp__action(ops[k].op, stage, mb);
    return PP_OK;
}

pp_status pp_action_parse(const char *text, pp_action *out, pp_error *err)
{
    const char *b, *e;
    pp_status st;
    if (!text || !out) return pp__fail(err, PP_EINVAL, "text and out: must not be NULL");
    b = text; e = text + strlen(text);
    while (b < e && (*b == ' ' || *b == '\t' || *b == '\r' || *b == '\n')) b++;
    while (e > b && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r' || e[-1] == '\n')) e--;
    if (b == e) return pp__fail(err, PP_EPARSE, "action '': empty");
    if (*b == '(') {   /* "(0F1;3B0)OVERLAP_F_B" */
        const char *semi = (const char *)memchr(b, ';', (size_t)(e - b));
        const char *close = (const char *)memchr(b, ')', (size_t)(e - b));
        pp_action f, bw;
        if (!semi || !close || semi > close || strncmp(close, ")OVERLAP_F_B", (size_t)(e - close)) != 0 ||
            (size_t)(e - close) != strlen(")OVERLAP_F_B"))
            return pp__fail(err, PP_EPARSE, "action '%.*s': expected (<s>F<m>;<s>B<m>)OVERLAP_F_B",
                            (int)(e - b), b);
        st = pp__parse_simple_action(b + 1, semi, &f, err);
        if (st != PP_OK) return st;
        st = pp__parse_simple_action(semi + 1, close, &bw, err);
        if (st != PP_OK) return st;
        if (f.op != PP_OP_F || bw.op != PP_OP_B)
            return pp__fail(err, PP_EPARSE, "action '%.*s': an overlapped action pairs one F with one B",
                            (int)(e - b), b);
        *out = f;
        out->op = PP_OP_FB; out->stage2 = bw.stage; out->mb2 = bw.mb;
        return pp__ok(err);
    }
    st = pp__parse_simple_action(b, e, out, err);
    return st == PP_OK ? pp__ok(err) : st;
}

/* --- dependencies shared by lowering, validation and simulation ---------------------------- */

/* Flat index of (stage, microbatch). */
#define PP__SM(s, stage, m) ((size_t)(stage) * (size_t)(s)->mb + (size_t)(m))

/* Per-(stage, microbatch) progress of compute, used while walking programs. */
typedef struct pp__progress {
    unsigned char *f_done, *b_done, *w_done;   /* b_done: B or I (the input gradient exists) */
} pp__progress;

static int pp__progress_init(pp__progress *p, const pp_schedule *s)
{
    size_t n = (size_t)s->num_stages * (size_t)s->mb;
    p->f_done = (unsigned char *)pp__calloc(n, 1);
    p->b_done = (unsigned char *)pp__calloc(n, 1);
    p->w_done = (unsigned char *)pp__calloc(n, 1);
    return p->f_done && p->b_done && p->w_done;
}

static void pp__progress_free(pp__progress *p)
{
    PIPEPAR_FREE(p->f_done); PIPEPAR_FREE(p->b_done); PIPEPAR_FREE(p->w_done);
}

/* Checks structure: ops known, stages and microbatches in range, each compute action on its
 * stage's rank, and each (stage, mb) computed exactly once: one F, and one B or one I + one W. */
static pp_status pp__check_structure(const pp_schedule *s, pp_error *err)
{
    size_t n = (size_t)s->num_stages * (size_t)s->mb, k;
    unsigned char *nf = (unsigned char *)pp__calloc(n, 1), *nb = (unsigned char *)pp__calloc(n, 1);
    unsigned char *ni = (unsigned char *)pp__calloc(n, 1), *nw = (unsigned char *)pp__calloc(n, 1);
    pp_status st = PP_OK;
    int r, i;
    char txt[64];
    if (!nf || !nb || !ni || !nw) { st = pp__fail(err, PP_ENOMEM, "out of memory"); goto done; }
    for (r = 0; r < s->pp && st == PP_OK; r++) {
        for (i = 0; i < s->length[r]; i++) {
            pp_action a = s->actions[r][i];
            int half;
            if (a.op < 0 || a.op >= PP_OP_COUNT) {
                st = pp__fail(err, PP_EINVALID_SCHEDULE, "rank %d position %d: unknown op %d", r, i, (int)a.op);
                break;
            }
            if (a.stage < 0 || a.stage >= s->num_stages || a.mb < 0 || a.mb >= s->mb ||
                (a.op == PP_OP_FB && (a.stage2 < 0 || a.stage2 >= s->num_stages || a.mb2 < 0 || a.mb2 >= s->mb))) {
                pp_action_format(a, txt, sizeof txt);
                st = pp__fail(err, PP_EINVALID_SCHEDULE,
                              "rank %d position %d: %s is out of range (stages 0..%d, microbatches 0..%d)",
                              r, i, txt, s->num_stages - 1, s->mb - 1);
                break;
            }
            if (pp__is_comm(a.op)) continue;
            for (half = 0; half < (a.op == PP_OP_FB ? 2 : 1); half++) {
                int op = a.op == PP_OP_FB ? (half ? PP_OP_B : PP_OP_F) : a.op;
                int stg = half ? a.stage2 : a.stage, m = half ? a.mb2 : a.mb;
                unsigned char *cnt = op == PP_OP_F ? nf : op == PP_OP_B ? nb : op == PP_OP_I ? ni : nw;
                if (!pp__on_route(s, stg, m)) {
                    pp_action_format(a, txt, sizeof txt);
                    st = pp__fail(err, PP_EINVALID_SCHEDULE,
                                  "rank %d position %d: %s computes stage %d, which is not on microbatch %d's route "
                                  "(stages %d..%d)", r, i, txt, stg, m, pp__first(s, m), pp__last(s, m));
                    break;
                }
                if (pp_stage_rank(s, stg) != r) {
                    pp_action_format(a, txt, sizeof txt);
                    st = pp__fail(err, PP_EINVALID_SCHEDULE,
                                  "rank %d position %d: %s computes stage %d, which lives on rank %d", r, i, txt,
                                  stg, pp_stage_rank(s, stg));
                    break;
                }
                if (cnt[PP__SM(s, stg, m)]++) {
                    pp_action_format(a, txt, sizeof txt);
                    st = pp__fail(err, PP_EINVALID_SCHEDULE,
                                  "rank %d position %d: %s is the second %s of stage %d microbatch %d (each runs once)",
                                  r, i, txt, pp_op_name((pp_op)op), stg, m);
                    break;
                }
            }
            if (st != PP_OK) break;
        }
    }
    for (k = 0; k < n && st == PP_OK; k++) {
        int stg = (int)(k / (size_t)s->mb), m = (int)(k % (size_t)s->mb);
        if (!pp__on_route(s, stg, m)) continue;
        if (!nf[k])
            st = pp__fail(err, PP_EINVALID_SCHEDULE, "stage %d microbatch %d: no F on rank %d", stg, m,
                          pp_stage_rank(s, stg));
        else if (!nb[k] && !ni[k])
            st = pp__fail(err, PP_EINVALID_SCHEDULE, "stage %d microbatch %d: no B (or I) on rank %d", stg, m,
                          pp_stage_rank(s, stg));
        else if (nb[k] && (ni[k] || nw[k]))
            st = pp__fail(err, PP_EINVALID_SCHEDULE,
                          "stage %d microbatch %d: has both a full B and a split I/W backward", stg, m);
        else if (ni[k] != nw[k])
            st = pp__fail(err, PP_EINVALID_SCHEDULE, "stage %d microbatch %d: an I needs exactly one W (rank %d)",
                          stg, m, pp_stage_rank(s, stg));
    }
done:
    PIPEPAR_FREE(nf); PIPEPAR_FREE(nb); PIPEPAR_FREE(ni); PIPEPAR_FREE(nw);
    return st;
}

/* Where a compute half's inputs come from. For F(s,m): the output of F(s-1,m) (none at the first
 * stage of m's route). For B/I(s,m): its own F(s,m) and the input-gradient of B/I(s+1,m) (none at
 * the last stage of m's route).
 * For W(s,m): its own I(s,m). Returns 1 when the input from a *neighbouring stage* comes from
 * another rank, and sets *from_stage. */
static int pp__cross_input(const pp_schedule *s, int op, int stage, int m, int *from_stage)
{
    int r = pp_stage_rank(s, stage);
    if (op == PP_OP_F) {
        if (stage == pp__first(s, m)) return 0;
        *from_stage = stage - 1;
    } else if (op == PP_OP_B || op == PP_OP_I) {
        if (stage == pp__last(s, m)) return 0;
        *from_stage = stage + 1;
    } else return 0;
    return pp_stage_rank(s, *from_stage) != r;
}

/* Checks that a compute half can run now on its rank, given local progress and the tensors that
 * arrived from other ranks (arrived_f / arrived_b, indexed by the consumer's (stage, mb)).
 * Returns 1 if ready; 0 if it waits for a tensor from another rank; -1 (with *why) if a local
 * dependency is missing, which program order can never repair. */
static int pp__half_ready(const pp_schedule *s, const pp__progress *p, const unsigned char *arrived_f,
                          const unsigned char *arrived_b, int op, int stage, int m, const char **why)
{
    size_t k = PP__SM(s, stage, m);
    int from;
    if (op == PP_OP_F) {
        if (stage == pp__first(s, m)) return 1;
        if (pp__cross_input(s, op, stage, m, &from)) return arrived_f[k] ? 1 : 0;
        if (!p->f_done[PP__SM(s, stage - 1, m)]) { *why = "comes before the F of the previous stage on the same rank"; return -1; }
        return 1;
    }
    if (op == PP_OP_W) {
        if (!p->b_done[k]) { *why = "comes before its I"; return -1; }
        return 1;
    }
    /* B or I */
    if (!p->f_done[k]) { *why = "comes before its own F"; return -1; }
    if (stage == pp__last(s, m)) return 1;
    if (pp__cross_input(s, op, stage, m, &from)) return arrived_b[k] ? 1 : 0;
    if (!p->b_done[PP__SM(s, stage + 1, m)]) { *why = "comes before the backward of the next stage on the same rank"; return -1; }
    return 1;
}

static void pp__mark_done(const pp_schedule *s, pp__progress *p, int op, int stage, int m)
{
    size_t k = PP__SM(s, stage, m);
    if (op == PP_OP_F) p->f_done[k] = 1;
    else if (op == PP_OP_B) { p->b_done[k] = 1; p->w_done[k] = 1; }
    else if (op == PP_OP_I) p->b_done[k] = 1;
    else if (op == PP_OP_W) p->w_done[k] = 1;
}

/* The halves of a compute action: F, B, I, W have one; FB has two (F then B). */
static int pp__halves(pp_action a, int *ops, int *stages, int *mbs)
{
    if (a.op == PP_OP_FB) {
        ops[0] = PP_OP_F; stages[0] = a.stage; mbs[0] = a.mb;
        ops[1] = PP_OP_B; stages[1] = a.stage2; mbs[1] = a.mb2;
        return 2;
    }
    ops[0] = a.op; stages[0] = a.stage; mbs[0] = a.mb;
    return 1;
}

/* --- lowering ------------------------------------------------------------------------------- */

int pp_schedule_group_end(const pp_schedule *s, int rank, int i)
{
    int j;
    if (!s || rank < 0 || rank >= s->pp || i < 0 || i >= s->length[rank]) return i + 1;
    if (!pp__is_comm(s->actions[rank][i].op)) return i + 1;
    for (j = i + 1; j < s->length[rank]; j++)
        if (!pp__is_comm(s->actions[rank][j].op) || s->actions[rank][j].group != s->actions[rank][i].group) break;
    return j;
}

void pp_schedule_strip_comm(pp_schedule *s)
{
    int r, i, n;
    if (!s) return;
    for (r = 0; r < s->pp; r++) {
        for (i = 0, n = 0; i < s->length[r]; i++)
            if (!pp__is_comm(s->actions[r][i].op)) s->actions[r][n++] = s->actions[r][i];
        s->length[r] = n;
    }
    s->lowered = 0;
}

/* Replaces every `from` action (PP_OP_FB or PP_OP_B) with its two halves, in place, and lowers
 * again if s was lowered. The split schedule is built (and lowered) aside, and swapped in only
 * once all went well, so that a failure leaves s as it was. */
static pp_status pp__split_actions(pp_schedule *s, pp_op from, pp_error *err)
{
    pp_schedule *c = NULL;
    pp_status st;
    int r, i, found = 0, *ip;
    pp_action **ap;
    if (!s) return pp__fail(err, PP_EINVAL, "schedule: must not be NULL");
    for (r = 0; r < s->pp; r++)
        for (i = 0; i < s->length[r]; i++) found += s->actions[r][i].op == (int32_t)from;
    if (found == 0) return pp__ok(err);   /* nothing to split: s stays as it is, communication too */
    st = pp_schedule_create(s->pp, s->vpp, s->mb, s->placement, &c, err);
    if (st != PP_OK) return st;
    c->kind = s->kind; c->group = s->group;
    for (r = 0; r < s->pp && st == PP_OK; r++)
        for (i = 0; i < s->length[r] && st == PP_OK; i++) {
            pp_action x = s->actions[r][i], first = x, second = x;
            if (pp__is_comm(x.op)) continue;           /* lowered again below */
            if (x.op != (int32_t)from) { st = pp_schedule_append(c, r, x, err); continue; }
            if (from == PP_OP_FB) {   /* the F half, then the B half of another (stage, microbatch) */
                first.op = PP_OP_F;
                second.op = PP_OP_B; second.stage = x.stage2; second.mb = x.mb2;
                first.stage2 = first.mb2 = second.stage2 = second.mb2 = -1;
            } else {                  /* the input gradient, then the weight gradient */
                first.op = PP_OP_I;
                second.op = PP_OP_W;
            }
            st = pp_schedule_append(c, r, first, err);
            if (st == PP_OK) st = pp_schedule_append(c, r, second, err);
        }
    if (st == PP_OK && s->lowered) st = pp_schedule_lower(c, err);
    if (st != PP_OK) { pp_schedule_free(c); return st; }
    ap = s->actions; s->actions = c->actions; c->actions = ap;
    ip = s->length; s->length = c->length; c->length = ip;
    ip = s->capacity; s->capacity = c->capacity; c->capacity = ip;
    s->lowered = c->lowered;
    pp_schedule_free(c);
    return pp__ok(err);
}

pp_status pp_schedule_split_overlaps(pp_schedule *s, pp_error *err)
{
    return pp__split_actions(s, PP_OP_FB, err);
}

pp_status pp_schedule_split_backward(pp_schedule *s, pp_error *err)
{
    return pp__split_actions(s, PP_OP_B, err);
}

/* Lowering walks the compute orders in lock-step rounds: in each round every rank runs its next
 * compute action if its inputs arrived in an earlier round, then every tensor produced in the
 * round that crosses ranks gets a SEND on its producer and a RECV on its consumer, both placed
 * in that round's communication group (group = round + 1, so that a rank idle for a round does
 * not merge two rounds into one group: each group meets exactly one group of each peer, as
 * Megatron pairs send_forward_recv_backward on one rank with send_backward_recv_forward on the
 * next). Each pair of ranks therefore sees its transfers in the
 * same round order on both sides, and a group of round k only ever waits for groups of round k:
 * the programs cannot deadlock, even with sends that block until received. (This is the
 * lock-step table PyTorch draws with idle '_' steps; Megatron's batched p2p per step is the same
 * idea.) A round in which no rank can move means the compute order itself is circular. */
pp_status pp_schedule_lower(pp_schedule *s, pp_error *err)
{
    return pp__lower(s, NULL, err);
}

/* stuck_on_backward (optional, [pp]): on PP_EDEADLOCK, 1 for each rank whose next action is a
 * backward waiting for a gradient (the interleaved generator gives those ranks more warmup). */
static pp_status pp__lower(pp_schedule *s, unsigned char *stuck_on_backward, pp_error *err)
{
    pp_status st;
    int *pos = NULL, *ran = NULL, *newlen = NULL, *newcap = NULL;
    int r, total = 0, doneall = 0, round;
    size_t n;
    unsigned char *arrived_f = NULL, *arrived_b = NULL;
    pp_action **out = NULL, *ran_action = NULL;
    pp__progress prog = { NULL, NULL, NULL };
    char txt[64];
    if (!s) return pp__fail(err, PP_EINVAL, "schedule: must not be NULL");
    pp_schedule_strip_comm(s);
    st = pp__check_structure(s, err);
    if (st != PP_OK) return st;
    n = (size_t)s->num_stages * (size_t)s->mb;
    pos = (int *)pp__calloc((size_t)s->pp, sizeof(int));
    ran = (int *)pp__calloc((size_t)s->pp, sizeof(int));
    newlen = (int *)pp__calloc((size_t)s->pp, sizeof(int));
    newcap = (int *)pp__calloc((size_t)s->pp, sizeof(int));
    out = (pp_action **)pp__calloc((size_t)s->pp, sizeof(pp_action *));
    ran_action = (pp_action *)pp__calloc((size_t)s->pp, sizeof(pp_action));
    arrived_f = (unsigned char *)pp__calloc(n, 1);
    arrived_b = (unsigned char *)pp__calloc(n, 1);
    if (!pos || !ran || !newlen || !newcap || !out || !ran_action || !arrived_f ||
        !arrived_b || !pp__progress_init(&prog, s)) {
        st = pp__fail(err, PP_ENOMEM, "out of memory");
        goto done;
    }
    for (r = 0; r < s->pp; r++) {
        total += s->length[r];
        /* compute + at most 2 sends and 2 receives per compute action, in the worst case */
        newcap[r] = s->length[r] * 5 + 4;
        out[r] = (pp_action *)PIPEPAR_MALLOC((size_t)newcap[r] * sizeof(pp_action));
        if (!out[r]) { st = pp__fail(err, PP_ENOMEM, "out of memory"); goto done; }
    }
    for (round = 0; doneall < total; round++) {
        int moved = 0;
        /* 1. compute: each rank's next action, if its inputs arrived in an earlier round */
        for (r = 0; r < s->pp; r++) {
            pp_action a;
            int ops[2], stg[2], mbs[2], h, nh, ready = 1;
            ran[r] = 0;
            if (pos[r] >= s->length[r]) continue;
            a = s->actions[r][pos[r]];
            nh = pp__halves(a, ops, stg, mbs);
            for (h = 0; h < nh && ready == 1; h++) {
                const char *why = "";
                ready = pp__half_ready(s, &prog, arrived_f, arrived_b, ops[h], stg[h], mbs[h], &why);
                if (ready < 0) {
                    pp_action_format(a, txt, sizeof txt);
                    st = pp__fail(err, PP_EINVALID_SCHEDULE, "rank %d position %d: %s %s", r, pos[r], txt, why);
                    goto done;
                }
            }
            if (!ready) continue;
            ran[r] = 1;
        }
        for (r = 0; r < s->pp; r++) {
            pp_action a;
            int ops[2], stg[2], mbs[2], h, nh;
            if (!ran[r]) continue;
            a = s->actions[r][pos[r]++];
            ran_action[r] = a;
            out[r][newlen[r]++] = a;
            nh = pp__halves(a, ops, stg, mbs);
            for (h = 0; h < nh; h++) {
                pp__mark_done(s, &prog, ops[h], stg[h], mbs[h]);
            }
            moved++;
            doneall++;
        }
        if (!moved) {
            /* Name the stuck ranks and what each waits for. */
            pp__text t = { NULL, 0, 0, 0 };
            int shown = 0;
            for (r = 0; r < s->pp; r++) {
                pp_action a;
                if (pos[r] >= s->length[r]) continue;
                a = s->actions[r][pos[r]];
                if (stuck_on_backward) stuck_on_backward[r] = a.op == PP_OP_B || a.op == PP_OP_I;
                if (shown >= 4) continue;
                pp_action_format(a, txt, sizeof txt);
                pp__text_printf(&t, "%srank %d position %d (%s)", shown ? ", " : "", r, pos[r], txt);
                shown++;
            }
            st = pp__fail(err, PP_EDEADLOCK,
                          "compute order deadlocks: every remaining action waits for a tensor no rank can "
                          "produce first: %s", t.data ? t.data : "");
            pp__text_free(&t);
            goto done;
        }
        /* 2. communication of this round: tensors produced now that cross ranks */
        for (r = 0; r < s->pp; r++) {
            pp_action a;
            int ops[2], stg[2], mbs[2], h, nh;
            if (!ran[r]) continue;
            a = ran_action[r];   /* out[r]'s tail may already hold a RECV appended for another rank */
            nh = pp__halves(a, ops, stg, mbs);
            for (h = 0; h < nh; h++) {
                int sg = stg[h], m = mbs[h], to;
                if (ops[h] == PP_OP_F && sg < pp__last(s, m) && (to = pp_stage_rank(s, sg + 1)) != r) {
                    out[r][newlen[r]] = pp__action(PP_OP_SEND_F, sg, m);
                    out[r][newlen[r]++].group = round + 1;
                    out[to][newlen[to]] = pp__action(PP_OP_RECV_F, sg + 1, m);
                    out[to][newlen[to]++].group = round + 1;
                    arrived_f[PP__SM(s, sg + 1, m)] = 1;
                }
                if ((ops[h] == PP_OP_B || ops[h] == PP_OP_I) && sg > pp__first(s, m) && (to = pp_stage_rank(s, sg - 1)) != r) {
                    out[r][newlen[r]] = pp__action(PP_OP_SEND_B, sg, m);
                    out[r][newlen[r]++].group = round + 1;
                    out[to][newlen[to]] = pp__action(PP_OP_RECV_B, sg - 1, m);
                    out[to][newlen[to]++].group = round + 1;
                    arrived_b[PP__SM(s, sg - 1, m)] = 1;
                }
            }
        }
    }
    for (r = 0; r < s->pp; r++) {
        PIPEPAR_FREE(s->actions[r]);
        s->actions[r] = out[r];
        s->length[r] = newlen[r];
        s->capacity[r] = newcap[r];
        out[r] = NULL;
    }
    s->lowered = 1;
    st = pp__ok(err);
done:
    if (out) for (r = 0; r < s->pp; r++) PIPEPAR_FREE(out[r]);
    PIPEPAR_FREE(out); PIPEPAR_FREE(ran_action); PIPEPAR_FREE(pos); PIPEPAR_FREE(ran); PIPEPAR_FREE(newlen); PIPEPAR_FREE(newcap);
    PIPEPAR_FREE(arrived_f); PIPEPAR_FREE(arrived_b);
    pp__progress_free(&prog);
    return st;
}

/* --- validation ------------------------------------------------------------------------------ */

/* The matching key of a communication action: (direction, producer stage, microbatch).
 * SEND_F(s,m) pairs with RECV_F(s+1,m); SEND_B(s,m) pairs with RECV_B(s-1,m). */
static size_t pp__comm_key(const pp_schedule *s, pp_action a)
{
    size_t plane = (size_t)s->num_stages * (size_t)s->mb;
    switch (a.op) {
    case PP_OP_SEND_F: return PP__SM(s, a.stage, a.mb);
    case PP_OP_RECV_F: return PP__SM(s, a.stage - 1, a.mb);
    case PP_OP_SEND_B: return plane + PP__SM(s, a.stage, a.mb);
    default:           return plane + PP__SM(s, a.stage + 1, a.mb);   /* RECV_B */
    }
}

static pp_status pp__validate_lowered(const pp_schedule *s, pp_error *err)
{
    size_t plane = (size_t)s->num_stages * (size_t)s->mb, nkeys = 2 * plane;
    int *send_rank = NULL, *send_pos = NULL, *recv_rank = NULL, *recv_pos = NULL;
    int *pc = NULL, *gstart = NULL, *gend = NULL;
    unsigned char *completed = NULL, *arrived_f = NULL, *arrived_b = NULL;
    pp__progress prog = { NULL, NULL, NULL };
    pp_status st = PP_OK;
    int r, i, finished = 0;
    size_t k;
    char txt[64], txt2[64];

    send_rank = (int *)PIPEPAR_MALLOC(nkeys * sizeof(int));
    send_pos = (int *)PIPEPAR_MALLOC(nkeys * sizeof(int));
    recv_rank = (int *)PIPEPAR_MALLOC(nkeys * sizeof(int));
    recv_pos = (int *)PIPEPAR_MALLOC(nkeys * sizeof(int));
    completed = (unsigned char *)pp__calloc(nkeys, 1);
    arrived_f = (unsigned char *)pp__calloc(plane, 1);
    arrived_b = (unsigned char *)pp__calloc(plane, 1);
    pc = (int *)pp__calloc((size_t)s->pp, sizeof(int));
    gstart = (int *)pp__calloc((size_t)s->pp, sizeof(int));
    gend = (int *)pp__calloc((size_t)s->pp, sizeof(int));
    if (!send_rank || !send_pos || !recv_rank || !recv_pos || !completed || !arrived_f || !arrived_b || !pc ||
        !gstart || !gend || !pp__progress_init(&prog, s)) {
        st = pp__fail(err, PP_ENOMEM, "out of memory");
        goto done;
    }
    for (k = 0; k < nkeys; k++) send_rank[k] = recv_rank[k] = -1;

    /* 1. every communication action is well formed and has exactly one partner */
    for (r = 0; r < s->pp && st == PP_OK; r++) {
        for (i = 0; i < s->length[r]; i++) {
            pp_action a = s->actions[r][i];
            int peer_stage, is_send = a.op == PP_OP_SEND_F || a.op == PP_OP_SEND_B;
            if (!pp__is_comm(a.op)) continue;
            if (pp_stage_rank(s, a.stage) != r) {
                pp_action_format(a, txt, sizeof txt);
                st = pp__fail(err, PP_EINVALID_SCHEDULE, "rank %d position %d: %s belongs to stage %d, which lives on rank %d",
                              r, i, txt, (int)a.stage, pp_stage_rank(s, a.stage));
                break;
            }
            peer_stage = (a.op == PP_OP_SEND_F || a.op == PP_OP_RECV_B) ? a.stage + 1 : a.stage - 1;
            if (!pp__on_route(s, a.stage, a.mb)) {
                pp_action_format(a, txt, sizeof txt);
                st = pp__fail(err, PP_EINVALID_SCHEDULE, "rank %d position %d: %s: stage %d is not on microbatch %d's "
                              "route (stages %d..%d)", r, i, txt, (int)a.stage, (int)a.mb, pp__first(s, a.mb),
                              pp__last(s, a.mb));
                break;
            }
            if (peer_stage < pp__first(s, a.mb) || peer_stage > pp__last(s, a.mb)) {
                pp_action_format(a, txt, sizeof txt);
                st = pp__fail(err, PP_EINVALID_SCHEDULE, "rank %d position %d: %s: stage %d has no %s stage to talk to",
                              r, i, txt, (int)a.stage, peer_stage < pp__first(s, a.mb) ? "previous" : "next");
                break;
            }
            if (pp_stage_rank(s, peer_stage) == r) {
                pp_action_format(a, txt, sizeof txt);
                st = pp__fail(err, PP_EINVALID_SCHEDULE,
                              "rank %d position %d: %s: stages %d and %d share rank %d, the tensor passes in place "
                              "(no communication)", r, i, txt, (int)a.stage, peer_stage, r);
                break;
            }
            k = pp__comm_key(s, a);
            if ((is_send ? send_rank : recv_rank)[k] >= 0) {
                pp_action_format(a, txt, sizeof txt);
                st = pp__fail(err, PP_EINVALID_SCHEDULE, "rank %d position %d: %s appears twice (first at rank %d position %d)",
                              r, i, txt, (is_send ? send_rank : recv_rank)[k], (is_send ? send_pos : recv_pos)[k]);
                break;
            }
            (is_send ? send_rank : recv_rank)[k] = r;
            (is_send ? send_pos : recv_pos)[k] = i;
        }
    }
    for (k = 0; k < nkeys && st == PP_OK; k++) {
        int dir_b = k >= plane;
        int stg = (int)((k % plane) / (size_t)s->mb), m = (int)(k % (size_t)s->mb);
        if ((send_rank[k] >= 0) == (recv_rank[k] >= 0)) continue;
        if (send_rank[k] >= 0) {
            pp_action_format(s->actions[send_rank[k]][send_pos[k]], txt, sizeof txt);
            pp_action_format(pp__action(dir_b ? PP_OP_RECV_B : PP_OP_RECV_F, dir_b ? stg - 1 : stg + 1, m), txt2, sizeof txt2);
            st = pp__fail(err, PP_EINVALID_SCHEDULE, "rank %d position %d: %s has no matching %s on rank %d",
                          send_rank[k], send_pos[k], txt, txt2, pp_stage_rank(s, dir_b ? stg - 1 : stg + 1));
        } else {
            pp_action_format(s->actions[recv_rank[k]][recv_pos[k]], txt, sizeof txt);
            pp_action_format(pp__action(dir_b ? PP_OP_SEND_B : PP_OP_SEND_F, stg, m), txt2, sizeof txt2);
            st = pp__fail(err, PP_EINVALID_SCHEDULE, "rank %d position %d: %s has no matching %s on rank %d",
                          recv_rank[k], recv_pos[k], txt, txt2, pp_stage_rank(s, stg));
        }
    }
    if (st != PP_OK) goto done;

    /* 2. run the programs: compute needs its inputs already here; a group of consecutive
     *    communication actions is posted at once and finishes when every partner is posted
     *    (rendezvous: a send waits for its receive). */
    for (r = 0; r < s->pp; r++) { gstart[r] = gend[r] = -1; if (s->length[r] == 0) finished++; }
    while (finished < s->pp) {
        int progress = 0;
        for (r = 0; r < s->pp; r++) {
            while (pc[r] < s->length[r]) {
                pp_action a = s->actions[r][pc[r]];
                if (!pp__is_comm(a.op)) {
                    int ops[2], stg[2], mbs[2], h, nh = pp__halves(a, ops, stg, mbs);
                    for (h = 0; h < nh; h++) {
                        const char *why = "";
                        int ready = pp__half_ready(s, &prog, arrived_f, arrived_b, ops[h], stg[h], mbs[h], &why);
                        if (ready != 1) {
                            int from = 0;
                            pp_action_format(a, txt, sizeof txt);
                            if (ready == 0) {
                                pp__cross_input(s, ops[h], stg[h], mbs[h], &from);
                                st = pp__fail(err, PP_EINVALID_SCHEDULE,
                                              "rank %d position %d: %s needs the %s of stage %d (rank %d), but no %s "
                                              "before it received it", r, pc[r], txt,
                                              ops[h] == PP_OP_F ? "output" : "input-gradient", from,
                                              pp_stage_rank(s, from), ops[h] == PP_OP_F ? "RECV_F" : "RECV_B");
                            } else {
                                st = pp__fail(err, PP_EINVALID_SCHEDULE, "rank %d position %d: %s %s", r, pc[r], txt, why);
                            }
                            goto done;
                        }
                    }
                    for (h = 0; h < nh; h++) pp__mark_done(s, &prog, ops[h], stg[h], mbs[h]);
                    pc[r]++;
                    progress = 1;
                    continue;
                }
                /* a communication group [gstart, gend) */
                if (gstart[r] != pc[r]) {
                    gstart[r] = pc[r]; gend[r] = pp_schedule_group_end(s, r, pc[r]);
                    /* posting a send needs the tensor to exist */
                    for (i = gstart[r]; i < gend[r]; i++) {
                        pp_action c = s->actions[r][i];
                        if (c.op == PP_OP_SEND_F && !prog.f_done[PP__SM(s, c.stage, c.mb)]) {
                            pp_action_format(c, txt, sizeof txt);
                            st = pp__fail(err, PP_EINVALID_SCHEDULE, "rank %d position %d: %s comes before the F it sends",
                                          r, i, txt);
                            goto done;
                        }
                        if (c.op == PP_OP_SEND_B && !prog.b_done[PP__SM(s, c.stage, c.mb)]) {
                            pp_action_format(c, txt, sizeof txt);
                            st = pp__fail(err, PP_EINVALID_SCHEDULE, "rank %d position %d: %s comes before the B (or I) "
                                          "whose gradient it sends", r, i, txt);
                            goto done;
                        }
                    }
                }
                {
                    int all = 1;
                    for (i = gstart[r]; i < gend[r]; i++) {
                        pp_action c = s->actions[r][i];
                        int is_send = c.op == PP_OP_SEND_F || c.op == PP_OP_SEND_B, pr, pq;
                        k = pp__comm_key(s, c);
                        if (completed[k]) continue;
                        pr = is_send ? recv_rank[k] : send_rank[k];
                        pq = is_send ? recv_pos[k] : send_pos[k];
                        if (pc[pr] == gstart[pr] && gstart[pr] <= pq && pq < gend[pr]) completed[k] = 1;
                        else all = 0;
                    }
                    if (!all) break;   /* blocked in this group */
                    for (i = gstart[r]; i < gend[r]; i++) {
                        pp_action c = s->actions[r][i];
                        if (c.op == PP_OP_RECV_F) arrived_f[PP__SM(s, c.stage, c.mb)] = 1;
                        if (c.op == PP_OP_RECV_B) arrived_b[PP__SM(s, c.stage, c.mb)] = 1;
                    }
                    pc[r] = gend[r];
                    gstart[r] = gend[r] = -1;
                    progress = 1;
                }
            }
            if (pc[r] == s->length[r] && gstart[r] != -2) { finished++; gstart[r] = -2; }
        }
        if (!progress && finished < s->pp) {
            pp__text t = { NULL, 0, 0, 0 };
            int shown = 0;
            for (r = 0; r < s->pp && shown < 3; r++) {
                if (pc[r] >= s->length[r]) continue;
                for (i = gstart[r]; i >= 0 && i < gend[r]; i++) {
                    pp_action c = s->actions[r][i];
                    int is_send = c.op == PP_OP_SEND_F || c.op == PP_OP_SEND_B;
                    k = pp__comm_key(s, c);
                    if (completed[k]) continue;
                    pp_action_format(c, txt, sizeof txt);
                    pp__text_printf(&t, "%srank %d waits at position %d (%s) for rank %d, which is at position %d",
                                    shown ? "; " : "", r, i, txt, is_send ? recv_rank[k] : send_rank[k],
                                    pc[is_send ? recv_rank[k] : send_rank[k]]);
                    break;
                }
                shown++;
            }
            st = pp__fail(err, PP_EDEADLOCK, "deadlock (sends wait for their receives): %s", t.data ? t.data : "");
            pp__text_free(&t);
            goto done;
        }
    }
    /* 3. every group meets exactly one group of each peer it talks to (NCCL's blocking group
     *    call may wait for the peer to enter the matching call: partners spread over two groups
     *    of one peer can hang a real run although the send-by-send model above finishes). */
    {
        int **gfirst = (int **)pp__calloc((size_t)s->pp, sizeof(int *));
        if (!gfirst) { st = pp__fail(err, PP_ENOMEM, "out of memory"); goto done; }
        for (r = 0; r < s->pp && st == PP_OK; r++) {
            gfirst[r] = (int *)PIPEPAR_MALLOC((size_t)(s->length[r] > 0 ? s->length[r] : 1) * sizeof(int));
            if (!gfirst[r]) { st = pp__fail(err, PP_ENOMEM, "out of memory"); break; }
            for (i = 0; i < s->length[r];) {
                int e = pp_schedule_group_end(s, r, i), j;
                for (j = i; j < e; j++) gfirst[r][j] = i;
                i = e;
            }
        }
        for (r = 0; r < s->pp && st == PP_OK; r++) {
            for (i = 0; i < s->length[r] && st == PP_OK;) {
                int e = pp_schedule_group_end(s, r, i), j, peers[4], pgroups[4], np = 0;
                if (!pp__is_comm(s->actions[r][i].op)) { i = e; continue; }
                for (j = i; j < e; j++) {
                    pp_action c = s->actions[r][j];
                    int is_send = c.op == PP_OP_SEND_F || c.op == PP_OP_SEND_B, pr, pq, q;
                    k = pp__comm_key(s, c);
                    pr = is_send ? recv_rank[k] : send_rank[k];
                    pq = is_send ? recv_pos[k] : send_pos[k];
                    for (q = 0; q < np && peers[q] != pr; q++) {}
                    if (q == np && np < 4) { peers[np] = pr; pgroups[np++] = gfirst[pr][pq]; continue; }
                    if (q < np && pgroups[q] != gfirst[pr][pq]) {
                        pp_action_format(c, txt, sizeof txt);
                        st = pp__fail(err, PP_EINVALID_SCHEDULE,
                                      "rank %d position %d: %s is in the group that starts at position %d, but its "
                                      "partner on rank %d is in that rank's group at position %d while the group's "
                                      "other partners there are in the group at position %d: each group must meet "
                                      "exactly one group of each peer (NCCL's group calls can hang otherwise; "
                                      "pp_schedule_lower builds such pairs)", r, j, txt, i, pr, gfirst[pr][pq], pgroups[q]);
                        break;
                    }
                }
                i = e;
            }
        }
        for (r = 0; r < s->pp; r++) PIPEPAR_FREE(gfirst[r]);
        PIPEPAR_FREE(gfirst);
        if (st != PP_OK) goto done;
    }
    st = PP_OK;
done:
    PIPEPAR_FREE(send_rank); PIPEPAR_FREE(send_pos); PIPEPAR_FREE(recv_rank); PIPEPAR_FREE(recv_pos);
    PIPEPAR_FREE(completed); PIPEPAR_FREE(arrived_f); PIPEPAR_FREE(arrived_b);
    PIPEPAR_FREE(pc); PIPEPAR_FREE(gstart); PIPEPAR_FREE(gend);
    pp__progress_free(&prog);
    return st;
}

pp_status pp_schedule_validate(const pp_schedule *s, pp_error *err)
{
    pp_status st;
    int r, i, has_comm = 0;
    if (!s) return pp__fail(err, PP_EINVAL, "schedule: must not be NULL");
    st = pp__check_structure(s, err);
    if (st != PP_OK) return st;
    for (r = 0; r < s->pp && !has_comm; r++)
        for (i = 0; i < s->length[r]; i++)
            if (pp__is_comm(s->actions[r][i].op)) { has_comm = 1; break; }
    if (!has_comm && s->pp > 1) {
        /* compute order only: check it as the lowering pass would lower it */
        pp_schedule *c = NULL;
        st = pp_schedule_copy(s, &c, err);
        if (st != PP_OK) return st;
        st = pp_schedule_lower(c, err);
        if (st == PP_OK) st = pp__validate_lowered(c, err);
        pp_schedule_free(c);
        return st == PP_OK ? pp__ok(err) : st;
    }
    st = pp__validate_lowered(s, err);
    return st == PP_OK ? pp__ok(err) : st;
}
