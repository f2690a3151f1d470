/* test_zerobubble.c — the zero-bubble kinds: ZB-H1, ZB-H2, ZB-V, DualPipeV, interleaved ZB.
 *
 * Where PyTorch has the schedule, the expected orders below were derived by reading PyTorch
 * 2.11's torch/distributed/pipelining/schedules.py by hand (ScheduleInterleavedZeroBubble with
 * _get_1f1b_rank_ops(enable_zero_bubble=True), ScheduleZBVZeroBubble, ScheduleDualPipeV
 * ._calculate_single_rank_operations) and replaying it for each config; only compute actions are
 * compared (PyTorch's None idle steps carry no order). ZB-H1 and ZB-H2 are also checked against
 * Figure 3 of Qi et al., "Zero Bubble Pipeline Parallelism" (ICLR 2024, arXiv 2401.10241), whose
 * captions spell out device 1's and device 4's rows for p=4, m=8 (1-based there, 0-based here). */
#include <stdlib.h>
#include "pp_test.h"

static pp_schedule *zb_build(pp_schedule_kind kind, int pp, int vpp, int mb, int group, int max_live, pp_error *err)
{
    pp_schedule_config cfg;
    pp_schedule *s = NULL;
    memset(&cfg, 0, sizeof cfg);
    cfg.kind = kind; cfg.pp = pp; cfg.vpp = vpp; cfg.mb = mb; cfg.group = group; cfg.max_live = max_live;
    if (pp_schedule_build(&cfg, &s, err) != PP_OK) return NULL;
    return s;
}

static pp_schedule *zb_build_ok(pp_schedule_kind kind, int pp, int vpp, int mb, int group, int max_live)
{
    pp_error err;
    pp_schedule *s = zb_build(kind, pp, vpp, mb, group, max_live, &err);
    if (!s) pp_test_fail(__FILE__, __LINE__, "build %s pp=%d vpp=%d mb=%d group=%d max_live=%d: %s",
                         pp_schedule_kind_name(kind), pp, vpp, mb, group, max_live, err.message);
    return s;
}

/* Checks every rank's order against expected[rank]. */
static void zb_check_orders(const pp_schedule *s, const char *const *expected, const char *what)
{
    static char got[16384];
    int r;
    for (r = 0; r < s->pp; r++) {
        pp_test_compute_order(s, r, got, sizeof got);
        PP_CHECK_MSG(strcmp(got, expected[r]) == 0, "%s rank %d:\n       got %s\n  expected %s", what, r, got,
                     expected[r]);
    }
}

static void zb_check_valid(const pp_schedule *s, const char *what)
{
    pp_error err;
    pp_status st = pp_schedule_validate(s, &err);
    PP_CHECK_MSG(st == PP_OK, "%s: %s", what, err.message);
}

/* Most (stage, microbatch) activations rank r holds at once (F until its W or B), max over ranks. */
static int zb_peak_live(const pp_schedule *s, int rank)
{
    int i, h, live = 0, peak = 0;
    for (i = 0; i < s->length[rank]; i++) {
        pp_action a = s->actions[rank][i];
        int op[2], n = 1;
        op[0] = a.op;
        if (a.op == PP_OP_FB) { op[0] = PP_OP_F; op[1] = PP_OP_B; n = 2; }
        for (h = 0; h < n; h++) {
            if (op[h] == PP_OP_F && ++live > peak) peak = live;
            if (op[h] == PP_OP_B || op[h] == PP_OP_W) live--;
        }
    }
    return peak;
}

/* --- ZB-H1 ------------------------------------------------------------------------------------ */

/* Figure 3 (top): device 1 = F1..F4, B1 W1 F5 B2 W2 F6 ... ; device 4 = F1 B1 F2 B2 F3 B3 F4 B4
 * W1 F5 B5 W2 F6 B6 ... F8 B8 W5 W6 W7 W8. PyTorch: rank r warms up with pp-1-r F's and emits a
 * W after the j-th I only once j >= r. */
static void zb_h1_is_pytorch_interleaved_zero_bubble_with_one_stage_per_rank(void)
{
    static const char *const expected[] = {
        "0F0 0F1 0F2 0F3 0I0 0W0 0F4 0I1 0W1 0F5 0I2 0W2 0F6 0I3 0W3 0F7 0I4 0W4 0I5 0W5 0I6 0W6 0I7 0W7",
        "1F0 1F1 1F2 1I0 1F3 1I1 1W0 1F4 1I2 1W1 1F5 1I3 1W2 1F6 1I4 1W3 1F7 1I5 1W4 1I6 1W5 1I7 1W6 1W7",
        "2F0 2F1 2I0 2F2 2I1 2F3 2I2 2W0 2F4 2I3 2W1 2F5 2I4 2W2 2F6 2I5 2W3 2F7 2I6 2W4 2I7 2W5 2W6 2W7",
        "3F0 3I0 3F1 3I1 3F2 3I2 3F3 3I3 3W0 3F4 3I4 3W1 3F5 3I5 3W2 3F6 3I6 3W3 3F7 3I7 3W4 3W5 3W6 3W7",
    };
    pp_schedule *s = zb_build_ok(PP_ZB_H1, 4, 0, 8, 0, 0);
    if (!s) return;
    PP_CHECK_INT(s->vpp, 1);
    PP_CHECK(s->placement == PP_PLACEMENT_LOOPED);
    zb_check_orders(s, expected, "zb-h1 pp=4 mb=8");
    zb_check_valid(s, "zb-h1 pp=4 mb=8");
    pp_schedule_free(s);
}

/* Paper, section 2.1: "all workers maintain the same number of in-flight microbatches", pp of
 * them, the peak of 1F1B's first worker: rank r runs pp-r forwards ahead and holds r W's back. */
static void zb_h1_every_rank_holds_pp_activations_like_1f1b_rank_0(void)
{
    int pp, mb, r;
    for (pp = 1; pp <= 8; pp++)
        for (mb = pp; mb <= 3 * pp; mb += pp) {
            pp_schedule *s = zb_build_ok(PP_ZB_H1, pp, 1, mb, 0, 0);
            if (!s) return;
            for (r = 0; r < pp; r++) {
                int i, held = 0;
                PP_CHECK_INT(zb_peak_live(s, r), pp);
                /* W's pending when the first W runs = r + 1 (the r held back plus the current) */
                for (i = 0; i < s->length[r] && s->actions[r][i].op != PP_OP_W; i++)
                    if (s->actions[r][i].op == PP_OP_I) held++;
                PP_CHECK_MSG(held == r + 1, "pp=%d mb=%d rank %d: %d I's before the first W, expected %d", pp, mb, r,
                             held, r + 1);
            }
            pp_schedule_free(s);
        }
}

/* --- ZB-H2 ------------------------------------------------------------------------------------ */

/* Figure 3 (bottom): device 1 = F1..F7, B1 W1 F8, B2 W2 ... B8 W8; device 4 = F1 B1 ... F7 B7,
 * W1 F8 B8, W2..W8. Warmup 2(pp-r)-1, then I,F pairs until 2pp-1 are live. */
static void zb_h2_is_the_papers_parallelogram_for_pp4_mb8(void)
{
    static const char *const expected[] = {
        "0F0 0F1 0F2 0F3 0F4 0F5 0F6 0I0 0W0 0F7 0I1 0W1 0I2 0W2 0I3 0W3 0I4 0W4 0I5 0W5 0I6 0W6 0I7 0W7",
        "1F0 1F1 1F2 1F3 1F4 1I0 1F5 1I1 1F6 1I2 1W0 1F7 1I3 1W1 1I4 1W2 1I5 1W3 1I6 1W4 1I7 1W5 1W6 1W7",
        "2F0 2F1 2F2 2I0 2F3 2I1 2F4 2I2 2F5 2I3 2F6 2I4 2W0 2F7 2I5 2W1 2I6 2W2 2I7 2W3 2W4 2W5 2W6 2W7",
        "3F0 3I0 3F1 3I1 3F2 3I2 3F3 3I3 3F4 3I4 3F5 3I5 3F6 3I6 3W0 3F7 3I7 3W1 3W2 3W3 3W4 3W5 3W6 3W7",
    };
    pp_schedule *s = zb_build_ok(PP_ZB_H2, 4, 0, 8, 0, 0);
    int r;
    if (!s) return;
    zb_check_orders(s, expected, "zb-h2 pp=4 mb=8");
    zb_check_valid(s, "zb-h2 pp=4 mb=8");
    for (r = 0; r < 4; r++) PP_CHECK_INT(zb_peak_live(s, r), 2 * 4 - 1);   /* paper: (2p-1) M_B */
    pp_schedule_free(s);
}

static void zb_h2_keeps_every_rank_within_max_live(void)
{
    int pp, mb, L, r;
    for (pp = 1; pp <= 6; pp++)
        for (mb = 1; mb <= 16; mb += 3)
            for (L = pp; L <= 2 * pp + 1; L++) {
                pp_schedule *s = zb_build_ok(PP_ZB_H2, pp, 1, mb, 0, L);
                int cap = L < 2 * pp - 1 ? L : 2 * pp - 1;   /* a larger cap is lowered to 2pp-1 */
                if (!s) return;
                for (r = 0; r < pp; r++) {
                    int peak = zb_peak_live(s, r);
                    PP_CHECK_MSG(peak <= L, "pp=%d mb=%d max_live=%d rank %d: peak %d", pp, mb, L, r, peak);
                    if (r == 0) PP_CHECK_INT(peak, cap < mb ? cap : mb);
                }
                pp_schedule_free(s);
            }
}

/* With the cap at 1F1B's pp, the ZB-H2 rule gives ZB-H1's order (for mb >= pp; with fewer
 * microbatches the two warm up differently, both valid). */
static void zb_h2_capped_at_pp_is_zb_h1(void)
{
    static char a[8192], b[8192];
    int pp, mb, r;
    for (pp = 1; pp <= 8; pp++)
        for (mb = pp; mb <= 20; mb++) {
            pp_schedule *h1 = zb_build_ok(PP_ZB_H1, pp, 1, mb, 0, 0), *h2 = zb_build_ok(PP_ZB_H2, pp, 1, mb, 0, pp);
            if (h1 && h2)
                for (r = 0; r < pp; r++) {
                    pp_test_compute_order(h1, r, a, sizeof a);
                    pp_test_compute_order(h2, r, b, sizeof b);
                    PP_CHECK_MSG(strcmp(a, b) == 0, "pp=%d mb=%d rank %d:\n  zb-h1 %s\n  zb-h2 %s", pp, mb, r, a, b);
                }
            pp_schedule_free(h1);
            pp_schedule_free(h2);
        }
}

/* --- ZB-V --------------------------------------------------------------------------------------- */

static void zbv_is_pytorch_zbv_zero_bubble(void)
{
    static const char *const pp2[] = {
        "0F0 0F1 0F2 3F0 3I0 3W0 3F1 3I1 3W1 0F3 0I0 0W0 3F2 3I2 3W2 0I1 0W1 3F3 3I3 3W3 0I2 0W2 0I3 0W3",
        "1F0 2F0 1F1 2F1 2I0 2W0 1F2 1I0 1W0 2F2 2I1 2W1 1F3 1I1 1W1 2F3 2I2 2W2 1I2 2I3 1I3 1W2 2W3 1W3",
    };
    static const char *const pp4[] = {
        "0F0 0F1 0F2 0F3 0F4 0F5 0F6 7F0 7I0 7W0 7F1 7I1 7W1 7F2 7I2 7W2 7F3 7I3 7W3 0F7 0I0 0W0 7F4 7I4 7W4 "
        "0I1 0W1 7F5 7I5 7W5 0I2 0W2 7F6 7I6 7W6 0I3 0W3 7F7 7I7 7W7 0I4 0W4 0I5 0W5 0I6 0W6 0I7 0W7",
        "1F0 1F1 1F2 1F3 1F4 6F0 1F5 6F1 6I0 6W0 6F2 6I1 6W1 6F3 6I2 6W2 1F6 1I0 1W0 6F4 6I3 6W3 1F7 1I1 1W1 "
        "6F5 6I4 6W4 1I2 1W2 6F6 6I5 6W5 1I3 1W3 6F7 6I6 6W6 1I4 6I7 1I5 1W4 1I6 1W5 1I7 1W6 6W7 1W7",
        "2F0 2F1 2F2 5F0 2F3 5F1 2F4 5F2 5I0 5W0 5F3 5I1 5W1 2F5 2I0 2W0 5F4 5I2 5W2 2F6 2I1 2W1 5F5 5I3 5W3 "
        "2F7 2I2 2W2 5F6 5I4 5W4 2I3 2W3 5F7 5I5 5W5 2I4 5I6 2I5 5I7 2I6 2W4 2I7 2W5 5W6 5W7 2W6 2W7",
        "3F0 4F0 3F1 4F1 3F2 4F2 3F3 4F3 4I0 4W0 3F4 3I0 3W0 4F4 4I1 4W1 3F5 3I1 3W1 4F5 4I2 4W2 3F6 3I2 3W2 "
        "4F6 4I3 4W3 3F7 3I3 3W3 4F7 4I4 4W4 3I4 4I5 3I5 4I6 3I6 4I7 3I7 3W4 4W5 4W6 4W7 3W5 3W6 3W7",
    };
    pp_schedule *s = zb_build_ok(PP_ZBV, 2, 0, 4, 0, 0);
    if (s) {
        PP_CHECK_INT(s->vpp, 2);
        PP_CHECK(s->placement == PP_PLACEMENT_V);
        zb_check_orders(s, pp2, "zbv pp=2 mb=4");
        zb_check_valid(s, "zbv pp=2 mb=4");
        pp_schedule_free(s);
    }
    s = zb_build_ok(PP_ZBV, 4, 2, 8, 0, 0);
    if (s) {
        int r;
        zb_check_orders(s, pp4, "zbv pp=4 mb=8");
        for (r = 0; r < 4; r++) PP_CHECK_INT(zb_peak_live(s, r), 2 * 4);   /* 2pp half-size chunks = 1F1B's pp */
        pp_schedule_free(s);
    }
}

/* PyTorch builds max(2pp-1, mb) microbatches and blanks the extra ones; so do we. */
static void zbv_with_few_microbatches_drops_the_padding(void)
{
    static const char *const expected[] = {
        "0F0 0F1 7F0 7I0 7W0 7F1 7I1 7W1 0I0 0W0 0I1 0W1",
        "1F0 1F1 6F0 6F1 6I0 6W0 6I1 6W1 1I0 1W0 1I1 1W1",
        "2F0 2F1 5F0 5F1 5I0 5W0 5I1 5W1 2I0 2W0 2I1 2W1",
        "3F0 4F0 3F1 4F1 4I0 4W0 3I0 3W0 4I1 4W1 3I1 3W1",
    };
    pp_schedule *s = zb_build_ok(PP_ZBV, 4, 0, 2, 0, 0);
    if (!s) return;
    zb_check_orders(s, expected, "zbv pp=4 mb=2");
    zb_check_valid(s, "zbv pp=4 mb=2");
    pp_schedule_free(s);
}

/* --- DualPipeV ---------------------------------------------------------------------------------- */

/* pp=4, mb=10 is the README's DualPipeV picture (4 ranks, 8 stages, 10 microbatches). Rank 3's
 * first main-step pair runs F0 then B1 unoverlapped ("to further reduce bubble size"). */
static void dualpipev_is_pytorch_dualpipev(void)
{
    static const char *const pp2[] = {
        "0F0 0F1 0F2 3F0 3I0 3W0 3F1 (0F3;3B1)OVERLAP_F_B (3F2;0B0)OVERLAP_F_B 3B2 (3F3;0B1)OVERLAP_F_B 3B3 "
        "0I2 0W2 0I3 0W3",
        "1F0 2F0 1F1 2F1 1F2 2B0 (2F2;1B0)OVERLAP_F_B (1F3;2B1)OVERLAP_F_B (2F3;1B1)OVERLAP_F_B 2B2 1B2 2I3 1I3 "
        "2W3 1W3",
    };
    static const char *const pp4_rank0 =
        "0F0 0F1 0F2 0F3 0F4 0F5 0F6 7F0 7I0 7W0 7F1 7I1 7W1 7F2 7I2 7W2 7F3 (0F7;7B3)OVERLAP_F_B "
        "(7F4;0B0)OVERLAP_F_B (0F8;7B4)OVERLAP_F_B (7F5;0B1)OVERLAP_F_B (0F9;7B5)OVERLAP_F_B (7F6;0B2)OVERLAP_F_B "
        "7B6 (7F7;0B3)OVERLAP_F_B 7B7 (7F8;0B4)OVERLAP_F_B 7B8 (7F9;0B5)OVERLAP_F_B 7B9 0I6 0W6 0I7 0W7 0I8 0W8 0I9 0W9";
    static const char *const pp4_rank3 =
        "3F0 4F0 3F1 4F1 3F2 4F2 3F3 4F3 3F4 4B0 (4F4;3B0)OVERLAP_F_B (3F5;4B1)OVERLAP_F_B (4F5;3B1)OVERLAP_F_B "
        "(3F6;4B2)OVERLAP_F_B (4F6;3B2)OVERLAP_F_B (3F7;4B3)OVERLAP_F_B (4F7;3B3)OVERLAP_F_B (3F8;4B4)OVERLAP_F_B "
        "(4F8;3B4)OVERLAP_F_B (3F9;4B5)OVERLAP_F_B (4F9;3B5)OVERLAP_F_B 4B6 3B6 4B7 3B7 4I8 3I8 4I9 3I9 4W8 3W8 4W9 3W9";
    static const char *const pp3_rank1 =
        "1F0 1F1 1F2 4F0 1F3 4F1 4I0 4W0 4F2 (1F4;4B1)OVERLAP_F_B (4F3;1B0)OVERLAP_F_B (1F5;4B2)OVERLAP_F_B "
        "(4F4;1B1)OVERLAP_F_B (1F6;4B3)OVERLAP_F_B (4F5;1B2)OVERLAP_F_B 4B4 (4F6;1B3)OVERLAP_F_B 4B5 1B4 4I6 1I5 "
        "4W6 1I6 1W5 1W6";
    static char got[8192];
    pp_schedule *s = zb_build_ok(PP_DUALPIPEV, 2, 0, 4, 0, 0);
    int r;
    if (s) {
        PP_CHECK(s->placement == PP_PLACEMENT_V);
        zb_check_orders(s, pp2, "dualpipev pp=2 mb=4");
        zb_check_valid(s, "dualpipev pp=2 mb=4");
        pp_schedule_free(s);
    }
    s = zb_build_ok(PP_DUALPIPEV, 4, 2, 10, 0, 0);
    if (s) {
        pp_test_compute_order(s, 0, got, sizeof got);
        PP_CHECK_STR(got, pp4_rank0);
        pp_test_compute_order(s, 3, got, sizeof got);
        PP_CHECK_STR(got, pp4_rank3);
        /* DualPipe README: activation per device PP+1 stages' worth, PP = 2*pp stages here */
        for (r = 0; r < 4; r++) PP_CHECK_INT(zb_peak_live(s, r), 2 * 4 + 1);
        zb_check_valid(s, "dualpipev pp=4 mb=10");
        pp_schedule_free(s);
    }
    s = zb_build_ok(PP_DUALPIPEV, 3, 0, 7, 0, 0);
    if (s) {
        pp_test_compute_order(s, 1, got, sizeof got);
        PP_CHECK_STR(got, pp3_rank1);
        pp_schedule_free(s);
    }
}

/* PyTorch refuses mb < 2*pp; we build 2*pp and drop the missing microbatches, FB halves too. */
static void dualpipev_below_2pp_microbatches_drops_the_padding(void)
{
    static const char *const expected[] = {
        "0F0 0F1 0F2 3F0 3I0 3W0 3F1 3B1 (3F2;0B0)OVERLAP_F_B 3B2 0B1 0I2 0W2",
        "1F0 2F0 1F1 2F1 1F2 2B0 (2F2;1B0)OVERLAP_F_B 2B1 1B1 2B2 1B2",
    };
    pp_schedule *s = zb_build_ok(PP_DUALPIPEV, 2, 0, 3, 0, 0);
    int mb;
    if (s) {
        zb_check_orders(s, expected, "dualpipev pp=2 mb=3");
        pp_schedule_free(s);
    }
    for (mb = 1; mb < 2 * 5; mb++) {
        char what[64];
        s = zb_build_ok(PP_DUALPIPEV, 5, 0, mb, 0, 0);
        if (!s) return;
        snprintf(what, sizeof what, "dualpipev pp=5 mb=%d", mb);
        zb_check_valid(s, what);
        pp_schedule_free(s);
    }
}

/* PyTorch's _Action repr of an overlapped pair is "(" + ";".join(sub reprs) + ")OVERLAP_F_B";
 * its sub-actions are the F and a FULL_BACKWARD ("B"). Ours reads and writes the same text. */
static void overlapped_action_text_is_pytorchs(void)
{
    pp_action a;
    pp_error err;
    char buf[64];
    PP_CHECK_OK(pp_action_parse("(0F1;3B0)OVERLAP_F_B", &a, &err), &err);
    PP_CHECK_INT(a.op, PP_OP_FB);
    PP_CHECK_INT(a.stage, 0); PP_CHECK_INT(a.mb, 1); PP_CHECK_INT(a.stage2, 3); PP_CHECK_INT(a.mb2, 0);
    pp_action_format(a, buf, sizeof buf);
    PP_CHECK_STR(buf, "(0F1;3B0)OVERLAP_F_B");
}

/* --- interleaved zero bubble -------------------------------------------------------------------- */

static void interleaved_zb_is_pytorch_interleaved_zero_bubble(void)
{
    static const char *const pp2[] = {
        "0F0 0F1 2F0 2F1 2I0 2W0 0F2 2I1 2W1 0F3 0I0 0W0 2F2 0I1 0W1 2F3 2I2 2W2 2I3 2W3 0I2 0W2 0I3 0W3",
        "1F0 1F1 3F0 3I0 3F1 3I1 3W0 1F2 1I0 3W1 1F3 1I1 1W0 3F2 3I2 1W1 3F3 3I3 3W2 1I2 3W3 1I3 1W2 1W3",
    };
    /* pp=4, mb=10: PyTorch's round is 10 / max(1, 10/4) = 5 microbatches */
    static const char *const pp4_rank3 =
        "3F0 3F1 3F2 3F3 3F4 7F0 7I0 7F1 7I1 7F2 7I2 7F3 7I3 7W0 7F4 7I4 7W1 3F5 3I0 7W2 3F6 3I1 7W3 3F7 3I2 7W4 "
        "3F8 3I3 3W0 3F9 3I4 3W1 7F5 7I5 3W2 7F6 7I6 3W3 7F7 7I7 3W4 7F8 7I8 7W5 7F9 7I9 7W6 3I5 7W7 3I6 7W8 3I7 "
        "7W9 3I8 3W5 3I9 3W6 3W7 3W8 3W9";
    static char got[8192];
    pp_schedule *s = zb_build_ok(PP_INTERLEAVED_ZB, 2, 2, 4, 2, 0);
    if (s) {
        zb_check_orders(s, pp2, "interleaved-zb pp=2 vpp=2 mb=4");
        pp_schedule_free(s);
    }
    s = zb_build_ok(PP_INTERLEAVED_ZB, 4, 2, 10, 5, 0);
    if (s) {
        pp_test_compute_order(s, 3, got, sizeof got);
        PP_CHECK_STR(got, pp4_rank3);
        zb_check_valid(s, "interleaved-zb pp=4 vpp=2 mb=10 group=5");
        pp_schedule_free(s);
    }
}

static void interleaved_zb_with_one_chunk_is_zb_h1(void)
{
    static char a[4096], b[4096];
    int pp, mb, r;
    for (pp = 1; pp <= 6; pp++)
        for (mb = 1; mb <= 12; mb++) {
            pp_schedule *x = zb_build_ok(PP_INTERLEAVED_ZB, pp, 1, mb, 0, 0), *y = zb_build_ok(PP_ZB_H1, pp, 1, mb, 0, 0);
            if (x && y)
                for (r = 0; r < pp; r++) {
                    pp_test_compute_order(x, r, a, sizeof a);
                    pp_test_compute_order(y, r, b, sizeof b);
                    PP_CHECK_MSG(strcmp(a, b) == 0, "pp=%d mb=%d rank %d", pp, mb, r);
                }
            pp_schedule_free(x);
            pp_schedule_free(y);
        }
}

/* --- every accepted config is valid; every refused one says why ---------------------------------- */

static void zb_validate_all(pp_schedule_kind kind, int pp, int vpp, int mb, int group, int max_live)
{
    char what[128];
    pp_schedule *s = zb_build_ok(kind, pp, vpp, mb, group, max_live);
    if (!s) return;
    snprintf(what, sizeof what, "%s pp=%d vpp=%d mb=%d group=%d max_live=%d", pp_schedule_kind_name(kind), pp, vpp, mb,
             group, max_live);
    zb_check_valid(s, what);
    pp_schedule_free(s);
}

/* pp_schedule_split_overlaps on s (lowered or not): the copy has no FB, the same compute order with
 * each FB's halves in its place (F first), is as lowered as s was, and is valid. */
static void zb_check_split(const pp_schedule *s, const char *what)
{
    pp_schedule *c = NULL;
    pp_error err;
    int r, i, j;
    PP_CHECK_OK(pp_schedule_copy(s, &c, &err), &err);
    if (!c) return;
    PP_CHECK_OK(pp_schedule_split_overlaps(c, &err), &err);
    PP_CHECK_INT(c->lowered, s->lowered);
    for (r = 0; r < s->pp; r++) {
        for (i = 0, j = 0; i < s->length[r]; i++) {
            pp_action a = s->actions[r][i];
            if (a.op >= PP_OP_SEND_F) continue;
            while (j < c->length[r] && c->actions[r][j].op >= PP_OP_SEND_F) j++;
            if (j >= c->length[r]) { PP_CHECK_MSG(0, "%s rank %d: the split program ends early", what, r); break; }
            if (a.op == PP_OP_FB) {
                pp_action f = c->actions[r][j], b;
                int k = j + 1;
                while (k < c->length[r] && c->actions[r][k].op >= PP_OP_SEND_F) k++;
                PP_CHECK_MSG(k < c->length[r], "%s rank %d: an FB's B half is missing", what, r);
                if (k >= c->length[r]) break;
                b = c->actions[r][k];
                PP_CHECK_MSG(f.op == PP_OP_F && f.stage == a.stage && f.mb == a.mb && b.op == PP_OP_B &&
                                 b.stage == a.stage2 && b.mb == a.mb2 && f.stage2 == -1 && b.stage2 == -1,
                             "%s rank %d position %d: FB(%d,%d;%d,%d) became %s(%d,%d) then %s(%d,%d)", what, r, i,
                             a.stage, a.mb, a.stage2, a.mb2, pp_op_name((pp_op)f.op), f.stage, f.mb,
                             pp_op_name((pp_op)b.op), b.stage, b.mb);
                j = k + 1;
            } else {
                pp_action x = c->actions[r][j];
                PP_CHECK_MSG(x.op == a.op && x.stage == a.stage && x.mb == a.mb, "%s rank %d position %d changed", what,
                             r, i);
                j++;
            }
        }
        for (; j < c->length[r]; j++)
            PP_CHECK_MSG(c->actions[r][j].op >= PP_OP_SEND_F, "%s rank %d: compute actions added at the end", what, r);
    }
    zb_check_valid(c, what);
    pp_schedule_free(c);
}

static void every_zb_h1_zbv_dualpipev_schedule_with_pp_1_to_8_mb_1_to_32_is_valid(void)
{
    int pp, mb;
    for (pp = 1; pp <= 8; pp++)
        for (mb = 1; mb <= 32; mb++) {
            zb_validate_all(PP_ZB_H1, pp, 0, mb, 0, 0);
            zb_validate_all(PP_ZBV, pp, 0, mb, 0, 0);
            zb_validate_all(PP_DUALPIPEV, pp, 0, mb, 0, 0);
        }
}

typedef pp_status (*zb_split_fn)(pp_schedule *s, pp_error *err);

/* A lowered schedule with nothing for `split` to split comes back exactly as it was; NULL is
 * refused. */
static void zb_check_split_leaves_alone(pp_schedule_kind kind, zb_split_fn split, const char *what)
{
    pp_schedule *s = zb_build_ok(kind, 4, 0, 8, 0, 0), *c = NULL;
    pp_error err;
    int r;
    if (s) {
        PP_CHECK_OK(pp_schedule_lower(s, &err), &err);
        PP_CHECK_OK(pp_schedule_copy(s, &c, &err), &err);
        PP_CHECK_OK(split(c, &err), &err);
        for (r = 0; c && r < s->pp; r++) {
            PP_CHECK_MSG(c->length[r] == s->length[r] &&
                             memcmp(c->actions[r], s->actions[r], (size_t)s->length[r] * sizeof(pp_action)) == 0,
                         "%s: rank %d's program changed", what, r);
        }
        pp_schedule_free(c);
        pp_schedule_free(s);
    }
    PP_CHECK_FAILS(split(NULL, &err), &err, PP_EINVAL, "schedule: must not be NULL");
}

/* Out of memory at every allocation `split` makes on s (lowered here), in turn: each failure is
 * PP_ENOMEM and leaves s exactly as it was; once enough memory is there, it succeeds. Returns the
 * schedule as it was (the caller checks the split of it and frees it), or NULL. */
static pp_schedule *zb_check_split_survives_out_of_memory(pp_schedule *s, zb_split_fn split)
{
    pp_schedule *ref = NULL;
    pp_error err;
    long k;
    int r, failures = 0, done = 0;
    PP_CHECK_OK(pp_schedule_lower(s, &err), &err);
    PP_CHECK_OK(pp_schedule_copy(s, &ref, &err), &err);
    if (!ref) return NULL;
    for (k = 0; k < 100000 && !done; k++) {
        pp_status st;
        pp_test_alloc_countdown = k;
        st = split(s, &err);
        pp_test_alloc_countdown = -1;
        if (st == PP_OK) { done = 1; break; }
        failures++;
        PP_CHECK_MSG(st == PP_ENOMEM, "allocation %ld failing gave %s: %s", k, pp_status_name(st), err.message);
        PP_CHECK_INT(s->lowered, ref->lowered);
        for (r = 0; r < s->pp; r++) {
            PP_CHECK_INT(s->length[r], ref->length[r]);
            if (s->length[r] == ref->length[r])
                PP_CHECK_MSG(memcmp(s->actions[r], ref->actions[r], (size_t)s->length[r] * sizeof(pp_action)) == 0,
                             "allocation %ld failing changed rank %d's program", k, r);
        }
    }
    PP_CHECK_MSG(done && failures > 5, "split succeeded after %d failures (done=%d)", failures, done);
    return ref;
}

static void split_overlaps_runs_each_fb_as_f_then_b_in_every_dualpipev_and_dualpipe(void)
{
    pp_schedule *s;
    pp_error err;
    char what[96];
    int pp, mb;
    for (pp = 1; pp <= 8; pp++)
        for (mb = 1; mb <= 32; mb++) {
            snprintf(what, sizeof what, "dualpipev pp=%d mb=%d split", pp, mb);
            s = zb_build_ok(PP_DUALPIPEV, pp, 0, mb, 0, 0);   /* not lowered */
            if (!s) continue;
            zb_check_split(s, what);
            PP_CHECK_OK(pp_schedule_lower(s, &err), &err);
            zb_check_split(s, what);
            pp_schedule_free(s);
            if (pp % 2 || mb % 2) continue;
            snprintf(what, sizeof what, "dualpipe pp=%d mb=%d split", pp, mb);
            s = zb_build_ok(PP_DUALPIPE, pp, 0, mb, 0, 0);
            if (!s) continue;
            PP_CHECK_OK(pp_schedule_lower(s, &err), &err);
            zb_check_split(s, what);
            pp_schedule_free(s);
        }
    zb_check_split_leaves_alone(PP_ZBV, pp_schedule_split_overlaps, "split overlaps of zbv");   /* no FB */
}

/* Out of memory at every allocation the split makes, in turn: each failure is PP_ENOMEM and leaves
 * the schedule exactly as it was; once enough memory is there, the split succeeds. A schedule with
 * foreign communication and no FB (a CSV's, say) is not re-lowered: its communication stays. */
static void split_overlaps_leaves_the_schedule_as_it_was_when_it_fails(void)
{
    pp_schedule *s = zb_build_ok(PP_DUALPIPEV, 4, 0, 16, 0, 0), *ref = NULL;
    pp_error err;
    int r;
    if (!s) return;
    ref = zb_check_split_survives_out_of_memory(s, pp_schedule_split_overlaps);
    if (ref) zb_check_split(ref, "dualpipev pp=4 mb=16 after out-of-memory tries");
    pp_schedule_free(ref);
    ref = NULL;
    pp_schedule_free(s);
    /* no FB: a lowered 1F1B with one of its sends moved to the end stays exactly as given */
    s = zb_build_ok(PP_1F1B, 2, 0, 4, 0, 0);
    if (s) {
        pp_action moved;
        int i;
        PP_CHECK_OK(pp_schedule_lower(s, &err), &err);
        for (i = 0; i < s->length[0] && s->actions[0][i].op != PP_OP_SEND_F; i++) {}
        PP_CHECK(i < s->length[0]);
        if (i < s->length[0]) {
            moved = s->actions[0][i];
            memmove(&s->actions[0][i], &s->actions[0][i + 1], (size_t)(s->length[0] - i - 1) * sizeof(pp_action));
            s->actions[0][s->length[0] - 1] = moved;
            PP_CHECK_OK(pp_schedule_copy(s, &ref, &err), &err);
            PP_CHECK_OK(pp_schedule_split_overlaps(s, &err), &err);
            for (r = 0; ref && r < s->pp; r++)
                PP_CHECK(s->length[r] == ref->length[r] &&
                         memcmp(s->actions[r], ref->actions[r], (size_t)s->length[r] * sizeof(pp_action)) == 0);
            pp_schedule_free(ref);
        }
        pp_schedule_free(s);
    }
}

/* pp_schedule_split_backward on s (lowered or not): the copy has no B, the same compute order with
 * each B replaced by its I and then at once its W, is as lowered as s was, and is valid. Lowered,
 * the point of it: every gradient the I sends to another rank is sent before the W runs. */
static void zb_check_split_backward(const pp_schedule *s, const char *what)
{
    pp_schedule *c = NULL;
    pp_error err;
    int r, i, j;
    PP_CHECK_OK(pp_schedule_copy(s, &c, &err), &err);
    if (!c) return;
    PP_CHECK_OK(pp_schedule_split_backward(c, &err), &err);
    PP_CHECK_INT(c->lowered, s->lowered);
    PP_CHECK_INT(pp_test_count_op(c, PP_OP_B), 0);
    for (r = 0; r < s->pp; r++) {
        for (i = 0, j = 0; i < s->length[r]; i++) {
            pp_action a = s->actions[r][i];
            if (a.op >= PP_OP_SEND_F) continue;
            while (j < c->length[r] && c->actions[r][j].op >= PP_OP_SEND_F) j++;
            if (j >= c->length[r]) { PP_CHECK_MSG(0, "%s rank %d: the split program ends early", what, r); break; }
            if (a.op == PP_OP_B) {
                pp_action x = c->actions[r][j], w;
                int k = j + 1, q, sent = 0, sends = 0;
                for (; k < c->length[r] && c->actions[r][k].op >= PP_OP_SEND_F; k++)
                    sent += c->actions[r][k].op == PP_OP_SEND_B && c->actions[r][k].stage == a.stage &&
                            c->actions[r][k].mb == a.mb;
                PP_CHECK_MSG(k < c->length[r], "%s rank %d: a B's W half is missing", what, r);
                if (k >= c->length[r]) break;
                w = c->actions[r][k];
                PP_CHECK_MSG(x.op == PP_OP_I && w.op == PP_OP_W && x.stage == a.stage && x.mb == a.mb &&
                                 w.stage == a.stage && w.mb == a.mb,
                             "%s rank %d position %d: B(%d,%d) became %s(%d,%d) then %s(%d,%d)", what, r, i, a.stage,
                             a.mb, pp_op_name((pp_op)x.op), x.stage, x.mb, pp_op_name((pp_op)w.op), w.stage, w.mb);
                /* the gradient leaves between the halves, if it leaves this rank at all */
                for (q = 0; q < s->length[r]; q++)
                    sends += s->actions[r][q].op == PP_OP_SEND_B && s->actions[r][q].stage == a.stage &&
                             s->actions[r][q].mb == a.mb;
                if (s->lowered)
                    PP_CHECK_MSG(sent == sends, "%s rank %d: B(%d,%d)'s gradient is sent %d time(s) between I and W, "
                                 "%d in all", what, r, a.stage, a.mb, sent, sends);
                j = k + 1;
            } else {
                pp_action x = c->actions[r][j];
                PP_CHECK_MSG(x.op == a.op && x.stage == a.stage && x.mb == a.mb, "%s rank %d position %d changed", what,
                             r, i);
                j++;
            }
        }
        for (; j < c->length[r]; j++)
            PP_CHECK_MSG(c->actions[r][j].op >= PP_OP_SEND_F, "%s rank %d: compute actions added at the end", what, r);
    }
    zb_check_valid(c, what);
    pp_schedule_free(c);
}

static void split_backward_runs_each_b_as_i_then_w_in_every_kind_with_pp_1_to_8_mb_1_to_32(void)
{
    static const pp_schedule_kind kinds[] = { PP_GPIPE, PP_1F1B, PP_INTERLEAVED_1F1B, PP_LOOPED_BFS };
    pp_schedule *s;
    pp_error err;
    char what[96];
    int pp, mb, k, vpp, group, built = 0;
    for (k = 0; k < 4; k++)
        for (pp = 1; pp <= 8; pp++)
            for (mb = 1; mb <= 32; mb++)
                for (vpp = 1; vpp <= (k >= 2 ? 4 : 1); vpp *= 2)
                    for (group = 0; group <= (k == 2 ? 2 * pp : 0); group += pp) {
                        if (k >= 2 && vpp == 1) continue;
                        s = zb_build(kinds[k], pp, k >= 2 ? vpp : 0, mb, group, 0, &err);
                        if (!s) continue;   /* a config the kind refuses: test_schedule.c covers those */
                        built++;
                        snprintf(what, sizeof what, "%s pp=%d vpp=%d mb=%d group=%d split backward",
                                 pp_schedule_kind_name(kinds[k]), pp, vpp, mb, group);
                        zb_check_split_backward(s, what);
                        PP_CHECK_OK(pp_schedule_lower(s, &err), &err);
                        zb_check_split_backward(s, what);
                        pp_schedule_free(s);
                    }
    PP_CHECK_MSG(built > 1500, "only %d schedules built", built);
    /* DualPipeV and DualPipe hold whole B's too (their cool-down), beside their FBs: split alone,
     * and after their FBs were split (whose B halves are then split as well) */
    for (pp = 1; pp <= 8; pp++)
        for (mb = 1; mb <= 32; mb++)
            for (k = 0; k < 2; k++) {
                pp_schedule_kind kind = k ? PP_DUALPIPE : PP_DUALPIPEV;
                int split;
                if (kind == PP_DUALPIPE && (pp % 2 || mb % 2)) continue;
                for (split = 0; split <= 1; split++) {
                    s = zb_build(kind, pp, 0, mb, 0, 0, &err);
                    if (!s) continue;
                    PP_CHECK_OK(pp_schedule_lower(s, &err), &err);
                    if (split) PP_CHECK_OK(pp_schedule_split_overlaps(s, &err), &err);
                    snprintf(what, sizeof what, "%s pp=%d mb=%d%s split backward", pp_schedule_kind_name(kind), pp, mb,
                             split ? ", FBs split" : "");
                    if (pp_test_count_op(s, PP_OP_B) > 0) built++;
                    zb_check_split_backward(s, what);
                    pp_schedule_free(s);
                }
            }
    PP_CHECK_MSG(built > 1800, "only %d schedules built", built);
    /* ZB-H1 has I and W already: nothing to split */
    zb_check_split_leaves_alone(PP_ZB_H1, pp_schedule_split_backward, "split backward of zb-h1");
}

/* Out of memory at every allocation the split makes: PP_ENOMEM, the schedule as it was. */
static void split_backward_leaves_the_schedule_as_it_was_when_it_fails(void)
{
    pp_schedule *s = zb_build_ok(PP_INTERLEAVED_1F1B, 4, 2, 16, 0, 0), *ref;
    if (!s) return;
    ref = zb_check_split_survives_out_of_memory(s, pp_schedule_split_backward);
    if (ref) zb_check_split_backward(ref, "interleaved pp=4 vpp=2 mb=16 after out-of-memory tries");
    pp_schedule_free(ref);
    pp_schedule_free(s);
}

/* pp_schedule_rank_peaks against a recount by intervals: each F opens an interval its B or W
 * closes, each I one its W closes (positions inclusive: an FB's F half is live beside its B
 * half); a class's peak is the most intervals of that class over any one position. Live peaks
 * must also equal the simulator's peak_live (same definition, counted in time). */
static void zb_check_rank_peaks(const pp_schedule *s, const char *what)
{
    pp_error err;
    pp_sim_costs cost;
    pp_sim_result *sim = NULL;
    int r, i, j, h, k, c, classes = s->num_stages < 3 ? s->num_stages : 3;
    int cls[64], live[3], awaiting[3], live1, awaiting1;
    memset(&cost, 0, sizeof cost);
    PP_CHECK_OK(pp_simulate(s, &cost, &sim, &err), &err);
    for (i = 0; i < s->num_stages && i < 64; i++) cls[i] = (i * 7) % classes;   /* classes mixed across ranks */
    for (r = 0; r < s->pp; r++) {
        int want_live[3] = { 0, 0, 0 }, want_awaiting[3] = { 0, 0, 0 }, total_live = 0, total_awaiting = 0;
        PP_CHECK_OK(pp_schedule_rank_peaks(s, r, NULL, 1, &live1, &awaiting1, &err), &err);
        if (s->num_stages <= 64)
            PP_CHECK_OK(pp_schedule_rank_peaks(s, r, cls, classes, live, awaiting, &err), &err);
        for (i = 0; i < s->length[r]; i++) {
            int n_live[3] = { 0, 0, 0 }, n_awaiting[3] = { 0, 0, 0 }, all_live = 0, all_awaiting = 0;
            for (j = 0; j <= i; j++) {       /* intervals opened at or before i ... */
                pp_action a = s->actions[r][j];
                int ops[2], st[2], mbs[2], n = 1;
                ops[0] = a.op; st[0] = a.stage; mbs[0] = a.mb;
                if (a.op == PP_OP_FB) { ops[0] = PP_OP_F; ops[1] = PP_OP_B; st[1] = a.stage2; mbs[1] = a.mb2; n = 2; }
                for (h = 0; h < n; h++) {
                    int close_op = ops[h] == PP_OP_F ? -1 : ops[h] == PP_OP_I ? PP_OP_W : -2, closed_at = -1;
                    if (close_op == -2) continue;
                    for (k = j; k < s->length[r] && closed_at < 0; k++) {   /* ... and closed at or after i */
                        pp_action b = s->actions[r][k];
                        if (close_op == -1 && ((b.op == PP_OP_B || b.op == PP_OP_W) && b.stage == st[h] && b.mb == mbs[h]))
                            closed_at = k;
                        if (close_op == -1 && b.op == PP_OP_FB && b.stage2 == st[h] && b.mb2 == mbs[h]) closed_at = k;
                        if (close_op == PP_OP_W && b.op == PP_OP_W && b.stage == st[h] && b.mb == mbs[h]) closed_at = k;
                    }
                    if (closed_at < i) continue;
                    c = s->num_stages <= 64 ? cls[st[h]] : 0;
                    if (ops[h] == PP_OP_F) { n_live[c]++; all_live++; } else { n_awaiting[c]++; all_awaiting++; }
                }
            }
            for (c = 0; c < 3; c++) {
                if (n_live[c] > want_live[c]) want_live[c] = n_live[c];
                if (n_awaiting[c] > want_awaiting[c]) want_awaiting[c] = n_awaiting[c];
            }
            if (all_live > total_live) total_live = all_live;
            if (all_awaiting > total_awaiting) total_awaiting = all_awaiting;
        }
        PP_CHECK_MSG(live1 == total_live && awaiting1 == total_awaiting,
                     "%s rank %d: peaks live %d awaiting W %d, recounted %d and %d", what, r, live1, awaiting1,
                     total_live, total_awaiting);
        if (sim) PP_CHECK_MSG(live1 == sim->peak_live[r], "%s rank %d: live peak %d, the simulator's %d", what, r,
                              live1, sim->peak_live[r]);
        if (s->num_stages <= 64)
            for (c = 0; c < classes; c++)
                PP_CHECK_MSG(live[c] == want_live[c] && awaiting[c] == want_awaiting[c],
                             "%s rank %d class %d: peaks live %d awaiting W %d, recounted %d and %d", what, r, c,
                             live[c], awaiting[c], want_live[c], want_awaiting[c]);
    }
    pp_sim_result_free(sim);
}

static void rank_peaks_match_a_recount_in_every_kind_split_or_not(void)
{
    static const pp_schedule_kind kinds[] = { PP_GPIPE, PP_1F1B, PP_INTERLEAVED_1F1B, PP_LOOPED_BFS, PP_ZB_H1,
                                              PP_ZB_H2, PP_ZBV, PP_DUALPIPEV, PP_INTERLEAVED_ZB, PP_DUALPIPE };
    pp_error err;
    char what[96];
    int k, pp, mb, split, checked = 0;
    for (k = 0; k < 10; k++)
        for (pp = 1; pp <= 5; pp++)
            for (mb = 1; mb <= 12; mb++)
                for (split = 0; split <= 2; split++) {
                    int vpp = kinds[k] == PP_INTERLEAVED_1F1B || kinds[k] == PP_LOOPED_BFS ||
                              kinds[k] == PP_INTERLEAVED_ZB ? 2 : 0;
                    pp_schedule *s = zb_build(kinds[k], pp, vpp, mb, 0, 0, &err);
                    if (!s) continue;
                    PP_CHECK_OK(pp_schedule_lower(s, &err), &err);
                    if (split >= 1) PP_CHECK_OK(pp_schedule_split_overlaps(s, &err), &err);
                    if (split == 2) PP_CHECK_OK(pp_schedule_split_backward(s, &err), &err);
                    snprintf(what, sizeof what, "%s pp=%d mb=%d%s", pp_schedule_kind_name(kinds[k]), pp, mb,
                             split == 2 ? ", split backward" : split ? ", split overlaps" : "");
                    zb_check_rank_peaks(s, what);
                    checked++;
                    pp_schedule_free(s);
                }
    PP_CHECK_MSG(checked > 1200, "only %d schedules checked", checked);
}

/* What a trainer sizes its pools by: after the split every I is followed at once by its W (one
 * buffer for the I's tensors on every rank); ZB-V on 2 ranks holds 1 and 3 while its W's wait;
 * whole backwards hold none. */
static void rank_peaks_give_one_awaiting_w_after_the_split_and_zbvs_own_otherwise(void)
{
    pp_error err;
    int r, live, awaiting, classes_live[2], classes_awaiting[2];
    static const int cls[4] = { 0, 1, 1, 0 };   /* ZB-V pp 2: rank 0 holds stages 0 and 3, rank 1 stages 1 and 2 */
    pp_schedule *s = zb_build_ok(PP_INTERLEAVED_1F1B, 4, 2, 8, 0, 0);
    if (s) {
        for (r = 0; r < 4; r++) {
            PP_CHECK_OK(pp_schedule_rank_peaks(s, r, NULL, 1, &live, &awaiting, &err), &err);
            PP_CHECK_INT(awaiting, 0);
        }
        PP_CHECK_OK(pp_schedule_split_backward(s, &err), &err);
        for (r = 0; r < 4; r++) {
            PP_CHECK_OK(pp_schedule_rank_peaks(s, r, NULL, 1, NULL, &awaiting, &err), &err);
            PP_CHECK_INT(awaiting, 1);
        }
        pp_schedule_free(s);
    }
    s = zb_build_ok(PP_ZBV, 2, 0, 8, 0, 0);
    if (s) {
        PP_CHECK_OK(pp_schedule_rank_peaks(s, 0, NULL, 1, &live, &awaiting, &err), &err);
        PP_CHECK_INT(live, 4); PP_CHECK_INT(awaiting, 1);
        PP_CHECK_OK(pp_schedule_rank_peaks(s, 1, NULL, 1, &live, &awaiting, &err), &err);
        PP_CHECK_INT(live, 4); PP_CHECK_INT(awaiting, 3);
        /* by class: rank 1's stage 1 and stage 2 each wait */
        PP_CHECK_OK(pp_schedule_rank_peaks(s, 1, cls, 2, classes_live, classes_awaiting, &err), &err);
        PP_CHECK_INT(classes_live[0], 0); PP_CHECK_INT(classes_awaiting[0], 0);
        PP_CHECK_MSG(classes_live[1] == 4 && classes_awaiting[1] == 3, "rank 1 class 1: live %d awaiting %d",
                     classes_live[1], classes_awaiting[1]);
        pp_schedule_free(s);
    }
}

static void rank_peaks_name_the_bad_parameter(void)
{
    pp_error err;
    int live[4], awaiting[4], cls[4] = { 0, 1, 2, 0 };
    pp_schedule *s = zb_build_ok(PP_ZBV, 2, 0, 4, 0, 0);
    if (!s) return;
    PP_CHECK_FAILS(pp_schedule_rank_peaks(NULL, 0, NULL, 1, live, awaiting, &err), &err, PP_EINVAL, "s: must not be NULL");
    PP_CHECK_FAILS(pp_schedule_rank_peaks(s, 2, NULL, 1, live, awaiting, &err), &err, PP_EINVAL,
                   "rank=2: must be between 0 and pp-1=1");
    PP_CHECK_FAILS(pp_schedule_rank_peaks(s, -1, NULL, 1, live, awaiting, &err), &err, PP_EINVAL, "rank=-1");
    PP_CHECK_FAILS(pp_schedule_rank_peaks(s, 0, NULL, 0, live, awaiting, &err), &err, PP_EINVAL,
                   "classes=0: must be between 1 and 1048576");
    PP_CHECK_FAILS(pp_schedule_rank_peaks(s, 0, cls, (1 << 20) + 1, live, awaiting, &err), &err, PP_EINVAL,
                   "classes=1048577");
    PP_CHECK_FAILS(pp_schedule_rank_peaks(s, 0, cls, 2, live, awaiting, &err), &err, PP_EINVAL,
                   "stage_class[2]=2: must be between 0 and classes-1=1");
    cls[2] = -1;
    PP_CHECK_FAILS(pp_schedule_rank_peaks(s, 0, cls, 3, live, awaiting, &err), &err, PP_EINVAL, "stage_class[2]=-1");
    pp_test_alloc_countdown = 0;
    PP_CHECK_FAILS(pp_schedule_rank_peaks(s, 0, NULL, 1, live, awaiting, &err), &err, PP_ENOMEM, "out of memory");
    pp_test_alloc_countdown = -1;
    /* no stage_class: one class, only [0] written however many classes are named */
    live[1] = awaiting[1] = -7;
    PP_CHECK_OK(pp_schedule_rank_peaks(s, 1, NULL, 4, live, awaiting, &err), &err);
    PP_CHECK_INT(live[1], -7); PP_CHECK_INT(awaiting[1], -7);
    PP_CHECK_INT(awaiting[0], 3);
    /* both outputs NULL: still checks, writes nothing */
    PP_CHECK_OK(pp_schedule_rank_peaks(s, 1, NULL, 1, NULL, NULL, &err), &err);
    pp_schedule_free(s);
}

/* Why split a B: its output gradient leaves after the I, and the previous stage's rank starts its
 * B while this one computes the W. Interleaved 1F1B on the comparison model's per-layer costs
 * (F 3.25, I 3.58, W 3.33 per block, 0.2 transfers; stages
 * 1,2,2,2,2,2,3,2, group 4) runs 1% faster; with unit costs every B kind runs faster too. */
static void split_backward_shortens_the_step_of_every_kind_with_whole_backwards(void)
{
    static const pp_schedule_kind kinds[] = { PP_GPIPE, PP_1F1B, PP_INTERLEAVED_1F1B };
    pp_error err;
    int k, pp, mb;
    for (k = 0; k < 3; k++)
        for (pp = 2; pp <= 8; pp *= 2)
            for (mb = 2 * pp; mb <= 16; mb += pp) {
                pp_schedule *s = zb_build_ok(kinds[k], pp, k == 2 ? 2 : 0, mb, 0, 0), *c = NULL;
                pp_sim_costs cost;
                pp_sim_result *a = NULL, *b = NULL;
                if (!s) continue;
                PP_CHECK_OK(pp_schedule_lower(s, &err), &err);
                PP_CHECK_OK(pp_schedule_copy(s, &c, &err), &err);
                PP_CHECK_OK(pp_schedule_split_backward(c, &err), &err);
                memset(&cost, 0, sizeof cost);
                cost.f = 1; cost.i = 1; cost.w = 1; cost.b = 2;
                PP_CHECK_OK(pp_simulate(s, &cost, &a, &err), &err);
                PP_CHECK_OK(pp_simulate(c, &cost, &b, &err), &err);
                if (a && b)
                    PP_CHECK_MSG(b->makespan < a->makespan - 1e-9, "%s pp=%d mb=%d: split %.3f, whole %.3f",
                                 pp_schedule_kind_name(kinds[k]), pp, mb, b->makespan, a->makespan);
                pp_sim_result_free(a);
                pp_sim_result_free(b);
                pp_schedule_free(c);
                pp_schedule_free(s);
            }
    {
        pp_schedule_config cfg;
        pp_layers_config lc;
        pp_layers *lay = NULL;
        pp_schedule *s = NULL, *c = NULL;
        pp_sim_costs cost;
        pp_sim_result *a = NULL, *b = NULL;
        double f[8], in[8], w[8], bb[8];
        int st;
        memset(&lc, 0, sizeof lc);
        lc.num_layers = 16; lc.pp = 2; lc.layout = "Et|t*2|t*2|t*2|t*2|t*2|t*3|t*2L";
        PP_CHECK_OK(pp_layers_build(&lc, &lay, &err), &err);
        memset(&cfg, 0, sizeof cfg);
        cfg.kind = PP_INTERLEAVED_1F1B; cfg.pp = 2; cfg.vpp = 4; cfg.mb = 8; cfg.group = 4;
        PP_CHECK_OK(pp_schedule_build(&cfg, &s, &err), &err);
        if (s) PP_CHECK_OK(pp_schedule_lower(s, &err), &err);
        if (s) PP_CHECK_OK(pp_schedule_copy(s, &c, &err), &err);
        if (c) PP_CHECK_OK(pp_schedule_split_backward(c, &err), &err);
        for (st = 0; lay && st < 8; st++) {
            f[st] = 3.25 * lay->count[st];
            in[st] = 3.58 * lay->count[st];
            w[st] = 3.33 * lay->count[st];
            bb[st] = in[st] + w[st];
        }
        memset(&cost, 0, sizeof cost);
        cost.f = f[0]; cost.f_stage = f; cost.i_stage = in; cost.w_stage = w; cost.b_stage = bb;
        cost.p2p_latency = 0.2;
        cost.grouped = 1;
        if (s && c && lay) {
            PP_CHECK_OK(pp_simulate(s, &cost, &a, &err), &err);
            PP_CHECK_OK(pp_simulate(c, &cost, &b, &err), &err);
        }
        if (a && b)   /* 667.0 against 659.9 ms when written */
            PP_CHECK_MSG(b->makespan < 0.99 * a->makespan, "interleaved on H200's costs: split %.2f, whole %.2f",
                         b->makespan, a->makespan);
        pp_sim_result_free(a);
        pp_sim_result_free(b);
        pp_schedule_free(c);
        pp_schedule_free(s);
        pp_layers_free(lay);
    }
}

/* Run in turn (no overlapped F&B callback), DualPipeV's FB sends its F half's output only once its
 * B half is done; split, that output leaves while the B half runs. With the costs measured on
 * H200 (a 4-layer chunk: F 13 ms, B 27.65 ms, 64 MiB in 0.2 ms) the
 * split step is 2% shorter, close to ZB-V's; with unit costs it is shorter too, pp 2..8. */
static void split_dualpipev_is_faster_when_f_and_b_run_in_turn(void)
{
    pp_error err;
    int pp, mb;
    for (pp = 2; pp <= 8; pp++)
        for (mb = 2 * pp; mb <= 32; mb += pp) {
            pp_schedule *s = zb_build_ok(PP_DUALPIPEV, pp, 0, mb, 0, 0), *c = NULL;
            pp_sim_costs k;
            pp_sim_result *a = NULL, *b = NULL;
            int measured = pp == 2 && mb == 8;
            if (!s) continue;
            PP_CHECK_OK(pp_schedule_lower(s, &err), &err);
            PP_CHECK_OK(pp_schedule_copy(s, &c, &err), &err);
            PP_CHECK_OK(pp_schedule_split_overlaps(c, &err), &err);
            memset(&k, 0, sizeof k);
            k.f = measured ? 26.0 : 1.0;          /* one rank's share: two chunks */
            k.b = measured ? 55.3 : 2.0;
            k.p2p_latency = measured ? 0.2 : 0.0;
            k.grouped = 1;
            PP_CHECK_OK(pp_simulate(s, &k, &a, &err), &err);
            PP_CHECK_OK(pp_simulate(c, &k, &b, &err), &err);
            if (a && b) {
                PP_CHECK_MSG(b->makespan < a->makespan - 1e-9, "pp=%d mb=%d: split %.3f, overlapped %.3f", pp, mb,
                             b->makespan, a->makespan);
                if (measured)
                    PP_CHECK_MSG(b->makespan < 0.985 * a->makespan, "pp=2 mb=8 measured costs: split %.2f, overlapped %.2f",
                                 b->makespan, a->makespan);
            }
            pp_sim_result_free(a);
            pp_sim_result_free(b);
            pp_schedule_free(c);
            pp_schedule_free(s);
        }
}

static void every_zb_h2_schedule_with_pp_1_to_8_mb_1_to_32_and_any_cap_is_valid(void)
{
    int pp, mb, L;
    for (pp = 1; pp <= 8; pp++)
        for (mb = 1; mb <= 32; mb++)
            for (L = pp; L <= 2 * pp; L++) zb_validate_all(PP_ZB_H2, pp, 0, mb, 0, L == 2 * pp ? 0 : L);
}

/* group: every value the rule accepts near the boundary (pp, pp+1, mb) and PyTorch's own. */
static void every_interleaved_zb_schedule_with_pp_1_to_8_mb_1_to_32_is_valid(void)
{
    int pp, mb, vpp, k;
    for (pp = 1; pp <= 8; pp++)
        for (mb = 1; mb <= 32; mb++)
            for (vpp = 1; vpp <= 4; vpp++) {
                int groups[4], torch_group = mb / (mb / pp > 1 ? mb / pp : 1);
                groups[0] = pp; groups[1] = pp + 1; groups[2] = mb; groups[3] = torch_group;
                for (k = 0; k < 4; k++)
                    if (k == 0 || (groups[k] != groups[0] && (k < 2 || groups[k] != groups[1]) &&
                                   (k < 3 || groups[k] != groups[2])))
                        zb_validate_all(PP_INTERLEAVED_ZB, pp, vpp, mb, groups[k], 0);
            }
}

static void interleaved_zb_refuses_rounds_smaller_than_pp(void)
{
    pp_error err;
    int pp, mb, g;
    PP_CHECK_FAILS(zb_build(PP_INTERLEAVED_ZB, 4, 3, 8, 1, 0, &err) ? PP_OK : err.status, &err, PP_EUNSUPPORTED,
                   "group=1: interleaved-zb needs rounds of at least pp=4 microbatches");
    PP_CHECK_CONTAINS(err.message, "PyTorch uses mb/max(1, mb/pp) = 4");
    /* the rule is exactly: vpp > 1 and group < min(pp, mb) */
    for (pp = 2; pp <= 6; pp++)
        for (mb = 1; mb <= 10; mb++)
            for (g = 1; g < pp && g < mb; g++) {
                pp_schedule *s = zb_build(PP_INTERLEAVED_ZB, pp, 2, mb, g, 0, &err);
                PP_CHECK_MSG(!s && err.status == PP_EUNSUPPORTED, "pp=%d mb=%d group=%d accepted", pp, mb, g);
                pp_schedule_free(s);
            }
}

static void zero_bubble_kinds_name_the_parameter_and_rule_they_refuse(void)
{
    pp_error err;
    pp_schedule *s;
#define ZB_REFUSES(call, want, needle) \
    do { s = (call); PP_CHECK_MSG(!s, "accepted: %s", #call); pp_schedule_free(s); \
         PP_CHECK_INT(err.status, want); PP_CHECK_CONTAINS(err.message, needle); } while (0)
    ZB_REFUSES(zb_build(PP_ZB_H2, 4, 0, 8, 0, 3, &err), PP_EUNSUPPORTED,
               "max_live=3: zb-h2 needs at least pp=4 live activations per rank");
    ZB_REFUSES(zb_build(PP_ZB_H1, 4, 0, 8, 0, 4, &err), PP_EUNSUPPORTED, "max_live=4: zb-h1 has a fixed memory profile");
    ZB_REFUSES(zb_build(PP_ZBV, 4, 0, 8, 0, 4, &err), PP_EUNSUPPORTED, "max_live=4: zbv");
    ZB_REFUSES(zb_build(PP_DUALPIPEV, 4, 0, 8, 0, 9, &err), PP_EUNSUPPORTED, "max_live=9: dualpipev");
    ZB_REFUSES(zb_build(PP_INTERLEAVED_ZB, 4, 2, 8, 0, 9, &err), PP_EUNSUPPORTED, "max_live=9: interleaved-zb");
    ZB_REFUSES(zb_build(PP_ZBV, 4, 3, 8, 0, 0, &err), PP_EUNSUPPORTED, "vpp=3: zbv uses a V-shaped placement");
    ZB_REFUSES(zb_build(PP_DUALPIPEV, 4, 1, 8, 0, 0, &err), PP_EUNSUPPORTED, "vpp=1: dualpipev");
    ZB_REFUSES(zb_build(PP_ZB_H1, 4, 2, 8, 0, 0, &err), PP_EUNSUPPORTED, "vpp=2: zb-h1 runs one chunk per rank");
    ZB_REFUSES(zb_build(PP_ZB_H2, 4, 2, 8, 0, 0, &err), PP_EUNSUPPORTED, "vpp=2: zb-h2");
    ZB_REFUSES(zb_build(PP_ZBV, 4, 0, 8, 4, 0, &err), PP_EUNSUPPORTED, "group=4");
    ZB_REFUSES(zb_build(PP_DUALPIPEV, 0, 0, 8, 0, 0, &err), PP_EINVAL, "pp=0");
    ZB_REFUSES(zb_build(PP_ZB_H2, 2, 0, 0, 0, 0, &err), PP_EINVAL, "mb=0");
#undef ZB_REFUSES
}

const pp_test_case pp_suite_zerobubble[] = {
    PP_TEST(zb_h1_is_pytorch_interleaved_zero_bubble_with_one_stage_per_rank),
    PP_TEST(zb_h1_every_rank_holds_pp_activations_like_1f1b_rank_0),
    PP_TEST(zb_h2_is_the_papers_parallelogram_for_pp4_mb8),
    PP_TEST(zb_h2_keeps_every_rank_within_max_live),
    PP_TEST(zb_h2_capped_at_pp_is_zb_h1),
    PP_TEST(zbv_is_pytorch_zbv_zero_bubble),
    PP_TEST(zbv_with_few_microbatches_drops_the_padding),
    PP_TEST(dualpipev_is_pytorch_dualpipev),
    PP_TEST(dualpipev_below_2pp_microbatches_drops_the_padding),
    PP_TEST(overlapped_action_text_is_pytorchs),
    PP_TEST(interleaved_zb_is_pytorch_interleaved_zero_bubble),
    PP_TEST(interleaved_zb_with_one_chunk_is_zb_h1),
    PP_TEST(every_zb_h1_zbv_dualpipev_schedule_with_pp_1_to_8_mb_1_to_32_is_valid),
    PP_TEST(split_overlaps_runs_each_fb_as_f_then_b_in_every_dualpipev_and_dualpipe),
    PP_TEST(split_overlaps_leaves_the_schedule_as_it_was_when_it_fails),
    PP_TEST(split_backward_runs_each_b_as_i_then_w_in_every_kind_with_pp_1_to_8_mb_1_to_32),
    PP_TEST(split_backward_leaves_the_schedule_as_it_was_when_it_fails),
    PP_TEST(split_backward_shortens_the_step_of_every_kind_with_whole_backwards),
    PP_TEST(rank_peaks_match_a_recount_in_every_kind_split_or_not),
    PP_TEST(rank_peaks_give_one_awaiting_w_after_the_split_and_zbvs_own_otherwise),
    PP_TEST(rank_peaks_name_the_bad_parameter),
    PP_TEST(split_dualpipev_is_faster_when_f_and_b_run_in_turn),
    PP_TEST(every_zb_h2_schedule_with_pp_1_to_8_mb_1_to_32_and_any_cap_is_valid),
    PP_TEST(every_interleaved_zb_schedule_with_pp_1_to_8_mb_1_to_32_is_valid),
    PP_TEST(interleaved_zb_refuses_rounds_smaller_than_pp),
    PP_TEST(zero_bubble_kinds_name_the_parameter_and_rule_they_refuse),
    {0}
};
