/* test_routes.c — transfers of their own cost in the simulator (pp_sim_costs.transfer_cost) and
 * the two routes a transport may offer (pp_schedule_routes): which transfers the step waits for. */
#include <stdlib.h>
#include "pp_test.h"

static const pp_schedule_kind kinds[] = { PP_GPIPE, PP_1F1B, PP_INTERLEAVED_1F1B, PP_LOOPED_BFS, PP_ZB_H1,
                                          PP_ZB_H2, PP_ZBV, PP_DUALPIPEV, PP_INTERLEAVED_ZB, PP_DUALPIPE };

static int kind_vpp(pp_schedule_kind kind)
{
    return kind == PP_ZBV || kind == PP_DUALPIPEV || kind == PP_DUALPIPE || kind == PP_INTERLEAVED_1F1B ||
           kind == PP_LOOPED_BFS || kind == PP_INTERLEAVED_ZB ? 2 : 1;
}

/* A lowered schedule of the kind, or NULL where the kind does not take this shape. */
static pp_schedule *lowered(pp_schedule_kind kind, int pp, int vpp, int mb)
{
    pp_schedule_config cfg;
    pp_schedule *s = NULL;
    pp_error err;
    memset(&cfg, 0, sizeof cfg);
    cfg.kind = kind; cfg.pp = pp; cfg.vpp = vpp; cfg.mb = mb;
    if (pp_schedule_build(&cfg, &s, &err) != PP_OK) return NULL;
    if (pp_schedule_lower(s, &err) != PP_OK) {
        pp_test_fail(__FILE__, __LINE__, "lower %s pp %d mb %d: %s", pp_schedule_kind_name(kind), pp, mb, err.message);
        pp_schedule_free(s);
        return NULL;
    }
    return s;
}

static int is_send(int op) { return op == PP_OP_SEND_F || op == PP_OP_SEND_B; }
static int is_recv(int op) { return op == PP_OP_RECV_F || op == PP_OP_RECV_B; }

/* [pp][length] with every send at `value` (receives 0), freed by free_rows. */
static double **rows(const pp_schedule *s, double value)
{
    double **t = (double **)calloc((size_t)s->pp, sizeof *t);
    int r, i;
    for (r = 0; t && r < s->pp; r++) {
        t[r] = (double *)calloc((size_t)s->length[r] + 1, sizeof(double));
        if (!t[r]) continue;
        for (i = 0; i < s->length[r]; i++) t[r][i] = is_send(s->actions[r][i].op) ? value : 0;
    }
    return t;
}

static void free_rows(double **t, int pp)
{
    int r;
    for (r = 0; t && r < pp; r++) free(t[r]);
    free(t);
}

/* Every send given the uniform time (bytes / bandwidth) times every action exactly as the uniform
 * costs do: each kind, pp 2..4, transfers one by one, grouped and a group per peer. (A group's
 * uniform latency counts once, where transfer_cost counts each transfer's.) */
static void transfer_cost_of_the_uniform_time_changes_nothing(void)
{
    int k, pp, g;
    for (k = 0; k < (int)(sizeof kinds / sizeof kinds[0]); k++)
        for (pp = 2; pp <= 4; pp++)
            for (g = 0; g <= 2; g++) {
                pp_schedule *s = lowered(kinds[k], pp, kind_vpp(kinds[k]), 2 * pp);
                pp_sim_result *a = NULL, *b = NULL;
                pp_sim_costs c;
                pp_error err;
                double **t;
                int r, i;
                if (!s) continue;
                memset(&c, 0, sizeof c);
                c.f = 1; c.i = 1.1; c.w = 0.9; c.p2p_seconds_per_byte = 1e-3; c.activation_bytes = 250;
                c.grouped = g;
                t = rows(s, 1e-3 * 250);
                PP_CHECK_OK(pp_simulate(s, &c, &a, &err), &err);
                c.transfer_cost = (const double *const *)t;
                PP_CHECK_OK(pp_simulate(s, &c, &b, &err), &err);
                if (a && b) {
                    PP_CHECK_MSG(fabs(a->makespan - b->makespan) < 1e-9, "%s pp %d grouped %d: %.12g against %.12g",
                                 pp_schedule_kind_name(kinds[k]), pp, g, b->makespan, a->makespan);
                    for (r = 0; r < pp; r++)
                        for (i = 0; i < s->length[r]; i++)
                            PP_CHECK_MSG(fabs(a->end[r][i] - b->end[r][i]) < 1e-9, "%s pp %d grouped %d: rank %d "
                                         "action %d ends at %.12g, not %.12g", pp_schedule_kind_name(kinds[k]), pp, g,
                                         r, i, b->end[r][i], a->end[r][i]);
                    PP_CHECK_NEAR(b->bound, a->bound, 1e-9);
                }
                pp_sim_result_free(a); pp_sim_result_free(b);
                free_rows(t, pp);
                pp_schedule_free(s);
            }
}

/* GPipe on 2 ranks, one microbatch, F = 1 and B = 2 a stage: F0, its output over (3), F1, B1, the
 * gradient back (0.5), B0: 1 + 3 + 1 + 2 + 0.5 + 2 = 9.5, whether transfers go one by one, in a
 * round's group or a group per peer. The bound takes the quicker transfer at every hop. */
static void each_transfer_takes_its_own_time(void)
{
    pp_schedule *s = lowered(PP_GPIPE, 2, 1, 1);
    int g, r, i;
    if (!s) return;
    for (g = 0; g <= 2; g++) {
        pp_sim_costs c;
        pp_sim_result *res = NULL;
        pp_error err;
        double **t = rows(s, 0);
        for (r = 0; r < 2; r++)
            for (i = 0; i < s->length[r]; i++) {
                if (s->actions[r][i].op == PP_OP_SEND_F) t[r][i] = 3;
                if (s->actions[r][i].op == PP_OP_SEND_B) t[r][i] = 0.5;
                if (is_recv(s->actions[r][i].op)) t[r][i] = 100;   /* a receive's entry is not read */
            }
        memset(&c, 0, sizeof c);
        c.f = 1; c.b = 2; c.p2p_latency = 7; c.grouped = g; c.transfer_cost = (const double *const *)t;
        PP_CHECK_OK(pp_simulate(s, &c, &res, &err), &err);
        if (res) {
            PP_CHECK_NEAR(res->makespan, 9.5, 1e-12);
            PP_CHECK_NEAR(res->bound, 1 + 0.5 + 1 + 2 + 0.5 + 2, 1e-12);
        }
        pp_sim_result_free(res);
        free_rows(t, 2);
    }
    pp_schedule_free(s);
}

/* Bad transfer times are refused naming the entry; a schedule that is not lowered, and the
 * builders of new schedules (greedy scheduler, search, plan), refuse transfer_cost. */
static void transfer_cost_is_checked(void)
{
    pp_schedule *s = lowered(PP_1F1B, 2, 1, 2), *raw = NULL;
    pp_schedule_config cfg;
    pp_sim_costs c;
    pp_sim_result *res = NULL;
    pp_search_config sc;
    pp_search_result *sr = NULL;
    pp_plan_config pc;
    pp_plan *plan = NULL;
    pp_error err;
    double **t;
    int i, at = -1;
    char want[64];
    if (!s) return;
    t = rows(s, 1);
    for (i = 0; i < s->length[1] && at < 0; i++) if (is_send(s->actions[1][i].op)) at = i;
    memset(&c, 0, sizeof c);
    c.transfer_cost = (const double *const *)t;
    t[1][at] = -1;
    snprintf(want, sizeof want, "transfer_cost[1][%d]=-1: must be a finite number", at);
    PP_CHECK_FAILS(pp_simulate(s, &c, &res, &err), &err, PP_EINVAL, want);
    t[1][at] = NAN;
    PP_CHECK_FAILS(pp_simulate(s, &c, &res, &err), &err, PP_EINVAL, "must be a finite number >= 0");
    t[1][at] = 1;
    {
        double *keep = t[0];
        t[0] = NULL;
        PP_CHECK_FAILS(pp_simulate(s, &c, &res, &err), &err, PP_EINVAL, "transfer_cost[0]=NULL");
        t[0] = keep;
    }
    memset(&cfg, 0, sizeof cfg);
    cfg.kind = PP_1F1B; cfg.pp = 2; cfg.mb = 2;
    PP_CHECK_OK(pp_schedule_build(&cfg, &raw, &err), &err);
    if (raw) PP_CHECK_FAILS(pp_simulate(raw, &c, &res, &err), &err, PP_EINVAL, "needs a lowered schedule");
    memset(&sc, 0, sizeof sc);
    sc.pp = 2; sc.mb = 4; sc.costs.transfer_cost = (const double *const *)t;
    PP_CHECK_FAILS(pp_search(&sc, &sr, &err), &err, PP_EINVAL, "transfer_cost");
    memset(&pc, 0, sizeof pc);
    pc.pp = 2; pc.mb = 4; pc.kind = PP_1F1B; pc.costs.transfer_cost = (const double *const *)t;
    PP_CHECK_FAILS(pp_plan_build(&pc, &plan, &err), &err, PP_EINVAL, "transfer_cost");
    pp_search_result_free(sr);
    pp_plan_free(plan);
    pp_schedule_free(raw);
    free_rows(t, 2);
    pp_schedule_free(s);
}

/* A routes result against its schedule: both ends of every transfer marked alike, the count
 * right, the three steps ordered, the marks' own simulation the routed step, and no transfer left
 * on the slow route that would shorten the step on its own: one that every critical path holds
 * is on the one the routes followed. */
static void check_routes(const pp_schedule *s, const pp_sim_costs *costs, double fast, double slow,
                         const pp_routes *R, const char *what)
{
    size_t plane = (size_t)s->num_stages * (size_t)s->mb;
    int *send_mark = (int *)malloc(2 * plane * sizeof(int)), r, i, sends = 0, marked = 0;
    double **t = rows(s, slow);
    pp_sim_costs c = *costs;
    pp_sim_result *res = NULL;
    pp_error err;
    if (!send_mark || !t) { free(send_mark); free_rows(t, s->pp); return; }
    for (i = 0; i < (int)(2 * plane); i++) send_mark[i] = -1;
    PP_CHECK_INT(R->pp, s->pp);
    for (r = 0; r < s->pp; r++) {
        PP_CHECK_INT(R->length[r], s->length[r]);
        for (i = 0; i < s->length[r]; i++) {
            pp_action a = s->actions[r][i];
            if (!is_send(a.op) && !is_recv(a.op)) PP_CHECK_MSG(!R->fast[r][i], "%s: compute at rank %d %d marked", what, r, i);
            if (!is_send(a.op)) continue;
            sends++;
            marked += R->fast[r][i];
            if (R->fast[r][i]) t[r][i] = fast;
            send_mark[a.op == PP_OP_SEND_F ? a.stage * s->mb + a.mb : (int)plane + a.stage * s->mb + a.mb] = R->fast[r][i];
        }
    }
    for (r = 0; r < s->pp; r++)
        for (i = 0; i < s->length[r]; i++) {
            pp_action a = s->actions[r][i];
            int key;
            if (!is_recv(a.op)) continue;
            key = a.op == PP_OP_RECV_F ? (a.stage - 1) * s->mb + a.mb : (int)plane + (a.stage + 1) * s->mb + a.mb;
            PP_CHECK_MSG(send_mark[key] == R->fast[r][i], "%s: rank %d receive %d marked %d, its send %d", what, r, i,
                         R->fast[r][i], send_mark[key]);
        }
    PP_CHECK_INT(R->transfers, sends);
    PP_CHECK_INT(R->fast_transfers, marked);
    PP_CHECK_MSG(R->step_fast <= R->step_routed + 1e-9 && R->step_routed <= R->step_slow + 1e-9,
                 "%s: fast %.9g, routed %.9g, slow %.9g", what, R->step_fast, R->step_routed, R->step_slow);
    c.transfer_cost = (const double *const *)t;
    PP_CHECK_OK(pp_simulate(s, &c, &res, &err), &err);
    if (res) {
        PP_CHECK_NEAR(res->makespan, R->step_routed, 1e-9);
        for (r = 0; r < s->pp; r++)   /* the end point: no one slow transfer, made fast, shortens the step */
            for (i = 0; i < s->length[r]; i++) {
                pp_sim_result *one = NULL;
                if (!is_send(s->actions[r][i].op) || R->fast[r][i]) continue;
                t[r][i] = fast;
                PP_CHECK_OK(pp_simulate(s, &c, &one, &err), &err);
                if (one)
                    PP_CHECK_MSG(one->makespan >= R->step_routed - 1e-9 * (R->step_routed + 1), "%s: rank %d's "
                                 "send %d on the fast route too: %.9g, under the routed %.9g", what, r, i,
                                 one->makespan, R->step_routed);
                pp_sim_result_free(one);
                t[r][i] = slow;
            }
    }
    pp_sim_result_free(res);
    free_rows(t, s->pp);
    free(send_mark);
}

/* GPipe on 2 ranks, one microbatch: the step is one chain, each transfer in it, so both take the
 * fast route and the routed step is the fast one: 1 + 0.5 + 1 + 2 + 0.5 + 2. */
static void a_chain_takes_the_fast_route_everywhere(void)
{
    pp_schedule *s = lowered(PP_GPIPE, 2, 1, 1);
    pp_routes *R = NULL;
    pp_sim_costs c;
    pp_error err;
    if (!s) return;
    memset(&c, 0, sizeof c);
    c.f = 1; c.b = 2;
    PP_CHECK_OK(pp_schedule_routes(s, &c, 0.5, 3, &R, &err), &err);
    if (R) {
        PP_CHECK_INT(R->transfers, 2);
        PP_CHECK_INT(R->fast_transfers, 2);
        PP_CHECK_NEAR(R->step_slow, 1 + 3 + 1 + 2 + 3 + 2, 1e-12);
        PP_CHECK_NEAR(R->step_routed, 7, 1e-12);
        PP_CHECK_NEAR(R->step_fast, 7, 1e-12);
        check_routes(s, &c, 0.5, 3, R, "gpipe pp 2 mb 1");
    }
    pp_routes_free(R);
    pp_schedule_free(s);
}

/* Every kind, pp 2..4, two microbatch counts, transfers one by one, grouped and a group per
 * peer: the routes hold check_routes' rules, and the same call gives the same routes. */
static void routes_hold_their_rules_on_every_kind(void)
{
    int k, pp, m, g;
    for (k = 0; k < (int)(sizeof kinds / sizeof kinds[0]); k++)
        for (pp = 2; pp <= 4; pp++)
            for (m = 1; m <= 2; m++)
                for (g = 0; g <= 2; g++) {
                    pp_schedule *s = lowered(kinds[k], pp, kind_vpp(kinds[k]), 2 * m * pp);
                    pp_routes *R = NULL, *again = NULL;
                    pp_sim_costs c;
                    pp_error err;
                    char what[96];
                    int r;
                    if (!s) continue;
                    snprintf(what, sizeof what, "%s pp %d mb %d grouped %d", pp_schedule_kind_name(kinds[k]), pp,
                             2 * m * pp, g);
                    memset(&c, 0, sizeof c);
                    c.f = 1; c.i = 1.1; c.w = 0.9; c.grouped = g;
                    PP_CHECK_OK(pp_schedule_routes(s, &c, 0.05, 0.4, &R, &err), &err);
                    PP_CHECK_OK(pp_schedule_routes(s, &c, 0.05, 0.4, &again, &err), &err);
                    if (R) check_routes(s, &c, 0.05, 0.4, R, what);
                    if (R && again) {
                        PP_CHECK_INT(again->fast_transfers, R->fast_transfers);
                        for (r = 0; r < pp; r++)
                            PP_CHECK_MSG(!memcmp(again->fast[r], R->fast[r], (size_t)s->length[r]), "%s: rank %d's "
                                         "routes differ between two calls", what, r);
                    }
                    pp_routes_free(R); pp_routes_free(again);
                    pp_schedule_free(s);
                }
}

/* ZB-V on 4 ranks with 16 microbatches, a transfer 0.03 of a chunk's forward on the fast route and
 * 0.2 on the slow (a 64 MiB tensor over NVLink and staged through host memory, beside a chunk of
 * two blocks of hidden 4096): the start-up and drain wait for their transfers, the steady state
 * does not. Most transfers go the slow route, yet the step stays within 0.5% of the fast route's,
 * where all on the slow route lose more. */
static void zbv_keeps_most_transfers_on_the_slow_route(void)
{
    pp_schedule *s = lowered(PP_ZBV, 4, 2, 16);
    pp_routes *R = NULL;
    pp_sim_costs c;
    pp_error err;
    if (!s) return;
    memset(&c, 0, sizeof c);
    c.f = 2; c.i = 2.2; c.w = 2; c.grouped = 2;   /* a chunk: F 1, I 1.1, W 1 */
    PP_CHECK_OK(pp_schedule_routes(s, &c, 0.03, 0.2, &R, &err), &err);
    if (R) {
        check_routes(s, &c, 0.03, 0.2, R, "zbv pp 4 mb 16");
        PP_CHECK_MSG(2 * R->fast_transfers < R->transfers, "%d of %d transfers on the fast route", R->fast_transfers,
                     R->transfers);
        PP_CHECK_MSG(R->step_routed < 1.005 * R->step_fast, "routed %.4g against all fast %.4g", R->step_routed,
                     R->step_fast);
        PP_CHECK_MSG(R->step_slow > 1.005 * R->step_fast, "all slow %.4g against all fast %.4g", R->step_slow,
                     R->step_fast);
    }
    pp_routes_free(R);
    pp_schedule_free(s);
}

/* Bad arguments are refused naming the parameter and the rule. */
static void routes_refuse_bad_arguments(void)
{
    pp_schedule *s = lowered(PP_1F1B, 2, 1, 2), *raw = NULL;
    pp_schedule_config cfg;
    pp_routes *R = NULL;
    pp_sim_costs c;
    pp_error err;
    double **t;
    if (!s) return;
    memset(&c, 0, sizeof c);
    PP_CHECK_FAILS(pp_schedule_routes(NULL, &c, 0, 1, &R, &err), &err, PP_EINVAL, "must not be NULL");
    PP_CHECK_FAILS(pp_schedule_routes(s, NULL, 0, 1, &R, &err), &err, PP_EINVAL, "must not be NULL");
    PP_CHECK_FAILS(pp_schedule_routes(s, &c, 2, 1, &R, &err), &err, PP_EINVAL, "fast_s=2, slow_s=1: must be finite");
    PP_CHECK_FAILS(pp_schedule_routes(s, &c, -1, 1, &R, &err), &err, PP_EINVAL, "0 <= fast_s <= slow_s");
    PP_CHECK_FAILS(pp_schedule_routes(s, &c, 0, INFINITY, &R, &err), &err, PP_EINVAL, "must be finite");
    PP_CHECK_FAILS(pp_schedule_routes(s, &c, NAN, 1, &R, &err), &err, PP_EINVAL, "must be finite");
    t = rows(s, 1);
    c.transfer_cost = (const double *const *)t;
    PP_CHECK_FAILS(pp_schedule_routes(s, &c, 0, 1, &R, &err), &err, PP_EINVAL, "transfer_cost: must be NULL");
    c.transfer_cost = NULL;
    memset(&cfg, 0, sizeof cfg);
    cfg.kind = PP_1F1B; cfg.pp = 2; cfg.mb = 2;
    PP_CHECK_OK(pp_schedule_build(&cfg, &raw, &err), &err);
    if (raw) PP_CHECK_FAILS(pp_schedule_routes(raw, &c, 0, 1, &R, &err), &err, PP_EINVAL, "not lowered");
    PP_CHECK(R == NULL);
    free_rows(t, 2);
    pp_schedule_free(raw);
    pp_schedule_free(s);
}

const pp_test_case pp_suite_routes[] = {
    PP_TEST(transfer_cost_of_the_uniform_time_changes_nothing),
    PP_TEST(each_transfer_takes_its_own_time),
    PP_TEST(transfer_cost_is_checked),
    PP_TEST(a_chain_takes_the_fast_route_everywhere),
    PP_TEST(routes_hold_their_rules_on_every_kind),
    PP_TEST(zbv_keeps_most_transfers_on_the_slow_route),
    PP_TEST(routes_refuse_bad_arguments),
    {0}
};
