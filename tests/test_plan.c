/* test_plan.c — pp_plan_build: a trainer's schedule options made into a proven schedule, its layer
 * split and the stages' costs, and every combination it refuses, with the field and the rule.
 *
 * The numbers are worked by hand from the rules in the >>plan notes: a stage costs the sum of its
 * layers (F = 1, B = 2F, I = W = B/2 per layer unless given, one unit of memory a layer); an even
 * split gives every model stage layers / stages; DualPipe's stages pp..2pp-1 run model stages
 * 0..pp-1 again. The searched cases are the ones `pipepar search` and tests/zb_cli.sh pin down. */
#include <stdlib.h>
#include "pp_test.h"

static pp_plan_config pl_kind(pp_schedule_kind kind, int pp, int vpp, int mb)
{
    pp_plan_config c;
    memset(&c, 0, sizeof c);
    c.kind = kind; c.pp = pp; c.vpp = vpp; c.mb = mb;
    return c;
}

/* The CSV of a built, lowered schedule, in memory (the caller frees it). */
static char *pl_csv(pp_schedule_kind kind, int pp, int vpp, int mb, size_t *len)
{
    pp_schedule_config sc;
    pp_schedule *s = NULL;
    pp_error err;
    char *buf = NULL;
    FILE *f;
    memset(&sc, 0, sizeof sc);
    sc.kind = kind; sc.pp = pp; sc.vpp = vpp; sc.mb = mb;
    *len = 0;
    PP_CHECK_OK(pp_schedule_build(&sc, &s, &err), &err);
    if (!s) return NULL;
    PP_CHECK_OK(pp_schedule_lower(s, &err), &err);
    if ((f = open_memstream(&buf, len)) != NULL) {
        PP_CHECK_OK(pp_schedule_write_csv(s, f, &err), &err);
        fclose(f);
    }
    pp_schedule_free(s);
    return buf;
}

static void pl_check_ints(const int *got, const int *want, int n, const char *what)
{
    int k;
    for (k = 0; k < n; k++)
        PP_CHECK_MSG(got[k] == want[k], "%s[%d] == %d, expected %d", what, k, got[k], want[k]);
}

static void pl_check_doubles(const double *got, const double *want, int n, const char *what)
{
    int k;
    PP_CHECK_MSG(got != NULL, "%s: no per-stage array", what);
    for (k = 0; got && k < n; k++)
        PP_CHECK_MSG(fabs(got[k] - want[k]) < 1e-12, "%s[%d] == %g, expected %g", what, k, got[k], want[k]);
}

/* A kind alone: built, lowered, proven; one layer a model stage; the costs left as given. */
static void a_kind_is_built_lowered_and_proven_with_a_layer_a_stage(void)
{
    pp_plan_config c = pl_kind(PP_1F1B, 4, 0, 8);
    pp_plan *p = NULL;
    pp_error err;
    const int ones[4] = { 1, 1, 1, 1 }, firsts[4] = { 0, 1, 2, 3 };
    c.costs.f = 3;
    PP_CHECK_OK(pp_plan_build(&c, &p, &err), &err);
    if (!p) return;
    PP_CHECK_STR(p->name, "1f1b");
    PP_CHECK_INT(p->schedule->lowered, 1);
    PP_CHECK_OK(pp_schedule_validate(p->schedule, &err), &err);
    PP_CHECK_INT(p->layers->num_stages, 4);
    pl_check_ints(p->layers->count, ones, 4, "count");
    pl_check_ints(p->layers->first, firsts, 4, "first");
    PP_CHECK(p->costs.f_stage == NULL);      /* no layers given: as pp_simulate takes them */
    PP_CHECK_NEAR(p->costs.f, 3, 0);
    PP_CHECK(p->search == NULL);
    pp_plan_free(p);
}

/* 8 layers over interleaved pp 2 vpp 2: 4 model stages of 2 layers; per layer F = 1, so every
 * stage F = 2, B = 4, I = W = 2, memory 2. The group is in the name. */
static void layers_are_split_evenly_and_each_stage_costs_its_layers(void)
{
    pp_plan_config c = pl_kind(PP_INTERLEAVED_1F1B, 2, 2, 4);
    pp_plan *p = NULL;
    pp_error err;
    const int twos[4] = { 2, 2, 2, 2 }, firsts[4] = { 0, 2, 4, 6 };
    const double f[4] = { 2, 2, 2, 2 }, b[4] = { 4, 4, 4, 4 };
    c.layers = 8; c.group = 4;
    PP_CHECK_OK(pp_plan_build(&c, &p, &err), &err);
    if (!p) return;
    PP_CHECK_STR(p->name, "interleaved group=4");
    pl_check_ints(p->layers->count, twos, 4, "count");
    pl_check_ints(p->layers->first, firsts, 4, "first");
    pl_check_doubles(p->costs.f_stage, f, 4, "f_stage");
    pl_check_doubles(p->costs.b_stage, b, 4, "b_stage");
    pl_check_doubles(p->costs.i_stage, f, 4, "i_stage");
    pl_check_doubles(p->costs.w_stage, f, 4, "w_stage");
    pl_check_doubles(p->costs.memory_stage, f, 4, "memory_stage");
    pp_plan_free(p);
}

/* A layout sets vpp (4 stages on pp 2: 2) and the stages' sizes 1,3,1,3; per layer F = 1, I = 1,
 * W = 0.5 (B = I + W = 1.5), so F = 1,3,1,3, I the same, W = 0.5,1.5,0.5,1.5, B = 1.5,4.5,1.5,4.5. */
static void a_layout_sets_vpp_and_the_stages_costs(void)
{
    pp_plan_config c = pl_kind(PP_ZBV, 2, 0, 8);
    pp_plan *p = NULL;
    pp_error err;
    const int counts[4] = { 1, 3, 1, 3 };
    const double f[4] = { 1, 3, 1, 3 }, w[4] = { 0.5, 1.5, 0.5, 1.5 }, b[4] = { 1.5, 4.5, 1.5, 4.5 };
    c.layout = "Et*1|t*3|t*1|t*3L";
    c.costs.f = 1; c.costs.i = 1; c.costs.w = 0.5;
    PP_CHECK_OK(pp_plan_build(&c, &p, &err), &err);
    if (!p) return;
    PP_CHECK_INT(p->schedule->vpp, 2);
    PP_CHECK_INT(p->layers->num_layers, 8);
    pl_check_ints(p->layers->count, counts, 4, "count");
    pl_check_doubles(p->costs.f_stage, f, 4, "f_stage");
    pl_check_doubles(p->costs.i_stage, f, 4, "i_stage");
    pl_check_doubles(p->costs.w_stage, w, 4, "w_stage");
    pl_check_doubles(p->costs.b_stage, b, 4, "b_stage");
    pl_check_doubles(p->costs.memory_stage, f, 4, "memory_stage");
    pp_plan_free(p);
}

/* DualPipe on pp 2 with 4 layers: the model has 2 stages of 2 layers; the schedule's 4 stages
 * run model stages 0, 1, 0, 1, and each costs its model stage's layers (F = 2). */
static void dualpipe_splits_the_layers_over_pp_model_stages_run_twice(void)
{
    pp_plan_config c = pl_kind(PP_DUALPIPE, 2, 0, 4);
    pp_plan *p = NULL;
    pp_error err;
    const int counts[2] = { 2, 2 };
    const double f[4] = { 2, 2, 2, 2 };
    c.layers = 4;
    PP_CHECK_OK(pp_plan_build(&c, &p, &err), &err);
    if (!p) return;
    PP_CHECK_INT(p->layers->num_stages, 2);
    pl_check_ints(p->layers->count, counts, 2, "count");
    PP_CHECK_INT(p->schedule->num_stages, 4);
    PP_CHECK_INT(pp_stage_model_stage(p->schedule, 3), 1);
    pl_check_doubles(p->costs.f_stage, f, 4, "f_stage");
    pp_plan_free(p);
}

/* Each B of 1F1B (pp 3, mb 6: 3 stages x 6 microbatches = 18) becomes an I and a W, and the name
 * says so; ZB-V has no B, so nothing changes and the name stays. Each FB of DualPipeV splits. */
static void the_splits_change_what_they_say_and_the_name_says_what_changed(void)
{
    pp_plan_config c = pl_kind(PP_1F1B, 3, 0, 6);
    pp_plan *p = NULL;
    pp_error err;
    c.split_backward = 1;
    PP_CHECK_OK(pp_plan_build(&c, &p, &err), &err);
    if (p) {
        PP_CHECK_STR(p->name, "1f1b, B as I then W");
        PP_CHECK_INT(pp_test_count_op(p->schedule, PP_OP_B), 0);
        PP_CHECK_INT(pp_test_count_op(p->schedule, PP_OP_I), 18);
        PP_CHECK_INT(pp_test_count_op(p->schedule, PP_OP_W), 18);
    }
    pp_plan_free(p);
    c = pl_kind(PP_ZBV, 2, 0, 8);
    c.split_backward = 1;
    PP_CHECK_OK(pp_plan_build(&c, &p, &err), &err);
    if (p) PP_CHECK_STR(p->name, "zbv");
    pp_plan_free(p);
    c = pl_kind(PP_DUALPIPEV, 2, 0, 8);
    c.split_overlaps = 1;
    PP_CHECK_OK(pp_plan_build(&c, &p, &err), &err);
    if (p) {
        PP_CHECK_STR(p->name, "dualpipev, each FB as F then B");
        PP_CHECK_INT(pp_test_count_op(p->schedule, PP_OP_FB), 0);
    }
    pp_plan_free(p);
}

/* A CSV's pp, vpp and mb are the file's (0 takes them); its compute order is the built one's; its
 * B's split when asked; given, they must agree. */
static void a_csv_gives_its_shape_and_order_and_must_agree_with_what_is_given(void)
{
    size_t len = 0;
    char *text = pl_csv(PP_INTERLEAVED_1F1B, 3, 2, 6, &len);
    pp_plan_config c;
    pp_plan *p = NULL;
    pp_schedule_config sc;
    pp_schedule *built = NULL;
    pp_error err;
    int r;
    if (!text) return;
    memset(&c, 0, sizeof c);
    c.csv = text; c.csv_len = len; c.csv_name = "inter.csv"; c.split_backward = 1;
    PP_CHECK_OK(pp_plan_build(&c, &p, &err), &err);
    memset(&sc, 0, sizeof sc);
    sc.kind = PP_INTERLEAVED_1F1B; sc.pp = 3; sc.vpp = 2; sc.mb = 6;
    PP_CHECK_OK(pp_schedule_build(&sc, &built, &err), &err);
    PP_CHECK_OK(pp_schedule_split_backward(built, &err), &err);
    if (p && built) {
        PP_CHECK_STR(p->name, "from inter.csv, B as I then W");
        PP_CHECK_INT(p->schedule->pp, 3); PP_CHECK_INT(p->schedule->vpp, 2); PP_CHECK_INT(p->schedule->mb, 6);
        for (r = 0; r < 3; r++) {
            char a[4096], b[4096];
            pp_test_compute_order(p->schedule, r, a, sizeof a);
            pp_test_compute_order(built, r, b, sizeof b);
            PP_CHECK_STR(a, b);
        }
    }
    pp_plan_free(p);
    pp_schedule_free(built);
    c.split_backward = 0;
    c.pp = 3; c.mb = 6; c.vpp = 2;   /* the file's own: accepted */
    PP_CHECK_OK(pp_plan_build(&c, &p, &err), &err);
    pp_plan_free(p);
    c.pp = 4;
    PP_CHECK_FAILS(pp_plan_build(&c, &p, &err), &err, PP_EINVAL,
                   "pp=4: the csv has 3 rank(s), 2 chunk(s) per rank and 6 microbatch(es)");
    PP_CHECK(p == NULL);
    c.pp = 0; c.mb = 8;
    PP_CHECK_FAILS(pp_plan_build(&c, &p, &err), &err, PP_EINVAL, "mb=8: the csv has");
    c.mb = 0; c.vpp = 3;
    PP_CHECK_FAILS(pp_plan_build(&c, &p, &err), &err, PP_EINVAL, "vpp=3: the csv has");
    free(text);
}

/* A CSV whose rank-0 group meets two groups of rank 1: kept as written it is refused, lowered
 * again by pipepar it runs. A W before its I is named by the validator before any lowering. */
static void a_csvs_own_communication_is_kept_only_when_asked(void)
{
    const char *split = "0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n";
    const char *w_first = "0F0,1F0,2F0,2W0,2I0,1I0,1W0,0I0,0W0,0F1,1F1,2F1,2B1,1B1,0B1\n";
    pp_plan_config c;
    pp_plan *p = NULL;
    pp_error err;
    memset(&c, 0, sizeof c);
    c.csv = split; c.csv_len = strlen(split); c.keep_csv_comm = 1;
    PP_CHECK_FAILS(pp_plan_build(&c, &p, &err), &err, PP_EINVALID_SCHEDULE,
                   "each group must meet exactly one group of each peer");
    c.keep_csv_comm = 0;
    PP_CHECK_OK(pp_plan_build(&c, &p, &err), &err);
    if (p) PP_CHECK_STR(p->name, "from csv");
    pp_plan_free(p);
    c.csv = w_first; c.csv_len = strlen(w_first);
    PP_CHECK_FAILS(pp_plan_build(&c, &p, &err), &err, PP_EINVALID_SCHEDULE, "rank 0 position 3: 2W0 comes before its I");
}

/* One rank holding three chunks (a CSV's pp 1, vpp 3; pp_layers_build alone refuses that shape,
 * after Megatron): 6 layers still split 2, 2, 2 over its stages, and chunk c is stage c. */
static void one_rank_with_several_chunks_gets_its_even_split(void)
{
    const char *held = "0F0,1F0,2F0,2I0,1I0,0I0,0F1,1F1,2F1,2I1,1I1,0I1,2W0,1W0,0W0,2W1,1W1,0W1\n";
    const int twos[3] = { 2, 2, 2 }, firsts[3] = { 0, 2, 4 };
    pp_plan_config c;
    pp_plan *p = NULL;
    pp_error err;
    memset(&c, 0, sizeof c);
    c.csv = held; c.csv_len = strlen(held); c.csv_name = "held.csv"; c.layers = 6;
    PP_CHECK_OK(pp_plan_build(&c, &p, &err), &err);
    if (!p) return;
    PP_CHECK_STR(p->name, "from held.csv");
    PP_CHECK_INT(p->layers->pp, 1);
    PP_CHECK_INT(p->layers->vpp, 3);
    pl_check_ints(p->layers->count, twos, 3, "count");
    pl_check_ints(p->layers->first, firsts, 3, "first");
    PP_CHECK_INT(pp_layers_stage(p->layers, 0, 2), 2);
    pp_plan_free(p);
}

/* The search on stages of 1,3,1,3 layers (pp 2, mb 8, F = I = W per layer): the greedy V order
 * is the fastest (tests/zb_cli.sh's 2,6,2,6 case, smaller). Its ranking stays in the plan. */
static void a_search_on_a_layout_runs_the_fastest_order_for_its_stages(void)
{
    pp_plan_config c;
    pp_plan *p = NULL;
    pp_error err;
    memset(&c, 0, sizeof c);
    c.search = 1; c.pp = 2; c.mb = 8; c.layout = "Et*1|t*3|t*1|t*3L";
    PP_CHECK_OK(pp_plan_build(&c, &p, &err), &err);
    if (!p) return;
    PP_CHECK_MSG(!strncmp(p->name, "greedy V", 8), "name '%s'", p->name);
    PP_CHECK_STR(p->name, p->search->entries[0].name);
    PP_CHECK(p->search->best == NULL);       /* moved to the plan */
    PP_CHECK_INT(p->schedule->vpp, 2);
    PP_CHECK_OK(pp_schedule_validate(p->schedule, &err), &err);
    pp_plan_free(p);
}

/* search_layout: interleaved on 16 layers, pp 2, vpp 4, mb 8 chooses stages 1,2,2,2,2,2,3,2 and
 * a group of 4, of 1107 splits tried (`pipepar search --layers 16 --kind interleaved`: 195 units
 * against 198 for even stages). With split_backward its candidates run B as I then W. */
static void a_search_that_chooses_the_layout_gives_its_split_as_the_layers(void)
{
    pp_plan_config c;
    pp_plan *p = NULL;
    pp_error err;
    const int counts[8] = { 1, 2, 2, 2, 2, 2, 3, 2 };
    memset(&c, 0, sizeof c);
    c.search = 1; c.kind = PP_INTERLEAVED_1F1B; c.pp = 2; c.vpp = 4; c.mb = 8; c.layers = 16; c.search_layout = 1;
    PP_CHECK_OK(pp_plan_build(&c, &p, &err), &err);
    if (!p) return;
    PP_CHECK_STR(p->name, "interleaved vpp=4 group=4");
    PP_CHECK_INT(p->search->layouts, 1107);
    PP_CHECK_NEAR(p->search->entries[0].makespan, 195, 1e-9);
    PP_CHECK_INT(p->layers->num_stages, 8);
    pl_check_ints(p->layers->count, counts, 8, "count");
    pp_plan_free(p);
    c.split_backward = 1;
    PP_CHECK_OK(pp_plan_build(&c, &p, &err), &err);
    if (p) {
        PP_CHECK_CONTAINS(p->name, "interleaved vpp=4 group=");
        PP_CHECK_CONTAINS(p->name, ", B as I then W");
        PP_CHECK_INT(pp_test_count_op(p->schedule, PP_OP_B), 0);
    }
    pp_plan_free(p);
}

/* The greedy kind with the layout searched too: the search ranks greedy orders on every split and
 * sets each stage's cost itself (no costs are given per stage first), and the plan runs the
 * winner's split. */
static void a_greedy_search_that_chooses_the_layout_runs_its_split(void)
{
    pp_plan_config c;
    pp_plan *p = NULL;
    pp_error err;
    int s, total = 0;
    memset(&c, 0, sizeof c);
    c.search = 1; c.kind = PP_CUSTOM; c.pp = 2; c.vpp = 2; c.mb = 4; c.layers = 8; c.search_layout = 1;
    c.costs.f = 1; c.costs.i = 1.1; c.costs.w = 1;
    PP_CHECK_OK(pp_plan_build(&c, &p, &err), &err);
    if (!p) return;
    PP_CHECK_CONTAINS(p->name, "greedy");
    PP_CHECK(p->search->layouts > 1);
    PP_CHECK_INT(p->layers->num_stages, 4);
    for (s = 0; s < 4; s++) {
        PP_CHECK_INT(p->layers->count[s], p->search->entries[0].stage_layers[s]);
        total += p->layers->count[s];
    }
    PP_CHECK_INT(total, 8);
    PP_CHECK_OK(pp_schedule_validate(p->schedule, &err), &err);
    /* on threads: the same plan */
    c.threads = 3;
    {
        pp_plan *q = NULL;
        PP_CHECK_OK(pp_plan_build(&c, &q, &err), &err);
        if (q) {
            PP_CHECK_STR(q->name, p->name);
            for (s = 0; s < 4; s++) PP_CHECK_INT(q->layers->count[s], p->layers->count[s]);
            PP_CHECK_NEAR(q->search->entries[0].makespan, p->search->entries[0].makespan, 0);
        }
        pp_plan_free(q);
    }
    pp_plan_free(p);
}

/* A search over an even split of 6 layers on pp 3 takes vpp 2 (6 stages of 1 layer); with no
 * layers at all it may pick any vpp and the plan then gives one layer a model stage. */
static void a_search_over_even_layers_runs_at_vpp_2(void)
{
    pp_plan_config c;
    pp_plan *p = NULL;
    pp_error err;
    int stages;
    memset(&c, 0, sizeof c);
    c.search = 1; c.pp = 3; c.mb = 6; c.layers = 6;
    PP_CHECK_OK(pp_plan_build(&c, &p, &err), &err);
    if (p) { PP_CHECK_INT(p->schedule->vpp, 2); PP_CHECK_INT(p->layers->num_stages, 6); }
    pp_plan_free(p);
    c.layers = 0;
    PP_CHECK_OK(pp_plan_build(&c, &p, &err), &err);
    if (!p) return;
    stages = p->schedule->placement == PP_PLACEMENT_DUAL ? 3 : p->schedule->num_stages;
    PP_CHECK_INT(p->layers->num_stages, stages);
    PP_CHECK_INT(p->layers->num_layers, stages);
    PP_CHECK(p->costs.f_stage == NULL);
    pp_plan_free(p);
}

/* The greedy scheduler (kind PP_CUSTOM) is built for the layout's costs and proven. */
static void greedy_is_built_for_the_layouts_costs(void)
{
    pp_plan_config c = pl_kind(PP_CUSTOM, 2, 0, 4);
    pp_plan *p = NULL;
    pp_error err;
    c.layout = "Et*2|t|t|t*2L";
    PP_CHECK_OK(pp_plan_build(&c, &p, &err), &err);
    if (!p) return;
    PP_CHECK_STR(p->name, "greedy");
    PP_CHECK_INT(p->schedule->kind, PP_CUSTOM);
    PP_CHECK_INT(p->schedule->vpp, 2);
    PP_CHECK(p->costs.f_stage != NULL);
    pp_plan_free(p);
}

/* Each layer's own costs: layers with F 1, 2, 3, 4 and memory 1, 1, 2, 2 on 2 stages of 2 make
 * stages of F 3 and 7, memory 2 and 4; a stage with no layer is refused. */
static void stage_costs_sum_each_layers_own_and_refuse_an_empty_stage(void)
{
    pp_layers_config lc;
    pp_layers *l = NULL;
    pp_layer_costs each[4];
    pp_sim_costs per, out;
    double storage[5 * 3];
    pp_error err;
    const double f[2] = { 3, 7 }, mem[2] = { 2, 4 }, b[2] = { 6, 14 };
    int k;
    memset(&lc, 0, sizeof lc);
    memset(&per, 0, sizeof per);
    lc.num_layers = 4; lc.pp = 2;
    for (k = 0; k < 4; k++) { each[k].f = k + 1; each[k].i = k + 1; each[k].w = k + 1; each[k].memory = k < 2 ? 1 : 2; }
    PP_CHECK_OK(pp_layers_build(&lc, &l, &err), &err);
    if (!l) return;
    PP_CHECK_OK(pp_plan_stage_costs(l, &per, each, storage, &out, &err), &err);
    pl_check_doubles(out.f_stage, f, 2, "f_stage");
    pl_check_doubles(out.b_stage, b, 2, "b_stage");
    pl_check_doubles(out.memory_stage, mem, 2, "memory_stage");
    pp_layers_free(l);
    l = NULL;
    memset(&lc, 0, sizeof lc);
    lc.pp = 3; lc.layout = "Et||tL";
    PP_CHECK_OK(pp_layers_build(&lc, &l, &err), &err);
    if (l) PP_CHECK_FAILS(pp_plan_stage_costs(l, &per, NULL, storage, &out, &err), &err, PP_EINVAL, "stage 1 holds no layer");
    pp_layers_free(l);
}

/* Every refusal names the field, its value and the rule; nothing is returned. */
static void every_refusal_names_the_field_and_the_rule(void)
{
    static const double per_stage[4] = { 1, 1, 1, 1 };
    struct { pp_plan_config c; pp_status st; const char *needle; } cases[28];
    pp_plan *p = NULL;
    pp_error err;
    int n = 0, k;
    memset(cases, 0, sizeof cases);
#define PL_CASE(status, text) (cases[n].st = (status), cases[n].needle = (text), &cases[n++].c)
    { pp_plan_config *c = PL_CASE(PP_EINVAL, "kind: none given"); c->pp = 2; c->mb = 4; }
    { pp_plan_config *c = PL_CASE(PP_EINVAL, "csv: the file is the whole schedule (not with kind)");
      *c = pl_kind(PP_1F1B, 2, 0, 4); c->csv = "0F0,0B0\n"; c->csv_len = 8; }
    { pp_plan_config *c = PL_CASE(PP_EINVAL, "group=4: not with search (it tries the group sizes itself)");
      c->search = 1; c->pp = 2; c->mb = 8; c->group = 4; }
    { pp_plan_config *c = PL_CASE(PP_EINVAL, "threads=-1: must be in 0..1024");
      *c = pl_kind(PP_1F1B, 2, 0, 8); c->threads = -1; }
    { pp_plan_config *c = PL_CASE(PP_EINVAL, "search_layout: only with search");
      *c = pl_kind(PP_1F1B, 2, 0, 8); c->layers = 8; c->search_layout = 1; }
    { pp_plan_config *c = PL_CASE(PP_EINVAL, "search_layout: needs layers"); c->search = 1; c->pp = 2; c->mb = 8;
      c->search_layout = 1; }
    { pp_plan_config *c = PL_CASE(PP_EINVAL, "search_layout: not with layout"); c->search = 1; c->pp = 2; c->mb = 8;
      c->search_layout = 1; c->layers = 4; c->layout = "Et|t|t|tL"; }
    { pp_plan_config *c = PL_CASE(PP_EINVAL, "layout_spread=2: only with search_layout (the splits it tries)");
      c->search = 1; c->pp = 2; c->mb = 8; c->layers = 8; c->layout_spread = 2; }
    { pp_plan_config *c = PL_CASE(PP_EINVAL, "layout_spread=-1: must be >= 0 (0 means 1)");
      c->search = 1; c->pp = 2; c->mb = 8; c->layers = 8; c->search_layout = 1; c->layout_spread = -1; }
    { pp_plan_config *c = PL_CASE(PP_EINVAL, "vpp=3: the layout has 4 stages, so vpp = 2 (or leave vpp 0)");
      *c = pl_kind(PP_INTERLEAVED_1F1B, 2, 3, 8); c->layout = "Et|t|t|tL"; }
    { pp_plan_config *c = PL_CASE(PP_EINVAL, "layout 'Et||tL': stage 1 holds no layer ('t'): every stage needs one");
      *c = pl_kind(PP_1F1B, 3, 0, 6); c->layout = "Et||tL"; }
    { pp_plan_config *c = PL_CASE(PP_EINVAL, "dualpipe runs every model stage twice");
      *c = pl_kind(PP_DUALPIPE, 2, 0, 8); c->layout = "Et|t|t|tL"; }
    { pp_plan_config *c = PL_CASE(PP_EINVAL, "layers=3: must be a multiple of the 4 model stages");
      *c = pl_kind(PP_INTERLEAVED_1F1B, 2, 2, 4); c->layers = 3; }
    { pp_plan_config *c = PL_CASE(PP_EINVAL, "layout 't|t': the first layer must be E");
      *c = pl_kind(PP_1F1B, 2, 0, 4); c->layout = "t|t"; }
    { pp_plan_config *c = PL_CASE(PP_EUNSUPPORTED, "vpp=2: 1f1b runs one chunk per rank");
      *c = pl_kind(PP_1F1B, 2, 0, 4); c->layout = "Et|t|t|tL"; }
    { pp_plan_config *c = PL_CASE(PP_EINVAL, "keep_csv_comm: only with csv");
      *c = pl_kind(PP_1F1B, 2, 0, 4); c->keep_csv_comm = 1; }
    { pp_plan_config *c = PL_CASE(PP_EINVAL, "max_memory=2: only with search");
      *c = pl_kind(PP_1F1B, 2, 0, 4); c->max_memory = 2; }
    { pp_plan_config *c = PL_CASE(PP_EINVAL, "max_memory=0.5: no schedule fits; the leanest");
      c->search = 1; c->pp = 4; c->mb = 8; c->max_memory = 0.5; }
    { pp_plan_config *c = PL_CASE(PP_EINVAL, "group=2: only interleaved takes a group, not greedy");
      *c = pl_kind(PP_CUSTOM, 2, 0, 4); c->group = 2; }
    { pp_plan_config *c = PL_CASE(PP_EINVAL, "costs: per-stage arrays with layers");
      *c = pl_kind(PP_INTERLEAVED_1F1B, 2, 2, 4); c->layers = 4; c->costs.f_stage = per_stage; }
    { pp_plan_config *c = PL_CASE(PP_EINVAL, "costs: per-stage arrays with layers");   /* a tail is one too */
      *c = pl_kind(PP_DUALPIPE, 2, 2, 4); c->layers = 8; c->costs.tail_stage = per_stage; }
    { pp_plan_config *c = PL_CASE(PP_EINVAL, "pp=-1: must be >= 0"); *c = pl_kind(PP_1F1B, -1, 0, 4); }
    { pp_plan_config *c = PL_CASE(PP_EINVAL, "mb=0: must be at least 1"); *c = pl_kind(PP_1F1B, 2, 0, 0); }
    { pp_plan_config *c = PL_CASE(PP_EINVAL, "layer_costs: only with layers");
      static const pp_layer_costs one = { 1, 1, 1, 1 };
      *c = pl_kind(PP_1F1B, 2, 0, 4); c->layer_costs = &one; }
    { pp_plan_config *c = PL_CASE(PP_EPARSE, "action 'zz': expected <stage><op><microbatch>");
      c->csv = "0F0,zz\n"; c->csv_len = 7; }
    { pp_plan_config *c = PL_CASE(PP_EUNSUPPORTED, "kind=zbv: none of this kind");
      c->search = 1; c->kind = PP_ZBV; c->pp = 2; c->mb = 8; c->vpp = 1; }
#undef PL_CASE
    for (k = 0; k < n; k++) {
        p = (pp_plan *)&err;   /* any non-NULL: a refusal sets it NULL */
        PP_CHECK_FAILS(pp_plan_build(&cases[k].c, &p, &err), &err, cases[k].st, cases[k].needle);
        PP_CHECK_MSG(p == NULL, "case %d: a plan came back", k);
    }
    PP_CHECK_FAILS(pp_plan_build(NULL, &p, &err), &err, PP_EINVAL, "cfg and out must not be NULL");
}

/* Every allocation of a plan failing in turn (a CSV lowered again and split; a layout searched)
 * gives PP_ENOMEM and nothing back, and then the same plan. */
static void a_plan_survives_out_of_memory_at_every_allocation(void)
{
    size_t len = 0;
    char *text = pl_csv(PP_1F1B, 2, 0, 4, &len);
    pp_plan_config cfgs[2];
    int which;
    memset(cfgs, 0, sizeof cfgs);
    cfgs[0].csv = text; cfgs[0].csv_len = len; cfgs[0].split_backward = 1; cfgs[0].layers = 4;
    cfgs[1].search = 1; cfgs[1].pp = 2; cfgs[1].mb = 4; cfgs[1].layout = "Et|t*2|t|t*2L";
    for (which = 0; which < 2 && text; which++) {
        pp_plan *p = NULL;
        pp_error err;
        char want[160] = "";
        long k;
        int done = 0, failures = 0;
        PP_CHECK_OK(pp_plan_build(&cfgs[which], &p, &err), &err);
        if (p) snprintf(want, sizeof want, "%s", p->name);
        pp_plan_free(p);
        p = NULL;
        for (k = 0; k < 1000000 && !done; k += 1 + k / 64) {
            pp_status st;
            pp_test_alloc_countdown = k;
            st = pp_plan_build(&cfgs[which], &p, &err);
            pp_test_alloc_countdown = -1;
            if (st == PP_OK) { done = 1; break; }
            failures++;
            PP_CHECK_MSG(st == PP_ENOMEM, "plan %d: allocation %ld failing gave %s: %s", which, k, pp_status_name(st),
                         err.message);
            PP_CHECK(p == NULL);
        }
        PP_CHECK_MSG(done && failures > 5, "plan %d built after %d failures (done=%d)", which, failures, done);
        if (p) PP_CHECK_STR(p->name, want);
        pp_plan_free(p);
    }
    free(text);
}

const pp_test_case pp_suite_plan[] = {
    PP_TEST(a_kind_is_built_lowered_and_proven_with_a_layer_a_stage),
    PP_TEST(layers_are_split_evenly_and_each_stage_costs_its_layers),
    PP_TEST(a_layout_sets_vpp_and_the_stages_costs),
    PP_TEST(dualpipe_splits_the_layers_over_pp_model_stages_run_twice),
    PP_TEST(the_splits_change_what_they_say_and_the_name_says_what_changed),
    PP_TEST(a_csv_gives_its_shape_and_order_and_must_agree_with_what_is_given),
    PP_TEST(a_csvs_own_communication_is_kept_only_when_asked),
    PP_TEST(one_rank_with_several_chunks_gets_its_even_split),
    PP_TEST(a_search_on_a_layout_runs_the_fastest_order_for_its_stages),
    PP_TEST(a_search_that_chooses_the_layout_gives_its_split_as_the_layers),
    PP_TEST(a_greedy_search_that_chooses_the_layout_runs_its_split),
    PP_TEST(a_search_over_even_layers_runs_at_vpp_2),
    PP_TEST(greedy_is_built_for_the_layouts_costs),
    PP_TEST(stage_costs_sum_each_layers_own_and_refuse_an_empty_stage),
    PP_TEST(every_refusal_names_the_field_and_the_rule),
    PP_TEST(a_plan_survives_out_of_memory_at_every_allocation),
    {0}
};
