
/* ============================================================================================
 * >>zerobubble (implementation): ZB-H1, ZB-H2, ZB-V, DualPipeV, interleaved zero bubble, greedy.
 * ============================================================================================ */

/* Appends one compute action to rank r's program, dropping the halves whose microbatch does not
 * exist: zbv and dualpipev are built for at least 2*pp-1 (2*pp) microbatches and then cut back
 * to mb, the way PyTorch's ScheduleZBVZeroBubble replaces them with idle steps. An FB that loses
 * one half becomes the plain F or B that is left. */
static pp_status pp__zb_put(pp_schedule *s, int r, pp_action a, pp_error *err)
{
    if (a.op == PP_OP_FB) {
        int f_ok = a.mb < s->mb, b_ok = a.mb2 < s->mb;
        if (f_ok && b_ok) return pp_schedule_append(s, r, a, err);
        if (f_ok) return pp_schedule_append(s, r, pp__action(PP_OP_F, a.stage, a.mb), err);
        if (b_ok) return pp_schedule_append(s, r, pp__action(PP_OP_B, a.stage2, a.mb2), err);
        return PP_OK;
    }
    if (a.mb >= s->mb) return PP_OK;
    return pp_schedule_append(s, r, a, err);
}

/* The W's a rank still owes, oldest first (every generator here runs W in the order of its I's,
 * as PyTorch's schedules and the paper's WeightGradStore queue do). */
typedef struct pp__wfifo {
    int *stage, *mb;
    int head, tail, cap;
} pp__wfifo;

static int pp__wfifo_init(pp__wfifo *q, int cap)
{
    q->stage = (int *)pp__calloc((size_t)cap, sizeof(int));
    q->mb = (int *)pp__calloc((size_t)cap, sizeof(int));
    q->head = q->tail = 0;
    q->cap = cap;
    if (q->stage && q->mb) return 1;
    PIPEPAR_FREE(q->stage); PIPEPAR_FREE(q->mb);   /* one of the two may have succeeded */
    q->stage = q->mb = NULL;
    return 0;
}

static void pp__wfifo_free(pp__wfifo *q)
{
    PIPEPAR_FREE(q->stage); PIPEPAR_FREE(q->mb);
    q->stage = q->mb = NULL;
}

static void pp__wfifo_push(pp__wfifo *q, int stage, int mb)
{
    PIPEPAR_ASSERT(q->tail < q->cap);
    q->stage[q->tail] = stage; q->mb[q->tail] = mb; q->tail++;
}

/* Emits the oldest pending W, if there is one. */
static pp_status pp__wfifo_pop(pp__wfifo *q, pp_schedule *s, int r, pp_error *err)
{
    pp_action a;
    if (q->head == q->tail) return PP_OK;
    a = pp__action(PP_OP_W, q->stage[q->head], q->mb[q->head]);
    q->head++;
    return pp__zb_put(s, r, a, err);
}

#define PP__ZB_PUT(op_, stage_, mb_) \
    do { st = pp__zb_put(s, r, pp__action((op_), (stage_), (mb_)), err); if (st != PP_OK) goto done; } while (0)
#define PP__ZB_I(stage_, mb_) \
    do { PP__ZB_PUT(PP_OP_I, (stage_), (mb_)); pp__wfifo_push(&q, (stage_), (mb_)); } while (0)
#define PP__ZB_W() \
    do { st = pp__wfifo_pop(&q, s, r, err); if (st != PP_OK) goto done; } while (0)

/* --- interleaved zero bubble (and ZB-H1, its one-chunk case) -------------------------------
 * PyTorch 2.11 ScheduleInterleavedZeroBubble (_calculate_single_rank_operations with
 * _get_1f1b_rank_ops(enable_zero_bubble=True)), compute order only: the k-th forward of a rank
 * runs chunk (k / G) % vpp on the next microbatch of that chunk, the k-th backward (an I) the
 * mirrored chunk vpp-1-((k / G) % vpp); rank r first runs
 *     warmup = (vpp-1)*G + (pp-1-r)      forwards (capped at mb*vpp),
 * then F,I pairs, then the remaining I's; after the j-th I of those phases (j counted from 0)
 * it runs its oldest pending W when j >= r, so rank r holds back r W's (the ZB1P / ZB-H1 rule,
 * "num_1f1b_microbatches = rank"), and it ends with the W's still pending. G is PyTorch's
 * microbatches_per_round. With G dividing mb this is PyTorch's order exactly; a G that does not
 * divide mb (PyTorch refuses it) leaves a last, smaller round, as Megatron-LM's table does, and
 * a G above mb means one round of all mb. With vpp = 1 the chunk never changes and rank r runs
 *     F^(pp-1-r), then (F I) r times, then (F I W) ..., then (I W) ..., then W's:
 * the paper's ZB-H1 (Figure 3, top), e.g. pp=4: rank 3 = F0 I0 F1 I1 F2 I2 F3 I3 W0 F4 I4 W1. */
static pp_status pp__build_interleaved_zb(pp_schedule *s, int G, pp_error *err)
{
    pp_status st = PP_OK;
    int total = s->mb * s->vpp, r, n = 0, lo;
    int *table_mb = (int *)pp__calloc((size_t)total, sizeof(int));
    int *table_chunk = (int *)pp__calloc((size_t)total, sizeof(int));
    pp__wfifo q = { NULL, NULL, 0, 0, 0 };
    if (G > s->mb) G = s->mb;
    if (!table_mb || !table_chunk || !pp__wfifo_init(&q, total)) {
        st = pp__fail(err, PP_ENOMEM, "out of memory");
        goto done;
    }
    for (lo = 0; lo < s->mb; lo += G) {
        int hi = lo + G < s->mb ? lo + G : s->mb, c, m;
        for (c = 0; c < s->vpp; c++)
            for (m = lo; m < hi; m++) { table_mb[n] = m; table_chunk[n] = c; n++; }
    }
    PIPEPAR_ASSERT(n == total);
    for (r = 0; r < s->pp; r++) {
        int warmup = (s->vpp - 1) * G + (s->pp - 1 - r), op, f = 0, b = 0;
        if (warmup > total) warmup = total;
        q.head = q.tail = 0;
        for (op = 0; op < total + warmup; op++) {
            if (op < total) {
                PP__ZB_PUT(PP_OP_F, pp_rank_chunk_stage(s, r, table_chunk[f]), table_mb[f]);
                f++;
            }
            if (op >= warmup) {
                PP__ZB_I(pp_rank_chunk_stage(s, r, s->vpp - 1 - table_chunk[b]), table_mb[b]);
                b++;
                if (op - warmup >= r) PP__ZB_W();
            }
        }
        while (q.head < q.tail) PP__ZB_W();
    }
done:
    PIPEPAR_FREE(table_mb); PIPEPAR_FREE(table_chunk);
    pp__wfifo_free(&q);
    return st;
}

/* --- ZB-H2 ------------------------------------------------------------------------------------
 * The paper's ZB-H2 (section 2.2, Figure 3 bottom), written for any cap L = max_live on live
 * activations per rank (pp <= L; the paper's is 2*pp-1). Rank r runs
 *     w = min(mb, 2(pp-r)-1, L-r) warmup F's         (2(pp-r)-1: what fits before its first I
 *                                                     arrives when F = I = W)
 *     (I F) pairs until L are live (min(L-w, mb-w))  (holding W's back)
 *     (I W F) until the F's run out                  (steady: memory stays at L)
 *     (I W) until the I's run out, then the last W's.
 * For pp=4, mb=8, L=7 this is Figure 3's picture: rank 0 = F0..F6 I0 W0 F7 I1 W1 ... I7 W7 and
 * rank 3 = F0 I0 F1 I1 ... F6 I6 W0 F7 I7 W1 W2 ... W7, a parallelogram with no idle time inside
 * any rank. With L = pp the rule gives ZB-H1's order back. With F, I, W and the p2p time of the
 * paper's Table 9 the simulator reproduces the ZB-H2 bubble rates of its Table 5 (tests). A cap
 * above 2*pp-1 is lowered to it: more would only hold W's back for nothing. */
static pp_status pp__build_zb_h2(pp_schedule *s, int L, pp_error *err)
{
    pp_status st = PP_OK;
    int r;
    pp__wfifo q = { NULL, NULL, 0, 0, 0 };
    if (!pp__wfifo_init(&q, s->mb)) return pp__fail(err, PP_ENOMEM, "out of memory");
    for (r = 0; r < s->pp; r++) {
        int w = s->mb, pairs, f = 0, b = 0, k;
        if (2 * (s->pp - r) - 1 < w) w = 2 * (s->pp - r) - 1;
        if (L - r < w) w = L - r;
        pairs = L - w < s->mb - w ? L - w : s->mb - w;
        q.head = q.tail = 0;
        for (; f < w; f++) PP__ZB_PUT(PP_OP_F, r, f);
        for (k = 0; k < pairs; k++) { PP__ZB_I(r, b); b++; PP__ZB_PUT(PP_OP_F, r, f); f++; }
        for (; f < s->mb; f++) { PP__ZB_I(r, b); b++; PP__ZB_W(); PP__ZB_PUT(PP_OP_F, r, f); }
        for (; b < s->mb; b++) { PP__ZB_I(r, b); PP__ZB_W(); }
        while (q.head < q.tail) PP__ZB_W();
    }
done:
    pp__wfifo_free(&q);
    return st;
}

/* --- ZB-V ---------------------------------------------------------------------------------------
 * PyTorch 2.11 ScheduleZBVZeroBubble._calculate_single_rank_operations, compute order only (the
 * paper's ZB-V, section 6 and Figure 8). Rank r holds stage r (chunk 0) and 2pp-1-r (chunk 1);
 * with n = max(2pp-1, mb) microbatches it runs
 *     2(pp-r)-1 F0;  r x (F1 F0);  pp-r x (F1 I1 W1);
 *     steady, while chunk 1 lags chunk 0 or chunk 0 has microbatches left:
 *         [F0 if any left] I0 W0 F1 I1 W1;
 *     r x (I0 I1);  pp-r x (I0 W0);  then the W1's, then the W0's still pending,
 * and drops every action of a microbatch >= mb (PyTorch turns them into idle steps). */
static pp_status pp__build_zbv(pp_schedule *s, pp_error *err)
{
    pp_status st = PP_OK;
    int pp = s->pp, n = s->mb > 2 * s->pp - 1 ? s->mb : 2 * s->pp - 1, r, k;
    for (r = 0; r < pp; r++) {
        int s0 = r, s1 = 2 * pp - 1 - r, f0 = 0, f1 = 0, b0 = 0, b1 = 0, w0, w1;
        for (k = 0; k < 2 * (pp - r) - 1; k++) { PP__ZB_PUT(PP_OP_F, s0, f0); f0++; }
        for (k = 0; k < r; k++) {
            PP__ZB_PUT(PP_OP_F, s1, f1); f1++;
            PP__ZB_PUT(PP_OP_F, s0, f0); f0++;
        }
        for (k = 0; k < pp - r; k++) {
            PP__ZB_PUT(PP_OP_F, s1, f1); f1++;
            PP__ZB_PUT(PP_OP_I, s1, b1); PP__ZB_PUT(PP_OP_W, s1, b1); b1++;
        }
        while (f1 < f0 || f0 < n) {
            if (f0 < n) { PP__ZB_PUT(PP_OP_F, s0, f0); f0++; }
            PP__ZB_PUT(PP_OP_I, s0, b0); PP__ZB_PUT(PP_OP_W, s0, b0); b0++;
            PP__ZB_PUT(PP_OP_F, s1, f1); f1++;
            PP__ZB_PUT(PP_OP_I, s1, b1); PP__ZB_PUT(PP_OP_W, s1, b1); b1++;
        }
        w0 = b0; w1 = b1;
        for (k = 0; k < r; k++) {
            PP__ZB_PUT(PP_OP_I, s0, b0); b0++;
            PP__ZB_PUT(PP_OP_I, s1, b1); b1++;
        }
        for (k = 0; k < pp - r; k++) {
            PP__ZB_PUT(PP_OP_I, s0, b0); b0++;
            PP__ZB_PUT(PP_OP_W, s0, w0); w0++;
        }
        for (; w1 < b1; w1++) PP__ZB_PUT(PP_OP_W, s1, w1);
        for (; w0 < b0; w0++) PP__ZB_PUT(PP_OP_W, s0, w0);
        PIPEPAR_ASSERT(f0 == n && f1 == n && b0 == n && b1 == n);
    }
done:
    return st;
}

/* --- DualPipeV ------------------------------------------------------------------------------
 * PyTorch 2.11 ScheduleDualPipeV._calculate_single_rank_operations (a port of DeepSeek's
 * dualpipev.py step()), compute order only. Chunk 0 is stage r, chunk 1 stage 2pp-1-r; "B" is a
 * full backward, "I" an input-gradient backward whose W joins a FIFO, "FB" an F of one chunk
 * overlapped with a full B of the other. Rank r runs, for n = max(mb, 2pp) microbatches:
 *     1. 2(pp-r-1) x F0            2. r+1 x (F0 F1)           3. pp-r-1 x (I1 W F1)
 *     4. n-2pp+r+1 x (FB(F0,B1) FB(F1,B0)); the last rank's first pair is F0, B1 unoverlapped
 *     5. pp-r-1 x (B1 FB(F1,B0))
 *     6. r+1 x (B1 B0), switching to I from the middle on (for odd r before the B1 of step
 *        (r+1)/2, for even r before its B0)
 *     7. pp-r-1 x (W I0)          8. r+1 x W
 * (each W is the oldest pending one). Microbatches >= mb are then dropped; see the header. */
static pp_status pp__build_dualpipev(pp_schedule *s, pp_error *err)
{
    pp_status st = PP_OK;
    int pp = s->pp, n = s->mb > 2 * s->pp ? s->mb : 2 * s->pp, r, k;
    pp__wfifo q = { NULL, NULL, 0, 0, 0 };
    if (!pp__wfifo_init(&q, 2 * n)) return pp__fail(err, PP_ENOMEM, "out of memory");
    for (r = 0; r < pp; r++) {
        int stage[2], fwd[2] = { 0, 0 }, bwd[2] = { 0, 0 }, zb = 0, steps4 = n - 2 * pp + r + 1;
        stage[0] = r; stage[1] = 2 * pp - 1 - r;
        q.head = q.tail = 0;
#define PP__DPV_F(c) do { PP__ZB_PUT(PP_OP_F, stage[c], fwd[c]); fwd[c]++; } while (0)
#define PP__DPV_B(c, split) \
        do { if (split) PP__ZB_I(stage[c], bwd[c]); else PP__ZB_PUT(PP_OP_B, stage[c], bwd[c]); bwd[c]++; } while (0)
#define PP__DPV_FB(cf, cb) \
        do { pp_action fb_ = pp__action(PP_OP_FB, stage[cf], fwd[cf]); \
             fb_.stage2 = stage[cb]; fb_.mb2 = bwd[cb]; fwd[cf]++; bwd[cb]++; \
             st = pp__zb_put(s, r, fb_, err); if (st != PP_OK) goto done; } while (0)
        for (k = 0; k < 2 * (pp - r - 1); k++) PP__DPV_F(0);
        for (k = 0; k < r + 1; k++) { PP__DPV_F(0); PP__DPV_F(1); }
        for (k = 0; k < pp - r - 1; k++) { PP__DPV_B(1, 1); PP__ZB_W(); PP__DPV_F(1); }
        for (k = 0; k < steps4; k++) {
            if (k == 0 && r == pp - 1) { PP__DPV_F(0); PP__DPV_B(1, 0); }
            else PP__DPV_FB(0, 1);
            PP__DPV_FB(1, 0);
        }
        for (k = 0; k < pp - r - 1; k++) { PP__DPV_B(1, 0); PP__DPV_FB(1, 0); }
        for (k = 0; k < r + 1; k++) {
            if (k == (r + 1) / 2 && r % 2 == 1) zb = 1;
            PP__DPV_B(1, zb);
            if (k == (r + 1) / 2 && r % 2 == 0) zb = 1;
            PP__DPV_B(0, zb);
        }
        for (k = 0; k < pp - r - 1; k++) { PP__ZB_W(); PP__DPV_B(0, zb); }
        for (k = 0; k < r + 1; k++) PP__ZB_W();
#undef PP__DPV_F
#undef PP__DPV_B
#undef PP__DPV_FB
        PIPEPAR_ASSERT(fwd[0] == n && fwd[1] == n && bwd[0] == n && bwd[1] == n && q.head == q.tail);
    }
done:
    pp__wfifo_free(&q);
    return st;
}

/* --- DualPipe -------------------------------------------------------------------------------
 * deepseek-ai/DualPipe, dualpipe.py DualPipe.step(), compute order only. The model's pp stages
 * run as two pipelines (placement PP_PLACEMENT_DUAL): microbatches 0..mb/2-1 down from rank 0
 * (stage r on rank r), microbatches mb/2..mb-1 up from rank pp-1 (stage pp+j on rank pp-1-j). Rank
 * r's "phase 0" is the direction that starts on its side of the middle (down for r < pp/2, up
 * for the rest) and "phase 1" the other; h = min(r, pp-1-r) is its distance from the nearer end,
 * H = pp/2. With n = max(mb/2, pp) microbatches per direction, rank r runs:
 *     1. 2(H-h-1) x F0             2. h+1 x (F0 F1)            3. H-h-1 x (I1 W F1)
 *     4. n-pp+h+1 x (FB(F0,B1) FB(F1,B0)); on the two middle ranks (h = H-1) the first pair is
 *        F0, B1 unoverlapped ("to further reduce bubble size", dualpipe.py)
 *     5. H-h-1 x (B1 FB(F1,B0))
 *     6. h+1 x (B1 B0), switching to I from the middle on (for odd h before the B1 of step
 *        (h+1)/2, for even h before its B0)
 *     7. H-h-1 x (W I0)            8. h+1 x W
 * F, B of one direction run its microbatches in order; each W is the oldest pending one (the
 * WeightGradStore queue). This is DualPipeV's program (>>zerobubble, DualPipeV) with the V's two
 * chunks replaced by the two directions and the V's last rank by the two middle ranks.
 *
 * mb. dualpipe.py asserts num_ranks even, num_chunks even and num_chunks >= 2 * num_ranks: its
 * step 4 starts by consuming the forward receive that step 2 left posted, so every rank must run
 * step 4 at least once, n - pp + h + 1 >= 1 at h = 0, i.e. mb/2 >= pp. As for DualPipeV, pipepar
 * derives the communication from the compute order, so it needs only the even counts: below
 * 2*pp it builds the order for n = pp per direction and drops the microbatches that do not
 * exist (an FB losing a half becomes the plain F or B left), which keeps every dependency of
 * the rest. */
static pp_status pp__dp_put(pp_schedule *s, int r, pp_action a, pp_error *err)
{
    if (a.op == PP_OP_FB) {
        if (a.mb >= 0 && a.mb2 >= 0) return pp_schedule_append(s, r, a, err);
        if (a.mb >= 0) return pp_schedule_append(s, r, pp__action(PP_OP_F, a.stage, a.mb), err);
        if (a.mb2 >= 0) return pp_schedule_append(s, r, pp__action(PP_OP_B, a.stage2, a.mb2), err);
        return PP_OK;
    }
    return a.mb < 0 ? PP_OK : pp_schedule_append(s, r, a, err);
}

static pp_status pp__build_dualpipe(pp_schedule *s, pp_error *err)
{
    pp_status st = PP_OK;
    int pp = s->pp, H = s->pp / 2, half = s->mb / 2, n = half > pp ? half : pp, r, k;
    pp__wfifo q = { NULL, NULL, 0, 0, 0 };
    if (!pp__wfifo_init(&q, 2 * n)) return pp__fail(err, PP_ENOMEM, "out of memory");
    for (r = 0; r < pp; r++) {
        /* per phase c: its direction's stage on this rank and first global microbatch */
        int h = r < pp - 1 - r ? r : pp - 1 - r, second = r >= H, stage[2], base[2];
        int fwd[2] = { 0, 0 }, bwd[2] = { 0, 0 }, zb = 0, steps4 = n - pp + h + 1;
        stage[0] = second ? 2 * pp - 1 - r : r;  base[0] = second ? half : 0;
        stage[1] = second ? r : 2 * pp - 1 - r;  base[1] = second ? 0 : half;
        q.head = q.tail = 0;
/* global microbatch of the k-th of phase c, or -1 where it does not exist (k >= mb/2) */
#define PP__DP_MB(c, k) ((k) < half ? base[c] + (k) : -1)
#define PP__DP_F(c) \
        do { st = pp__dp_put(s, r, pp__action(PP_OP_F, stage[c], PP__DP_MB(c, fwd[c])), err); fwd[c]++; \
             if (st != PP_OK) goto done; } while (0)
#define PP__DP_B(c, split) \
        do { int m_ = PP__DP_MB(c, bwd[c]); bwd[c]++; \
             st = pp__dp_put(s, r, pp__action((split) ? PP_OP_I : PP_OP_B, stage[c], m_), err); \
             if (st != PP_OK) goto done; \
             if (split) pp__wfifo_push(&q, stage[c], m_); } while (0)
#define PP__DP_W() \
        do { if (q.head < q.tail) { int m_ = q.mb[q.head], s_ = q.stage[q.head]; q.head++; \
             st = pp__dp_put(s, r, pp__action(PP_OP_W, s_, m_), err); if (st != PP_OK) goto done; } } while (0)
#define PP__DP_FB(cf, cb) \
        do { pp_action fb_ = pp__action(PP_OP_FB, stage[cf], PP__DP_MB(cf, fwd[cf])); \
             fb_.stage2 = stage[cb]; fb_.mb2 = PP__DP_MB(cb, bwd[cb]); fwd[cf]++; bwd[cb]++; \
             st = pp__dp_put(s, r, fb_, err); if (st != PP_OK) goto done; } while (0)
        for (k = 0; k < 2 * (H - h - 1); k++) PP__DP_F(0);
        for (k = 0; k < h + 1; k++) { PP__DP_F(0); PP__DP_F(1); }
        for (k = 0; k < H - h - 1; k++) { PP__DP_B(1, 1); PP__DP_W(); PP__DP_F(1); }
        for (k = 0; k < steps4; k++) {
            if (k == 0 && h == H - 1) { PP__DP_F(0); PP__DP_B(1, 0); }
            else PP__DP_FB(0, 1);
            PP__DP_FB(1, 0);
        }
        for (k = 0; k < H - h - 1; k++) { PP__DP_B(1, 0); PP__DP_FB(1, 0); }
        for (k = 0; k < h + 1; k++) {
            if (k == (h + 1) / 2 && h % 2 == 1) zb = 1;
            PP__DP_B(1, zb);
            if (k == (h + 1) / 2 && h % 2 == 0) zb = 1;
            PP__DP_B(0, zb);
        }
        for (k = 0; k < H - h - 1; k++) { PP__DP_W(); PP__DP_B(0, 1); }
        for (k = 0; k < h + 1; k++) PP__DP_W();
#undef PP__DP_MB
#undef PP__DP_F
#undef PP__DP_B
#undef PP__DP_W
#undef PP__DP_FB
        PIPEPAR_ASSERT(fwd[0] == n && fwd[1] == n && bwd[0] == n && bwd[1] == n && q.head == q.tail);
    }
done:
    pp__wfifo_free(&q);
    return st;
}

/* --- dispatch (called by pp_schedule_build, which already checked pp, mb, vpp, group) -------- */
static pp_status pp__build_zero_bubble(const pp_schedule_config *cfg, pp_schedule *s, pp_error *err)
{
    const char *kn = pp_schedule_kind_name(cfg->kind);
    if (cfg->max_live && cfg->kind != PP_ZB_H2)
        return pp__fail(err, PP_EUNSUPPORTED,
                        "max_live=%d: %s has a fixed memory profile and takes no cap (zb-h2 and the greedy "
                        "schedule of pp_search do)", cfg->max_live, kn);
    switch (cfg->kind) {
    case PP_ZB_H1:
        return pp__build_interleaved_zb(s, s->mb, err);
    case PP_ZB_H2: {
        int L = cfg->max_live ? cfg->max_live : 2 * s->pp - 1;
        if (L < s->pp)
            return pp__fail(err, PP_EUNSUPPORTED,
                            "max_live=%d: zb-h2 needs at least pp=%d live activations per rank (1F1B's "
                            "in-flight forwards; 2*pp-1=%d removes the bubble)", L, s->pp, 2 * s->pp - 1);
        if (L > 2 * s->pp - 1) L = 2 * s->pp - 1;   /* the parallelogram never needs more */
        return pp__build_zb_h2(s, L, err);
    }
    case PP_ZBV:
        return pp__build_zbv(s, err);
    case PP_DUALPIPEV:
        return pp__build_dualpipev(s, err);
    case PP_DUALPIPE:
        return pp__build_dualpipe(s, err);
    case PP_INTERLEAVED_ZB:
        /* A round smaller than pp (and than mb) lets a rank reach the next chunk, or its first I,
         * before the microbatch it needs went round the ring: the order deadlocks for some pp, vpp,
         * mb (e.g. pp=4 vpp=3 group=1). Rounds of >= pp, or one round of everything, never do
         * (checked for pp <= 8, vpp <= 8, mb <= 40); PyTorch's own choice is always one of them. */
        if (s->vpp > 1 && s->group < s->pp && s->group < s->mb)
            return pp__fail(err, PP_EUNSUPPORTED,
                            "group=%d: interleaved-zb needs rounds of at least pp=%d microbatches (or one round of "
                            "all mb=%d); PyTorch uses mb/max(1, mb/pp) = %d", s->group, s->pp, s->mb,
                            s->mb / (s->mb / s->pp > 1 ? s->mb / s->pp : 1));
        return pp__build_interleaved_zb(s, s->group, err);
    default:
        return pp__fail(err, PP_EINVAL, "kind %s: not a zero-bubble kind", kn);
    }
}
