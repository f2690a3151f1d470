/* test_schedule.c — the schedule IR, generators, lowering, validator, simulator and text forms.
 *
 * Reference data: tests/data/torch_orders_subset.txt holds per-rank compute orders read from
 * PyTorch 2.11's own ScheduleInterleaved1F1B and ScheduleLoopedBFS (see shared/reference). */
#include <stdlib.h>
#include "pp_test.h"

static pp_schedule *build(pp_schedule_kind kind, int pp, int vpp, int mb, int group)
{
    pp_schedule_config cfg;
    pp_schedule *s = NULL;
    pp_error err;
    memset(&cfg, 0, sizeof cfg);
    cfg.kind = kind; cfg.pp = pp; cfg.vpp = vpp; cfg.mb = mb; cfg.group = group;
    if (pp_schedule_build(&cfg, &s, &err) != PP_OK) {
        pp_test_fail(__FILE__, __LINE__, "build %s pp=%d vpp=%d mb=%d: %s", pp_schedule_kind_name(kind), pp, vpp,
                     mb, err.message);
        return NULL;
    }
    return s;
}

/* --- placement --------------------------------------------------------------------------- */

static void looped_placement_puts_stage_s_on_rank_s_mod_pp(void)
{
    pp_schedule *s = build(PP_INTERLEAVED_1F1B, 4, 3, 4, 0);
    int st;
    if (!s) return;
    for (st = 0; st < 12; st++) {
        PP_CHECK_INT(pp_stage_rank(s, st), st % 4);
        PP_CHECK_INT(pp_stage_chunk(s, st), st / 4);
        PP_CHECK_INT(pp_rank_chunk_stage(s, st % 4, st / 4), st);
    }
    PP_CHECK_INT(pp_stage_rank(s, 12), -1);
    pp_schedule_free(s);
}

static void v_placement_puts_stages_r_and_2pp_minus_1_minus_r_on_rank_r(void)
{
    pp_schedule *s = NULL;
    pp_error err;
    int r;
    PP_CHECK_OK(pp_schedule_create(4, 2, 4, PP_PLACEMENT_V, &s, &err), &err);
    if (!s) return;
    for (r = 0; r < 4; r++) {
        PP_CHECK_INT(pp_stage_rank(s, r), r);
        PP_CHECK_INT(pp_stage_rank(s, 7 - r), r);
        PP_CHECK_INT(pp_rank_chunk_stage(s, r, 0), r);
        PP_CHECK_INT(pp_rank_chunk_stage(s, r, 1), 7 - r);
    }
    pp_schedule_free(s);
    PP_CHECK_FAILS(pp_schedule_create(4, 3, 4, PP_PLACEMENT_V, &s, &err), &err, PP_EINVAL, "exactly 2 chunks");
}

/* --- generators: hand-worked orders ----------------------------------------------------- */

static void gpipe_runs_all_forwards_then_all_backwards(void)
{
    pp_schedule *s = build(PP_GPIPE, 2, 1, 3, 0);
    char buf[512];
    if (!s) return;
    pp_test_compute_order(s, 1, buf, sizeof buf);
    PP_CHECK_STR(buf, "1F0 1F1 1F2 1B0 1B1 1B2");
    pp_schedule_free(s);
}

static void one_f_one_b_warmup_is_pp_minus_rank_minus_1(void)
{
    /* pp=4, mb=6: rank 0 warms up with 3 forwards, rank 3 with none. */
    pp_schedule *s = build(PP_1F1B, 4, 1, 6, 0);
    char buf[512];
    if (!s) return;
    pp_test_compute_order(s, 0, buf, sizeof buf);
    PP_CHECK_STR(buf, "0F0 0F1 0F2 0F3 0B0 0F4 0B1 0F5 0B2 0B3 0B4 0B5");
    pp_test_compute_order(s, 3, buf, sizeof buf);
    PP_CHECK_STR(buf, "3F0 3B0 3F1 3B1 3F2 3B2 3F3 3B3 3F4 3B4 3F5 3B5");
    pp_schedule_free(s);
    /* fewer microbatches than the warmup: all forwards first */
    s = build(PP_1F1B, 4, 1, 2, 0);
    if (!s) return;
    pp_test_compute_order(s, 0, buf, sizeof buf);
    PP_CHECK_STR(buf, "0F0 0F1 0B0 0B1");
    pp_schedule_free(s);
}

static void interleaved_follows_megatron_group_table_and_warmup(void)
{
    /* Megatron, pp=2, vpp=2, mb=4, group 2: table (mb,chunk) = (0,0)(1,0)(0,1)(1,1)(2,0)(3,0)(2,1)(3,1);
     * rank 1 warmup = 2*(2-1-1) + (2-1)*2 = 2; backward k runs table[k] with the chunk mirrored. */
    pp_schedule *s = build(PP_INTERLEAVED_1F1B, 2, 2, 4, 0);
    char buf[512];
    if (!s) return;
    pp_test_compute_order(s, 1, buf, sizeof buf);
    PP_CHECK_STR(buf, "1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1B2 1B3");
    pp_test_compute_order(s, 0, buf, sizeof buf);
    /* rank 0 warmup = 2*1 + 2 = 4 */
    PP_CHECK_STR(buf, "0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 2B2 2B3 0B2 0B3");
    pp_schedule_free(s);
}

static void interleaved_with_one_chunk_is_1f1b(void)
{
    pp_schedule *a = build(PP_INTERLEAVED_1F1B, 4, 1, 7, 0), *b = build(PP_1F1B, 4, 1, 7, 0);
    char x[1024], y[1024];
    int r;
    if (a && b)
        for (r = 0; r < 4; r++) {
            pp_test_compute_order(a, r, x, sizeof x);
            pp_test_compute_order(b, r, y, sizeof y);
            PP_CHECK_STR(x, y);
        }
    pp_schedule_free(a);
    pp_schedule_free(b);
}

static void interleaved_last_partial_group_that_would_deadlock_gets_extra_warmup(void)
{
    /* pp=4, vpp=3, mb=5 (group 4, last group 1): Megatron's exact order deadlocks (see the
     * comment at pp__build_interleaved_deadlock_free). Ours must be valid, and differ from the
     * exact table order only in where forwards sit (same multiset, same F order, same B order). */
    pp_schedule *s = build(PP_INTERLEAVED_1F1B, 4, 3, 5, 0);
    pp_error err;
    if (!s) return;
    PP_CHECK_OK(pp_schedule_validate(s, &err), &err);
    pp_schedule_free(s);
    /* vpp=2 with a partial group keeps Megatron's order (it runs as is): rank 3, pp=4, mb=5 */
    s = build(PP_INTERLEAVED_1F1B, 4, 2, 5, 0);
    if (s) {
        char buf[512];
        pp_test_compute_order(s, 3, buf, sizeof buf);
        /* table: (0..3,c0),(0..3,c1),(4,c0),(4,c1); warmup rank 3 = 0 + 4 */
        PP_CHECK_STR(buf, "3F0 3F1 3F2 3F3 7F0 7B0 7F1 7B1 7F2 7B2 7F3 7B3 3F4 3B0 7F4 3B1 3B2 3B3 7B4 3B4");
        PP_CHECK_OK(pp_schedule_validate(s, &err), &err);
        pp_schedule_free(s);
    }
}

static void interleaved_runs_for_every_group_and_mb(void)
{
    /* Megatron-LM accepts pp <= group <= mb with a last group of 0 or >= pp; pipepar any group
     * and mb. Every one must build, lower and validate (group 2 at pp 4 deadlocked before: its
     * warmup ended before the first backward's microbatch reached the last stage). Inside
     * Megatron's range the order is its table's exactly (the tests above and the PyTorch data). */
    int pp, vpp, mb, group, bad = 0;
    for (pp = 2; pp <= 6; pp++)
        for (vpp = 2; vpp <= 4; vpp++)
            for (mb = 1; mb <= 12; mb++)
                for (group = 1; group <= mb + 1 && !bad; group++) {
                    pp_schedule_config cfg;
                    pp_schedule *s = NULL;
                    pp_error err;
                    memset(&cfg, 0, sizeof cfg);
                    cfg.kind = PP_INTERLEAVED_1F1B; cfg.pp = pp; cfg.vpp = vpp; cfg.mb = mb; cfg.group = group;
                    if (pp_schedule_build(&cfg, &s, &err) != PP_OK || pp_schedule_lower(s, &err) != PP_OK ||
                        pp_schedule_validate(s, &err) != PP_OK) {
                        pp_test_fail(__FILE__, __LINE__, "interleaved pp=%d vpp=%d mb=%d group=%d: %s", pp, vpp, mb,
                                     group, err.message);
                        bad = 1;
                    }
                    pp_schedule_free(s);
                }
    PP_CHECK(!bad);
    /* below pp at pp > 64 each try re-lowers a large schedule: refused with the reason */
    {
        pp_schedule_config cfg;
        pp_schedule *s = NULL;
        pp_error err;
        memset(&cfg, 0, sizeof cfg);
        cfg.kind = PP_INTERLEAVED_1F1B; cfg.pp = 65; cfg.vpp = 2; cfg.mb = 130; cfg.group = 64;
        PP_CHECK_FAILS(pp_schedule_build(&cfg, &s, &err), &err, PP_EUNSUPPORTED,
                       "group=64: below pp=65, outside Megatron-LM's range");
        cfg.pp = 64; cfg.group = 1; cfg.mb = 64;   /* the largest pp it builds */
        PP_CHECK_OK(pp_schedule_build(&cfg, &s, &err), &err);
        if (s) PP_CHECK_OK(pp_schedule_validate(s, &err), &err);
        pp_schedule_free(s);
    }
}

/* --- generators: PyTorch reference orders ------------------------------------------------- */

static void orders_equal_pytorch_reference(void)
{
    char path[4200], line[65536], want[65536], got[65536];
    FILE *f;
    int blocks = 0, compared = 0;
    snprintf(path, sizeof path, "%s/torch_orders_subset.txt", pp_test_data_dir());
    f = fopen(path, "r");
    PP_CHECK_MSG(f != NULL, "cannot open %s", path);
    if (!f) return;
    while (fgets(line, sizeof line, f)) {
        char name[64];
        int pp, v, m, r;
        pp_schedule *s = NULL;
        if (sscanf(line, "schedule=%63s pp=%d v=%d m=%d", name, &pp, &v, &m) != 4) continue;
        blocks++;
        if (!strcmp(name, "Interleaved1F1B")) {
            int rounds = m / pp > 1 ? m / pp : 1;
            s = build(PP_INTERLEAVED_1F1B, pp, v, m, m / rounds);
        } else if (!strcmp(name, "LoopedBFS")) {
            s = build(PP_LOOPED_BFS, pp, v, m, 0);
        } else {
            PP_CHECK_MSG(0, "unknown schedule '%s' in reference", name);
        }
        for (r = 0; r < pp; r++) {
            char *p, *q;
            if (!fgets(line, sizeof line, f)) break;
            /* drop "rankR:" and every idle "_" */
            want[0] = '\0';
            p = strchr(line, ':');
            for (p = p ? p + 1 : line; (q = strtok(p, " \n")) != NULL; p = NULL) {
                if (!strcmp(q, "_")) continue;
                if (want[0]) strcat(want, " ");
                strcat(want, q);
            }
            if (s) {
                pp_test_compute_order(s, r, got, sizeof got);
                PP_CHECK_MSG(!strcmp(got, want), "%s pp=%d v=%d m=%d rank %d:\n       got  %s\n       want %s", name,
                             pp, v, m, r, got, want);
                compared++;
            }
        }
        pp_schedule_free(s);
    }
    fclose(f);
    PP_CHECK_INT(blocks, 75);
    PP_CHECK_MSG(compared > 150, "only %d rank orders compared", compared);
}

/* --- every generator is valid over the whole grid ----------------------------------------- */

static void every_generator_validates_for_pp_1_to_8_vpp_1_to_4_mb_1_to_32(void)
{
    static const pp_schedule_kind kinds[] = { PP_GPIPE, PP_1F1B, PP_INTERLEAVED_1F1B, PP_LOOPED_BFS };
    size_t k;
    int pp, vpp, mb, built = 0;
    for (k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        for (pp = 1; pp <= 8; pp++)
            for (vpp = 1; vpp <= 4; vpp++)
                for (mb = 1; mb <= 32; mb++) {
                    pp_schedule_config cfg;
                    pp_schedule *s = NULL;
                    pp_error err;
                    memset(&cfg, 0, sizeof cfg);
                    cfg.kind = kinds[k]; cfg.pp = pp; cfg.vpp = vpp; cfg.mb = mb;
                    if (pp_schedule_build(&cfg, &s, &err) != PP_OK) {
                        PP_CHECK_MSG(err.status == PP_EUNSUPPORTED && vpp > 1, "%s pp=%d vpp=%d mb=%d rejected: %s",
                                     pp_schedule_kind_name(kinds[k]), pp, vpp, mb, err.message);
                        continue;
                    }
                    built++;
                    PP_CHECK_MSG(pp_schedule_lower(s, &err) == PP_OK && pp_schedule_validate(s, &err) == PP_OK,
                                 "%s pp=%d vpp=%d mb=%d: %s", pp_schedule_kind_name(kinds[k]), pp, vpp, mb, err.message);
                    pp_schedule_free(s);
                }
    PP_CHECK_INT(built, 2 * 8 * 32 + 2 * 8 * 4 * 32);
}

/* --- the simulator reproduces the textbook bubbles ----------------------------------------- */

static double sim_bubble(pp_schedule_kind kind, int pp, int vpp, int mb, double *makespan)
{
    pp_schedule *s = build(kind, pp, vpp, mb, 0);
    pp_sim_result *r = NULL;
    pp_sim_costs c;
    pp_error err;
    double b = -1;
    memset(&c, 0, sizeof c);
    c.f = 1; c.b = 2;
    if (!s) return -1;
    PP_CHECK_OK(pp_schedule_lower(s, &err), &err);
    PP_CHECK_OK(pp_simulate(s, &c, &r, &err), &err);
    if (r) {
        int k;
        b = r->bubble[0];
        for (k = 1; k < pp; k++) PP_CHECK_NEAR(r->bubble[k], b, 1e-12);   /* the same on every rank */
        if (makespan) *makespan = r->makespan;
    }
    pp_sim_result_free(r);
    pp_schedule_free(s);
    return b;
}

static void simulated_bubbles_equal_the_textbook_formulas(void)
{
    int pp, mb, vpp;
    double ms = 0;
    for (pp = 1; pp <= 8; pp++)
        for (mb = 1; mb <= 24; mb++) {
            double want = (double)(pp - 1) / (mb + pp - 1);
            PP_CHECK_NEAR(sim_bubble(PP_1F1B, pp, 1, mb, &ms), want, 1e-12);
            PP_CHECK_NEAR(ms, 3.0 * (mb + pp - 1), 1e-9);
            PP_CHECK_NEAR(sim_bubble(PP_GPIPE, pp, 1, mb, NULL), want, 1e-12);
        }
    for (pp = 2; pp <= 8; pp *= 2)
        for (vpp = 2; vpp <= 4; vpp++)
            for (mb = pp; mb <= 4 * pp; mb += pp)
                PP_CHECK_NEAR(sim_bubble(PP_INTERLEAVED_1F1B, pp, vpp, mb, NULL),
                              (double)(pp - 1) / (vpp * mb + pp - 1), 1e-12);
}

static void peak_live_activations_of_1f1b_are_pp_minus_rank(void)
{
    pp_schedule *s = build(PP_1F1B, 4, 1, 8, 0), *g = build(PP_GPIPE, 4, 1, 8, 0);
    pp_sim_result *r = NULL, *rg = NULL;
    pp_error err;
    int k;
    if (!s || !g) { pp_schedule_free(s); pp_schedule_free(g); return; }
    PP_CHECK_OK(pp_simulate(s, NULL, &r, &err), &err);
    PP_CHECK_OK(pp_simulate(g, NULL, &rg, &err), &err);
    for (k = 0; r && rg && k < 4; k++) {
        PP_CHECK_INT(r->peak_live[k], 4 - k);
        PP_CHECK_INT(rg->peak_live[k], 8);       /* GPipe holds every microbatch */
    }
    pp_sim_result_free(r); pp_sim_result_free(rg);
    pp_schedule_free(s); pp_schedule_free(g);
}

static void communication_cost_delays_the_step_by_the_transfers_on_the_critical_path(void)
{
    /* 1F1B pp=2 mb=1 with latency L: F0 (1) + L + F1 (1) + B1 (2) + L + B0 (2) = 6 + 2L */
    pp_schedule *s = build(PP_1F1B, 2, 1, 1, 0);
    pp_sim_result *r = NULL;
    pp_sim_costs c;
    pp_error err;
    memset(&c, 0, sizeof c);
    c.f = 1; c.b = 2; c.p2p_latency = 0.25;
    if (!s) return;
    PP_CHECK_OK(pp_simulate(s, &c, &r, &err), &err);
    if (r) PP_CHECK_NEAR(r->makespan, 6.5, 1e-12);
    pp_sim_result_free(r);
    pp_schedule_free(s);
}

/* Every kind the simulator's property tests walk, each with the chunks per rank it is built with. */
static const pp_schedule_kind sim_kinds[] = { PP_GPIPE, PP_1F1B, PP_INTERLEAVED_1F1B, PP_LOOPED_BFS, PP_ZB_H1,
                                              PP_ZB_H2, PP_ZBV, PP_DUALPIPEV, PP_INTERLEAVED_ZB, PP_DUALPIPE };
static int sim_kind_vpp(pp_schedule_kind kind)
{
    return kind == PP_ZBV || kind == PP_DUALPIPEV || kind == PP_DUALPIPE || kind == PP_INTERLEAVED_1F1B ||
           kind == PP_LOOPED_BFS || kind == PP_INTERLEAVED_ZB ? 2 : 1;
}

/* pp_sim_result.bound: no order of a schedule's actions beats it, so the step is never below it,
 * whatever the costs (per stage, per rank, per action, transfers one by one or grouped, a stage's
 * tail); and where the textbook says the order is the fastest there is (GPipe, 1F1B, and ZB-H1
 * with a microbatch a rank or more; F=1, B=2, free transfers), it is the step. ZB-H1 on one
 * microbatch shows what the bound leaves out: rank 0's I waits for the gradient to come back
 * from the last stage (pp 2: bound 4, step 5, and no order does better). Every kind, pp 1..5,
 * random costs, no tolerance: the bound sums the step's own durations in another order, and a
 * rounding above the step is clamped to it (GPipe pp 2, one microbatch, F = B = transfer = 0.1:
 * 0.6 both, where the sums differ in the last bit). */
static void the_bound_is_never_above_the_step_and_meets_it_for_gpipe_1f1b_and_zb_h1(void)
{
    unsigned long long seed = 0x9e3779b97f4a7c15ULL;
    int k, pp, mbi, trial, checked = 0;
#define BOUND_RAND() ((seed = seed * 6364136223846793005ULL + 1442695040888963407ULL), (double)(seed >> 11) / 9007199254740992.0)
    for (k = 0; k < (int)(sizeof sim_kinds / sizeof sim_kinds[0]); k++)
        for (pp = 1; pp <= 5; pp++)
            for (mbi = 0; mbi < 3; mbi++) {
                pp_schedule_kind kind = sim_kinds[k];
                int vpp = sim_kind_vpp(kind);
                int mb = mbi == 0 ? 1 : mbi * 2 * pp, n, r, i;
                pp_schedule_config cfg;
                pp_schedule *s = NULL;
                pp_error err;
                memset(&cfg, 0, sizeof cfg);
                cfg.kind = kind; cfg.pp = pp; cfg.vpp = vpp; cfg.mb = mb;
                if (pp_schedule_build(&cfg, &s, &err) != PP_OK) continue;   /* a config this kind does not take */
                PP_CHECK_OK(pp_schedule_lower(s, &err), &err);
                n = s->num_stages;
                if (kind == PP_GPIPE || kind == PP_1F1B || (kind == PP_ZB_H1 && mb >= pp)) {
                    pp_sim_result *res = NULL;
                    pp_sim_costs c;
                    memset(&c, 0, sizeof c);
                    c.f = 1; c.b = 2;
                    PP_CHECK_OK(pp_simulate(s, &c, &res, &err), &err);
                    if (res) PP_CHECK_MSG(fabs(res->bound - res->makespan) < 1e-9, "%s pp %d mb %d: bound %.9g, step %.9g",
                                          pp_schedule_kind_name(kind), pp, mb, res->bound, res->makespan);
                    pp_sim_result_free(res);
                }
                if (kind == PP_GPIPE && pp == 2 && mb == 1) {
                    pp_sim_result *res = NULL;
                    pp_sim_costs c;
                    memset(&c, 0, sizeof c);
                    c.f = 0.1; c.b = 0.1; c.p2p_latency = 0.1;
                    PP_CHECK_OK(pp_simulate(s, &c, &res, &err), &err);
                    if (res) PP_CHECK_MSG(res->bound == res->makespan, "bound %.17g, step %.17g", res->bound, res->makespan);
                    pp_sim_result_free(res);
                }
                for (trial = 0; trial < 6; trial++) {
                    double fs[16], is[16], ws[16], bs[16], tail[16], speed[8], *rows[8] = { 0 };
                    pp_sim_result *res = NULL;
                    pp_sim_costs c;
                    memset(&c, 0, sizeof c);
                    c.f = 0.2 + BOUND_RAND(); c.i = 0.2 + BOUND_RAND(); c.w = 0.2 + BOUND_RAND();
                    c.b = trial % 2 ? c.i + c.w : 0;
                    c.p2p_latency = trial % 3 ? 0.3 * BOUND_RAND() : 0;
                    c.grouped = trial % 3;
                    if (trial >= 2 && n <= 16) {
                        for (i = 0; i < n; i++) {
                            fs[i] = 0.1 + BOUND_RAND(); is[i] = 0.1 + BOUND_RAND(); ws[i] = 0.1 + BOUND_RAND();
                            bs[i] = is[i] + ws[i]; tail[i] = trial == 3 ? 0.5 * BOUND_RAND() : 0;
                        }
                        c.f_stage = fs; c.i_stage = is; c.w_stage = ws; c.b_stage = bs; c.tail_stage = tail;
                    }
                    if (trial >= 4) {
                        for (r = 0; r < pp; r++) speed[r] = 0.5 + BOUND_RAND();
                        c.rank_speed = speed;
                    }
                    if (trial == 5) {   /* measured: every compute action its own time */
                        for (r = 0; r < pp; r++) {
                            rows[r] = (double *)malloc((size_t)(s->length[r] > 0 ? s->length[r] : 1) * sizeof(double));
                            PP_CHECK(rows[r] != NULL);
                            for (i = 0; rows[r] && i < s->length[r]; i++) rows[r][i] = 0.1 + 2 * BOUND_RAND();
                        }
                        c.action_cost = (const double *const *)rows;
                        c.tail_stage = NULL;
                    }
                    PP_CHECK_OK(pp_simulate(s, &c, &res, &err), &err);
                    if (res) {
                        PP_CHECK_MSG(res->makespan >= res->bound && res->bound > 0 &&
                                         res->bound_rank >= 0 && res->bound_rank < pp,
                                     "%s pp %d mb %d trial %d: step %.9g below its bound %.9g (rank %d)",
                                     pp_schedule_kind_name(kind), pp, mb, trial, res->makespan, res->bound, res->bound_rank);
                        checked++;
                    }
                    pp_sim_result_free(res);
                    for (r = 0; r < pp; r++) free(rows[r]);
                }
                pp_schedule_free(s);
            }
#undef BOUND_RAND
    PP_CHECK_MSG(checked > 600, "only %d simulations checked", checked);
}

/* A stage's tail (costs.tail_stage): work its rank does once a step after the stage's last
 * backward, once the sends after it are posted. 1F1B pp 2, mb 4, F = 1, B = 2: rank 1 ends its
 * last B at 13, its gradient leaves at once and rank 0's last B runs 13 -> 15. A tail of 1 on
 * stage 1 runs beside that B (the step stays 15: it does not hold the send back), a tail of 3
 * ends at 16; a tail on stage 0 comes after rank 0's last B (15 + 2). Each counts as its rank's
 * compute; ungrouped and grouped the same; a negative tail is refused naming the stage. */
static void a_stage_tail_runs_after_its_last_backward_and_beside_the_send(void)
{
    static const struct { double t0, t1, step, busy0, busy1; } cases[] = {
        { 0, 1, 15, 12, 13 }, { 0, 3, 16, 12, 15 }, { 2, 0, 17, 14, 12 }, { 0, 0, 15, 12, 12 },
    };
    pp_schedule *s = build(PP_1F1B, 2, 1, 4, 0);
    pp_sim_costs c;
    pp_error err;
    double tail[2];
    size_t k;
    int g;
    if (!s) return;
    for (k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (g = 0; g <= 1; g++) {
            pp_sim_result *r = NULL;
            memset(&c, 0, sizeof c);
            c.f = 1; c.b = 2; c.grouped = g;
            tail[0] = cases[k].t0; tail[1] = cases[k].t1;
            c.tail_stage = tail;
            PP_CHECK_OK(pp_simulate(s, &c, &r, &err), &err);
            if (!r) continue;
            PP_CHECK_MSG(fabs(r->makespan - cases[k].step) < 1e-12, "tails %g, %g (grouped %d): step %g, want %g",
                         cases[k].t0, cases[k].t1, g, r->makespan, cases[k].step);
            PP_CHECK_NEAR(r->busy[0], cases[k].busy0, 1e-12);
            PP_CHECK_NEAR(r->busy[1], cases[k].busy1, 1e-12);
            pp_sim_result_free(r);
        }
    {
        pp_sim_result *r = NULL;
        tail[0] = 0; tail[1] = -1;
        PP_CHECK(pp_simulate(s, &c, &r, &err) == PP_EINVAL);
        PP_CHECK_MSG(strstr(err.message, "tail_stage[1]") != NULL, "%s", err.message);
        PP_CHECK(r == NULL);
    }
    pp_schedule_free(s);
}

/* Grouped transfers (costs.grouped): a group waits for the one before it on its rank's stream.
 * Interleaved pp 2, vpp 2, mb 2, F = 1, B = 2 (a chunk: F 0.5, B 1), each transfer 1: rank 1
 * posts its send of 3B1's gradient (group 7) at 7.5, but its group before, the receive of 2B0's
 * gradient, can only start at 8 (rank 0 finishes 2B0 then) and ends at 9. One by one the send
 * runs 8 -> 9; grouped it runs 9 -> 10, and the step ends at 15 instead of 14. */
static void grouped_transfers_wait_for_the_group_before_them_on_the_stream(void)
{
    pp_schedule *s = build(PP_INTERLEAVED_1F1B, 2, 2, 2, 0);
    pp_sim_result *one = NULL, *grp = NULL;
    pp_sim_costs c;
    pp_error err;
    int i, send_b1 = -1, recv_b0 = -1;
    if (!s) return;
    PP_CHECK_OK(pp_schedule_lower(s, &err), &err);
    for (i = 0; i < s->length[1]; i++) {
        pp_action a = s->actions[1][i];
        if (a.op == PP_OP_SEND_B && a.stage == 3 && a.mb == 1) send_b1 = i;
        if (a.op == PP_OP_RECV_B && a.stage == 1 && a.mb == 0) recv_b0 = i;
    }
    PP_CHECK(send_b1 > recv_b0 && recv_b0 >= 0);
    memset(&c, 0, sizeof c);
    c.f = 1; c.b = 2; c.p2p_latency = 1;
    PP_CHECK_OK(pp_simulate(s, &c, &one, &err), &err);
    c.grouped = 1;
    PP_CHECK_OK(pp_simulate(s, &c, &grp, &err), &err);
    if (one && grp && send_b1 >= 0 && recv_b0 >= 0) {
        PP_CHECK_NEAR(one->makespan, 14, 1e-12);
        PP_CHECK_NEAR(grp->makespan, 15, 1e-12);
        PP_CHECK_NEAR(one->start[1][send_b1], 8, 1e-12);
        PP_CHECK_NEAR(grp->start[1][recv_b0], 8, 1e-12);
        PP_CHECK_NEAR(grp->end[1][recv_b0], 9, 1e-12);
        PP_CHECK_NEAR(grp->start[1][send_b1], 9, 1e-12);
        PP_CHECK_NEAR(grp->end[1][send_b1], 10, 1e-12);
    }
    pp_sim_result_free(one);
    pp_sim_result_free(grp);
    pp_schedule_free(s);
}

/* Grouping only ever delays: with a latency or without, the step is never shorter than with
 * each transfer on its own. With free transfers and one peer per group (pp 2) it changes
 * nothing: a round's group is posted after its rank's compute and meets the peer's at once.
 * With two peers in a group it can: DualPipeV at pp 3 and 4 puts an F&B's two outputs, one to
 * each neighbour, in one group, which then waits for the later neighbour (20 -> 21.5 at pp 3,
 * mb 6; 27 -> 30 at pp 4, mb 8), as a runtime group that ends as a whole does.
 * Every kind, pp 2..4, several microbatch counts. */
static void grouped_transfers_change_nothing_when_free_and_never_shorten_the_step(void)
{
    int k, pp, mbi;
    for (k = 0; k < (int)(sizeof sim_kinds / sizeof sim_kinds[0]); k++)
        for (pp = 2; pp <= 4; pp++)
            for (mbi = 0; mbi < 3; mbi++) {
                pp_schedule_kind kind = sim_kinds[k];
                int vpp = sim_kind_vpp(kind);
                int mb = (mbi + 1) * 2 * pp;
                pp_schedule_config cfg;
                pp_schedule *s = NULL;
                pp_sim_result *one = NULL, *grp = NULL;
                pp_sim_costs c;
                pp_error err;
                double lat;
                if (kind == PP_DUALPIPE && pp % 2) continue;
                memset(&cfg, 0, sizeof cfg);
                cfg.kind = kind; cfg.pp = pp; cfg.vpp = vpp; cfg.mb = mb;
                if (pp_schedule_build(&cfg, &s, &err) != PP_OK) continue;   /* a config this kind does not take */
                PP_CHECK_OK(pp_schedule_lower(s, &err), &err);
                for (lat = 0; lat < 0.5; lat += 0.2) {
                    memset(&c, 0, sizeof c);
                    c.f = 1; c.i = 1; c.w = 1; c.b = 2; c.p2p_latency = lat;
                    one = grp = NULL;
                    PP_CHECK_OK(pp_simulate(s, &c, &one, &err), &err);
                    c.grouped = 1;
                    PP_CHECK_OK(pp_simulate(s, &c, &grp, &err), &err);
                    if (one && grp) {
                        if (lat == 0 && (pp == 2 || kind != PP_DUALPIPEV))
                            PP_CHECK_MSG(fabs(grp->makespan - one->makespan) < 1e-9, "%s pp %d mb %d: grouped %.9g, one "
                                         "by one %.9g", pp_schedule_kind_name(kind), pp, mb, grp->makespan, one->makespan);
                        PP_CHECK_MSG(grp->makespan >= one->makespan - 1e-9, "%s pp %d mb %d latency %g: grouped %.9g "
                                     "< one by one %.9g", pp_schedule_kind_name(kind), pp, mb, lat, grp->makespan,
                                     one->makespan);
                        if (lat == 0 && kind == PP_DUALPIPEV && pp == 4 && mb == 8)
                            PP_CHECK_NEAR(grp->makespan, 30, 1e-9);   /* against 27 one by one */
                    }
                    pp_sim_result_free(one);
                    pp_sim_result_free(grp);
                }
                pp_schedule_free(s);
            }
}

/* grouped = 2, a group per peer on that peer's stream (a transport with independent_peers): at
 * pp 2 a rank has one peer and it times as grouped = 1; at pp 3 and 4 it is never slower than
 * grouped = 1 and never faster than each transfer on its own. Where the neighbours' groups are
 * what costs: ZB-V at pp 4, 16 microbatches, latency 0.2: per peer is shorter than a group a round.
 * An unknown mode is refused naming the values. */
static void peer_groups_time_between_one_by_one_and_round_groups(void)
{
    static const pp_schedule_kind kinds[] = { PP_GPIPE, PP_1F1B, PP_INTERLEAVED_1F1B, PP_ZB_H1, PP_ZBV,
                                              PP_DUALPIPEV, PP_INTERLEAVED_ZB };
    int k, pp;
    for (k = 0; k < (int)(sizeof kinds / sizeof kinds[0]); k++)
        for (pp = 2; pp <= 4; pp++) {
            pp_schedule_kind kind = kinds[k];
            int vpp = sim_kind_vpp(kind), mode;
            pp_schedule_config cfg;
            pp_schedule *s = NULL;
            pp_sim_result *r[3] = { NULL, NULL, NULL };
            pp_sim_costs c;
            pp_error err;
            memset(&cfg, 0, sizeof cfg);
            cfg.kind = kind; cfg.pp = pp; cfg.vpp = vpp; cfg.mb = 4 * pp;
            if (pp_schedule_build(&cfg, &s, &err) != PP_OK) continue;
            PP_CHECK_OK(pp_schedule_lower(s, &err), &err);
            for (mode = 0; mode < 3; mode++) {
                memset(&c, 0, sizeof c);
                c.f = 1; c.i = 1.1; c.w = 0.9; c.p2p_latency = 0.2; c.grouped = mode;
                PP_CHECK_OK(pp_simulate(s, &c, &r[mode], &err), &err);
            }
            if (r[0] && r[1] && r[2]) {
                const char *kn = pp_schedule_kind_name(kind);
                if (pp == 2)
                    PP_CHECK_MSG(fabs(r[2]->makespan - r[1]->makespan) < 1e-9, "%s pp 2: per peer %.9g, a group a "
                                 "round %.9g", kn, r[2]->makespan, r[1]->makespan);
                PP_CHECK_MSG(r[2]->makespan <= r[1]->makespan + 1e-9 && r[2]->makespan >= r[0]->makespan - 1e-9,
                             "%s pp %d: per peer %.9g, not between one by one %.9g and a group a round %.9g", kn, pp,
                             r[2]->makespan, r[0]->makespan, r[1]->makespan);
                if (kind == PP_ZBV && pp == 4)
                    PP_CHECK_MSG(r[2]->makespan < r[1]->makespan - 1e-6, "zbv pp 4: per peer %.9g, a group a round "
                                 "%.9g", r[2]->makespan, r[1]->makespan);
            }
            for (mode = 0; mode < 3; mode++) pp_sim_result_free(r[mode]);
            pp_schedule_free(s);
        }
    {
        pp_schedule_config cfg;
        pp_schedule *s = NULL;
        pp_sim_result *res = NULL;
        pp_sim_costs c;
        pp_error err;
        memset(&cfg, 0, sizeof cfg);
        cfg.kind = PP_1F1B; cfg.pp = 2; cfg.mb = 4;
        PP_CHECK_OK(pp_schedule_build(&cfg, &s, &err), &err);
        memset(&c, 0, sizeof c);
        c.grouped = 3;
        PP_CHECK_FAILS(pp_simulate(s, &c, &res, &err), &err, PP_EINVAL, "costs: grouped=3: must be 0");
        PP_CHECK(res == NULL);
        pp_schedule_free(s);
    }
}

/* --- lowering ---------------------------------------------------------------------------- */

static void lowering_pairs_every_cross_rank_tensor_with_one_send_and_one_receive(void)
{
    pp_schedule *s = build(PP_1F1B, 3, 1, 4, 0);
    pp_error err;
    int r, i, sends = 0, recvs = 0;
    if (!s) return;
    PP_CHECK_OK(pp_schedule_lower(s, &err), &err);
    for (r = 0; r < 3; r++)
        for (i = 0; i < s->length[r]; i++) {
            int op = s->actions[r][i].op;
            if (op == PP_OP_SEND_F || op == PP_OP_SEND_B) sends++;
            if (op == PP_OP_RECV_F || op == PP_OP_RECV_B) recvs++;
        }
    /* 2 boundaries x 4 microbatches x (activation + gradient) */
    PP_CHECK_INT(sends, 16);
    PP_CHECK_INT(recvs, 16);
    /* lowering twice gives the same program */
    {
        pp_schedule *c = NULL;
        PP_CHECK_OK(pp_schedule_copy(s, &c, &err), &err);
        PP_CHECK_OK(pp_schedule_lower(c, &err), &err);
        for (r = 0; c && r < 3; r++) {
            PP_CHECK_INT(c->length[r], s->length[r]);
            if (c->length[r] == s->length[r])
                PP_CHECK(memcmp(c->actions[r], s->actions[r], (size_t)s->length[r] * sizeof(pp_action)) == 0);
        }
        pp_schedule_free(c);
    }
    pp_schedule_free(s);
}

static void same_rank_neighbours_in_v_placement_pass_without_communication(void)
{
    /* pp=2 V: rank 0 holds stages 0 and 3, rank 1 holds 1 and 2: 1 -> 2 stays on rank 1 */
    pp_schedule *s = NULL;
    pp_error err;
    int r, i, m, local = 1;
    PP_CHECK_OK(pp_schedule_create(2, 2, 2, PP_PLACEMENT_V, &s, &err), &err);
    if (!s) return;
    for (m = 0; m < 2; m++) {
        pp_action a = { PP_OP_F, 0, 0, -1, -1, 0 };
        a.mb = m;
        a.stage = 0; pp_schedule_append(s, 0, a, &err);
        a.stage = 1; pp_schedule_append(s, 1, a, &err);
        a.stage = 2; pp_schedule_append(s, 1, a, &err);
        a.stage = 3; pp_schedule_append(s, 0, a, &err);
        a.op = PP_OP_B;
        a.stage = 3; pp_schedule_append(s, 0, a, &err);
        a.stage = 2; pp_schedule_append(s, 1, a, &err);
        a.stage = 1; pp_schedule_append(s, 1, a, &err);
        a.stage = 0; pp_schedule_append(s, 0, a, &err);
    }
    PP_CHECK_OK(pp_schedule_lower(s, &err), &err);
    PP_CHECK_OK(pp_schedule_validate(s, &err), &err);
    for (r = 0; r < 2; r++)
        for (i = 0; i < s->length[r]; i++) {
            pp_action a = s->actions[r][i];
            if ((a.op == PP_OP_SEND_F && a.stage == 1) || (a.op == PP_OP_SEND_B && a.stage == 2)) local = 0;
        }
    PP_CHECK_MSG(local, "stage 1 -> 2 is on one rank and must not be sent");
    pp_schedule_free(s);
}

static void compute_order_that_cannot_run_is_reported_as_deadlock(void)
{
    /* rank 1 wants mb 1 before mb 0, rank 0 will only do mb 1 after mb 0's backward */
    pp_schedule *s = NULL;
    pp_error err;
    static const char *rank0[] = { "0F0", "0B0", "0F1", "0B1" };
    static const char *rank1[] = { "1F1", "1B1", "1F0", "1B0" };
    int i;
    PP_CHECK_OK(pp_schedule_create(2, 1, 2, PP_PLACEMENT_LOOPED, &s, &err), &err);
    if (!s) return;
    for (i = 0; i < 4; i++) {
        pp_action a;
        PP_CHECK_OK(pp_action_parse(rank0[i], &a, &err), &err); pp_schedule_append(s, 0, a, &err);
        PP_CHECK_OK(pp_action_parse(rank1[i], &a, &err), &err); pp_schedule_append(s, 1, a, &err);
    }
    PP_CHECK_FAILS(pp_schedule_validate(s, &err), &err, PP_EDEADLOCK, "rank 0 position 1 (0B0)");
    PP_CHECK_FAILS(pp_schedule_lower(s, &err), &err, PP_EDEADLOCK, "rank 1 position 0 (1F1)");
    pp_schedule_free(s);
}

/* --- the validator rejects broken lowered schedules with a message that names the place ---- */

static pp_status validate_programs(int pp, int mb, const char *const *programs, pp_error *err)
{
    pp_schedule *s = NULL;
    pp_status st;
    int r;
    st = pp_schedule_create(pp, 1, mb, PP_PLACEMENT_LOOPED, &s, err);
    if (st != PP_OK) return st;
    for (r = 0; r < pp; r++) {
        char buf[1024], *tok, *p;
        snprintf(buf, sizeof buf, "%s", programs[r]);
        int group = 1;
        for (p = buf; (tok = strtok(p, " ")) != NULL; p = NULL) {
            pp_action a;
            if (!strcmp(tok, "|")) { group++; continue; }   /* "|" closes a communication group */
            if ((st = pp_action_parse(tok, &a, err)) == PP_OK) a.group = group;
            if (st != PP_OK || (st = pp_schedule_append(s, r, a, err)) != PP_OK) {
                pp_schedule_free(s);
                return st;
            }
        }
    }
    st = pp_schedule_validate(s, err);
    pp_schedule_free(s);
    return st;
}

static void validator_accepts_a_hand_lowered_1f1b(void)
{
    static const char *const ok[] = { "0F0 0SEND_F0 | 0RECV_B0 0B0", "1RECV_F0 1F0 1B0 1SEND_B0" };
    /* the same with rank 0's two transfers in one group: its partners are in two groups of rank 1 */
    static const char *const merged[] = { "0F0 0SEND_F0 0RECV_B0 0B0", "1RECV_F0 1F0 1B0 1SEND_B0" };
    pp_error err;
    PP_CHECK_OK(validate_programs(2, 1, ok, &err), &err);
    PP_CHECK_FAILS(validate_programs(2, 1, merged, &err), &err, PP_EINVALID_SCHEDULE,
                   "rank 0 position 2: 0RECV_B0 is in the group that starts at position 1, but its partner on rank 1 "
                   "is in that rank's group at position 3");
}

static void validator_names_a_missing_receive(void)
{
    static const char *const bad[] = { "0F0 0SEND_F0 0RECV_B0 0B0", "1F0 1B0 1SEND_B0" };
    pp_error err;
    PP_CHECK_FAILS(validate_programs(2, 1, bad, &err), &err, PP_EINVALID_SCHEDULE,
                   "rank 0 position 1: 0SEND_F0 has no matching 1RECV_F0 on rank 1");
}

static void validator_names_a_receive_placed_after_its_use(void)
{
    static const char *const bad[] = { "0F0 0SEND_F0 0RECV_B0 0B0", "1F0 1RECV_F0 1B0 1SEND_B0" };
    pp_error err;
    PP_CHECK_FAILS(validate_programs(2, 1, bad, &err), &err, PP_EINVALID_SCHEDULE,
                   "rank 1 position 0: 1F0 needs the output of stage 0 (rank 0), but no RECV_F before it received it");
}

static void validator_names_a_backward_before_its_forward(void)
{
    static const char *const bad[] = { "0B0 0F0" };
    pp_error err;
    PP_CHECK_FAILS(validate_programs(1, 1, bad, &err), &err, PP_EINVALID_SCHEDULE, "rank 0 position 0: 0B0 comes before its own F");
}

static void validator_finds_the_deadlock_of_crossed_sends(void)
{
    /* rank 0 sends mb 1's activation in a group of its own, then computes, then receives mb 0's
     * gradient; rank 1 sends mb 0's gradient in a group of its own (its W0 separates the groups),
     * then receives mb 1's activation. With sends that wait for their receives, both wait forever. */
    static const char *const bad[] = {
        "0F0 0SEND_F0 0F1 0SEND_F1 0F2 0SEND_F2 0RECV_B0 0B0 0RECV_B1 0B1 0RECV_B2 0B2",
        "1RECV_F0 1F0 1I0 1SEND_B0 1W0 1RECV_F1 1F1 1B1 1SEND_B1 1RECV_F2 1F2 1B2 1SEND_B2" };
    /* paired the way Megatron pairs them: rank 0 sends mb 1 and receives mb 0's gradient in one
     * group, rank 1 sends that gradient and receives mb 1 in the matching group: no deadlock */
    static const char *const good[] = {
        "0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0F2 0SEND_F2 0RECV_B1 0B1 0RECV_B2 0B2",
        "1RECV_F0 1F0 1I0 1SEND_B0 1RECV_F1 1W0 1F1 1B1 1SEND_B1 1RECV_F2 1F2 1B2 1SEND_B2" };
    pp_error err;
    PP_CHECK_FAILS(validate_programs(2, 3, bad, &err), &err, PP_EDEADLOCK,
                   "rank 0 waits at position 3 (0SEND_F1) for rank 1, which is at position 3");
    PP_CHECK_OK(validate_programs(2, 3, good, &err), &err);
}

static void validator_names_duplicate_and_missing_compute(void)
{
    static const char *const dup[] = { "0F0 0F0 0B0" };
    static const char *const miss[] = { "0F0" };
    static const char *const wrong_rank[] = { "1F0 0F0 0SEND_F0 0RECV_B0 0B0", "1RECV_F0 1F0 1B0 1SEND_B0" };
    pp_error err;
    PP_CHECK_FAILS(validate_programs(1, 1, dup, &err), &err, PP_EINVALID_SCHEDULE, "second F of stage 0 microbatch 0");
    PP_CHECK_FAILS(validate_programs(1, 1, miss, &err), &err, PP_EINVALID_SCHEDULE, "stage 0 microbatch 0: no B");
    PP_CHECK_FAILS(validate_programs(2, 1, wrong_rank, &err), &err, PP_EINVALID_SCHEDULE,
                   "rank 0 position 0: 1F0 computes stage 1, which lives on rank 1");
}

static void validator_rejects_split_backward_without_its_w(void)
{
    static const char *const bad[] = { "0F0 0I0" };
    static const char *const ok[] = { "0F0 0I0 0W0" };
    static const char *const order[] = { "0F0 0W0 0I0" };
    pp_error err;
    PP_CHECK_FAILS(validate_programs(1, 1, bad, &err), &err, PP_EINVALID_SCHEDULE, "an I needs exactly one W");
    PP_CHECK_OK(validate_programs(1, 1, ok, &err), &err);
    PP_CHECK_FAILS(validate_programs(1, 1, order, &err), &err, PP_EINVALID_SCHEDULE, "0W0 comes before its I");
}

/* --- configuration errors ----------------------------------------------------------------- */

static void bad_configs_are_rejected_with_the_parameter_named(void)
{
    pp_schedule_config cfg;
    pp_schedule *s = NULL;
    pp_error err;
    pp_schedule_kind k;
    memset(&cfg, 0, sizeof cfg);
    cfg.kind = PP_1F1B; cfg.pp = 0; cfg.mb = 4;
    PP_CHECK_FAILS(pp_schedule_build(&cfg, &s, &err), &err, PP_EINVAL, "pp=0: must be at least 1");
    cfg.pp = 2; cfg.mb = 0;
    PP_CHECK_FAILS(pp_schedule_build(&cfg, &s, &err), &err, PP_EINVAL, "mb=0: must be at least 1");
    cfg.mb = 4; cfg.vpp = -1;
    PP_CHECK_FAILS(pp_schedule_build(&cfg, &s, &err), &err, PP_EINVAL, "vpp=-1");
    cfg.vpp = 2;
    PP_CHECK_FAILS(pp_schedule_build(&cfg, &s, &err), &err, PP_EUNSUPPORTED, "vpp=2: 1f1b runs one chunk per rank");
    cfg.vpp = 1; cfg.group = 3;
    PP_CHECK_FAILS(pp_schedule_build(&cfg, &s, &err), &err, PP_EUNSUPPORTED, "group=3: only interleaved");
    cfg.group = 0; cfg.kind = PP_KIND_NONE;
    PP_CHECK_FAILS(pp_schedule_build(&cfg, &s, &err), &err, PP_EINVAL, "kind=0");
    PP_CHECK_FAILS(pp_schedule_kind_parse("zigzag", &k, &err), &err, PP_EINVAL, "kind 'zigzag': unknown");
    PP_CHECK_OK(pp_schedule_kind_parse("looped-bfs", &k, &err), &err);
    PP_CHECK_INT(k, PP_LOOPED_BFS);
    PP_CHECK(s == NULL);
}

/* --- text forms ---------------------------------------------------------------------------- */

static void actions_format_and_parse_in_pytorch_spelling(void)
{
    static const char *const texts[] = { "4F0", "12B3", "0I7", "3W1", "1SEND_F3", "2RECV_F0", "0SEND_B9",
                                         "7RECV_B12", "(0F1;3B0)OVERLAP_F_B" };
    static const char *const bad[] = { "", "F0", "4X0", "4F", "4F0x", "-1F0", "4SEND_X0", "1234567890F0",
                                       "(0F1;3F0)OVERLAP_F_B", "(0F1 3B0)OVERLAP_F_B", "0UNSHARD" };
    size_t i;
    pp_error err;
    for (i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        pp_action a;
        char buf[64];
        PP_CHECK_OK(pp_action_parse(texts[i], &a, &err), &err);
        pp_action_format(a, buf, sizeof buf);
        PP_CHECK_STR(buf, texts[i]);
    }
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pp_action a;
        PP_CHECK_MSG(pp_action_parse(bad[i], &a, &err) == PP_EPARSE, "'%s' parsed", bad[i]);
    }
    {
        pp_action a;
        PP_CHECK_OK(pp_action_parse("  2F5 \r\n", &a, &err), &err);
        PP_CHECK_INT(a.stage, 2);
        PP_CHECK_INT(a.mb, 5);
    }
}

static void csv_round_trip_keeps_every_action(void)
{
    pp_schedule *s = build(PP_INTERLEAVED_1F1B, 4, 2, 8, 0), *back = NULL;
    pp_error err;
    char *text = NULL;
    size_t len = 0;
    FILE *mem;
    int r;
    if (!s) return;
    PP_CHECK_OK(pp_schedule_lower(s, &err), &err);
    mem = open_memstream(&text, &len);
    PP_CHECK_OK(pp_schedule_write_csv(s, mem, &err), &err);
    fclose(mem);
    PP_CHECK_OK(pp_schedule_read_csv(text, len, &back, &err), &err);
    if (back) {
        PP_CHECK_INT(back->pp, 4);
        PP_CHECK_INT(back->vpp, 2);
        PP_CHECK_INT(back->mb, 8);
        PP_CHECK(back->lowered);
        for (r = 0; r < 4; r++) {
            int i;
            PP_CHECK_INT(back->length[r], s->length[r]);
            for (i = 0; i < s->length[r] && back->length[r] == s->length[r]; i++) {
                pp_action a = s->actions[r][i], b = back->actions[r][i];
                PP_CHECK(a.op == b.op && a.stage == b.stage && a.mb == b.mb);
                /* the same group boundaries (the numbering may differ) */
                PP_CHECK_INT(pp_schedule_group_end(back, r, i), pp_schedule_group_end(s, r, i));
            }
        }
        PP_CHECK_OK(pp_schedule_validate(back, &err), &err);
    }
    free(text);
    pp_schedule_free(back);
    pp_schedule_free(s);
}

static void csv_reader_takes_compute_only_orders_and_rejects_bad_ones(void)
{
    static const char good[] = "0F0,,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n";
    static const char ragged[] = "0F0,0B0\n1F0,1B0\n2F0,2B0\n";   /* 3 rows, 3 stages: fine */
    static const char bad_place[] = "1F0,1B0\n0F0,0B0\n";
    static const char bad_cell[] = "0F0,0Q0\n1F0,1B0\n";
    static const char empty[] = "\n\n";
    pp_schedule *s = NULL;
    pp_error err;
    PP_CHECK_OK(pp_schedule_read_csv(good, strlen(good), &s, &err), &err);
    if (s) {
        PP_CHECK(!s->lowered);
        PP_CHECK_OK(pp_schedule_validate(s, &err), &err);
        pp_schedule_free(s);
        s = NULL;
    }
    PP_CHECK_OK(pp_schedule_read_csv(ragged, strlen(ragged), &s, &err), &err);
    pp_schedule_free(s);
    s = NULL;
    PP_CHECK_FAILS(pp_schedule_read_csv(bad_place, strlen(bad_place), &s, &err), &err, PP_EPARSE, "neither looped");
    PP_CHECK_FAILS(pp_schedule_read_csv(bad_cell, strlen(bad_cell), &s, &err), &err, PP_EPARSE, "CSV row 1 (rank 0): action '0Q0'");
    PP_CHECK_FAILS(pp_schedule_read_csv(empty, strlen(empty), &s, &err), &err, PP_EPARSE, "no actions");
}

static void csv_reader_survives_random_bytes(void)
{
    /* bounded fuzz: random mutations of a valid CSV never crash, leak or hang */
    static const char seed[] = "0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n";
    static const char alphabet[] = "0123456789FBIWSENDRCV_,\n;()OVERLAP ";
    unsigned state = 12345;
    int round, ok = 0;
    for (round = 0; round < 3000; round++) {
        char buf[128];
        size_t len = sizeof seed - 1, k;
        pp_schedule *s = NULL;
        pp_error err;
        memcpy(buf, seed, len);
        for (k = 0; k < 1 + (size_t)(round % 6); k++) {
            state = state * 1103515245u + 12345u;
            buf[(state >> 8) % len] = alphabet[(state >> 16) % (sizeof alphabet - 1)];
        }
        if (pp_schedule_read_csv(buf, len, &s, &err) == PP_OK) {
            ok++;
            (void)pp_schedule_validate(s, &err);
            pp_schedule_free(s);
        }
    }
    PP_CHECK(ok > 0);
}

static void svg_and_ascii_show_every_compute_action(void)
{
    pp_schedule *s = build(PP_INTERLEAVED_1F1B, 2, 2, 4, 0);
    pp_error err;
    char *text = NULL;
    size_t len = 0;
    FILE *mem;
    int boxes = 0;
    const char *p;
    if (!s) return;
    PP_CHECK_OK(pp_schedule_lower(s, &err), &err);
    mem = open_memstream(&text, &len);
    PP_CHECK_OK(pp_schedule_write_svg(s, NULL, mem, &err), &err);
    fclose(mem);
    for (p = text; (p = strstr(p, "<title>rank")) != NULL; p++) boxes++;
    PP_CHECK_INT(boxes, 2 * 2 * 2 * 4);   /* ranks x chunks x (F, B) x microbatches */
    PP_CHECK_CONTAINS(text, "</svg>");
    free(text);
    text = NULL;
    mem = open_memstream(&text, &len);
    PP_CHECK_OK(pp_schedule_draw_ascii(s, NULL, mem, &err), &err);
    fclose(mem);
    PP_CHECK_CONTAINS(text, "rank 0 ");
    PP_CHECK_CONTAINS(text, "chunk");
    PP_CHECK_CONTAINS(text, "bubble per rank:");
    free(text);
    pp_schedule_free(s);
}

/* --- the n-th group with a peer meets the peer's n-th group (what the NCCL arrival gate counts) */

/* A transfer as both ends name it: direction, the sending stage, microbatch. */
static long long gp_key(pp_action a)
{
    int dir = (a.op == PP_OP_SEND_F || a.op == PP_OP_RECV_F) ? 0 : 1;
    int from = a.op == PP_OP_SEND_F || a.op == PP_OP_SEND_B ? a.stage : a.op == PP_OP_RECV_F ? a.stage - 1 : a.stage + 1;
    int send = a.op == PP_OP_SEND_F || a.op == PP_OP_SEND_B;
    return (((long long)dir * 4096 + from) * 65536 + a.mb) * 2 + send;
}

static int gp_peer(const pp_schedule *s, pp_action a)
{
    return pp_stage_rank(s, (a.op == PP_OP_SEND_F || a.op == PP_OP_RECV_B) ? a.stage + 1 : a.stage - 1);
}

static int gp_cmp(const void *x, const void *y)
{
    long long a = *(const long long *)x, b = *(const long long *)y;
    return a < b ? -1 : a > b;
}

/* Keys of rank r's k-th group that talks to peer p (sends flipped to the receiver's view), sorted;
 * returns how many, or -1 when r has no k-th group with p. */
static int gp_group(const pp_schedule *s, int r, int p, int k, long long *keys, int cap, int flip)
{
    int i = 0, seen = 0;
    while (i < s->length[r]) {
        int j = pp_schedule_group_end(s, r, i), n = 0, q;
        if (s->actions[r][i].op >= PP_OP_SEND_F) {
            for (q = i; q < j; q++)
                if (gp_peer(s, s->actions[r][q]) == p && n < cap) keys[n++] = gp_key(s->actions[r][q]) ^ flip;
            if (n > 0 && seen++ == k) { qsort(keys, (size_t)n, sizeof *keys, gp_cmp); return n; }
        }
        i = j;
    }
    return -1;
}

static void every_kinds_nth_group_with_a_peer_meets_the_peers_nth_group(void)
{
    static const struct { pp_schedule_kind kind; int vpp; } kinds[] = {
        { PP_GPIPE, 1 }, { PP_1F1B, 1 }, { PP_INTERLEAVED_1F1B, 2 }, { PP_INTERLEAVED_1F1B, 3 }, { PP_LOOPED_BFS, 2 },
        { PP_ZB_H1, 1 }, { PP_ZB_H2, 1 }, { PP_ZBV, 2 }, { PP_DUALPIPEV, 2 }, { PP_INTERLEAVED_ZB, 2 }, { PP_DUALPIPE, 2 },
    };
    static const int mbs[] = { 2, 3, 8, 13 };
    long long a[64], b[64];
    size_t k;
    int pp, m, checked = 0;
    for (k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        for (pp = 2; pp <= 8; pp++)
            for (m = 0; m < 4; m++) {
                pp_schedule_config c;
                pp_schedule *s = NULL;
                pp_error err;
                int r, p, n;
                memset(&c, 0, sizeof c);
                c.kind = kinds[k].kind; c.pp = pp; c.vpp = kinds[k].vpp; c.mb = mbs[m];
                if (c.kind == PP_DUALPIPE && (pp % 2 || c.mb % 2)) continue;
                if (pp_schedule_build(&c, &s, &err) != PP_OK) continue;   /* configs a kind refuses */
                if (pp_schedule_lower(s, &err) != PP_OK) {
                    PP_CHECK_MSG(0, "%s pp=%d mb=%d: lower: %s", pp_schedule_kind_name(c.kind), pp, c.mb, err.message);
                    pp_schedule_free(s);
                    continue;
                }
                for (r = 0; r < pp; r++)
                    for (p = 0; p < pp; p++) {
                        if (p == r) continue;
                        for (n = 0;; n++) {
                            int na = gp_group(s, r, p, n, a, 64, 1), nb = gp_group(s, p, r, n, b, 64, 0), i, same = na == nb;
                            for (i = 0; same && i < na; i++) same = a[i] == b[i];
                            if (!same) {
                                PP_CHECK_MSG(0, "%s pp=%d mb=%d: group %d of rank %d with rank %d does not meet group %d "
                                             "of rank %d with rank %d", pp_schedule_kind_name(c.kind), pp, c.mb, n, r, p, n, p, r);
                                break;
                            }
                            if (na < 0) break;
                            checked++;
                        }
                    }
                pp_schedule_free(s);
            }
    PP_CHECK_MSG(checked > 10000, "group pairs checked: %d", checked);
}

const pp_test_case pp_suite_schedule[] = {
    PP_TEST(every_kinds_nth_group_with_a_peer_meets_the_peers_nth_group),
    PP_TEST(looped_placement_puts_stage_s_on_rank_s_mod_pp),
    PP_TEST(v_placement_puts_stages_r_and_2pp_minus_1_minus_r_on_rank_r),
    PP_TEST(gpipe_runs_all_forwards_then_all_backwards),
    PP_TEST(one_f_one_b_warmup_is_pp_minus_rank_minus_1),
    PP_TEST(interleaved_follows_megatron_group_table_and_warmup),
    PP_TEST(interleaved_with_one_chunk_is_1f1b),
    PP_TEST(interleaved_last_partial_group_that_would_deadlock_gets_extra_warmup),
    PP_TEST(interleaved_runs_for_every_group_and_mb),
    PP_TEST(orders_equal_pytorch_reference),
    PP_TEST(every_generator_validates_for_pp_1_to_8_vpp_1_to_4_mb_1_to_32),
    PP_TEST(simulated_bubbles_equal_the_textbook_formulas),
    PP_TEST(the_bound_is_never_above_the_step_and_meets_it_for_gpipe_1f1b_and_zb_h1),
    PP_TEST(a_stage_tail_runs_after_its_last_backward_and_beside_the_send),
    PP_TEST(peak_live_activations_of_1f1b_are_pp_minus_rank),
    PP_TEST(communication_cost_delays_the_step_by_the_transfers_on_the_critical_path),
    PP_TEST(grouped_transfers_wait_for_the_group_before_them_on_the_stream),
    PP_TEST(grouped_transfers_change_nothing_when_free_and_never_shorten_the_step),
    PP_TEST(peer_groups_time_between_one_by_one_and_round_groups),
    PP_TEST(lowering_pairs_every_cross_rank_tensor_with_one_send_and_one_receive),
    PP_TEST(same_rank_neighbours_in_v_placement_pass_without_communication),
    PP_TEST(compute_order_that_cannot_run_is_reported_as_deadlock),
    PP_TEST(validator_accepts_a_hand_lowered_1f1b),
    PP_TEST(validator_names_a_missing_receive),
    PP_TEST(validator_names_a_receive_placed_after_its_use),
    PP_TEST(validator_names_a_backward_before_its_forward),
    PP_TEST(validator_finds_the_deadlock_of_crossed_sends),
    PP_TEST(validator_names_duplicate_and_missing_compute),
    PP_TEST(validator_rejects_split_backward_without_its_w),
    PP_TEST(bad_configs_are_rejected_with_the_parameter_named),
    PP_TEST(actions_format_and_parse_in_pytorch_spelling),
    PP_TEST(csv_round_trip_keeps_every_action),
    PP_TEST(csv_reader_takes_compute_only_orders_and_rejects_bad_ones),
    PP_TEST(csv_reader_survives_random_bytes),
    PP_TEST(svg_and_ascii_show_every_compute_action),
    { 0, 0 }
};
