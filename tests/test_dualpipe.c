/* test_dualpipe.c — DeepSeek's bidirectional DualPipe (deepseek-ai/DualPipe, dualpipe.py):
 * its routes (half the microbatches down, half up), its compute order, its rules, and every
 * accepted configuration proven valid. The README's bubble and memory row is in test_search.c,
 * the gradients (two weight copies summed) in test_runtime.c. */
#include <stdlib.h>
#include "pp_test.h"

static pp_schedule *dp_build(int pp, int mb, pp_error *err)
{
    pp_schedule_config c;
    pp_schedule *s = NULL;
    memset(&c, 0, sizeof c);
    c.kind = PP_DUALPIPE; c.pp = pp; c.mb = mb;
    if (pp_schedule_build(&c, &s, err) != PP_OK) return NULL;
    return s;
}

/* pp=2: ranks 0 and 1 are both "middle" ranks (half_rank 0 of 1), n = 2 microbatches each way.
 * Worked from dualpipe.py step() by hand. Rank 0: phase 0 = down (stage 0, microbatches 0, 1),
 * phase 1 = up (stage 3, microbatches 2, 3). Step 2: F0 F1; step 4 (one pass, middle rank): F0,
 * B1 unoverlapped, then FB(F1, B0); step 6 (h = 0, even): B1 full, then zero bubble on: I0;
 * step 8: W. Rank 1 is the mirror image: phase 0 = up (stage 2), phase 1 = down (stage 1). */
static void dualpipe_pp2_mb4_is_deepseeks_order_worked_by_hand(void)
{
    static const char *const want[] = {
        "0F0 3F2 0F1 3B2 (3F3;0B0)OVERLAP_F_B 3B3 0I1 0W1",
        "2F2 1F0 2F3 1B0 (1F1;2B2)OVERLAP_F_B 1B1 2I3 2W3",
    };
    char got[4096];
    pp_error err;
    pp_schedule *s = dp_build(2, 4, &err);
    int r;
    PP_CHECK_MSG(s != NULL, "build: %s", err.message);
    if (!s) return;
    PP_CHECK(s->placement == PP_PLACEMENT_DUAL);
    PP_CHECK_INT(s->num_stages, 4);
    for (r = 0; r < 2; r++) {
        pp_test_compute_order(s, r, got, sizeof got);
        PP_CHECK_MSG(strcmp(got, want[r]) == 0, "rank %d:\n       got %s\n  expected %s", r, got, want[r]);
    }
    PP_CHECK_OK(pp_schedule_validate(s, &err), &err);
    pp_schedule_free(s);
}

/* pp=4 mb=8 (n = 4 each way, H = 2), from dualpipe.py by hand. Rank 0 (h = 0): step 1 two F0,
 * step 2 F0 F1, step 3 I1 W F1, step 4 once FB(F0,B1) FB(F1,B0), step 5 B1 FB(F1,B0), step 6 B1
 * then I0 (h even: zero bubble from B0 on), step 7 W I0, step 8 W. Rank 1 (h = 1, a middle rank):
 * step 2 twice F0 F1, step 4 twice with the first pair F0, B1 unoverlapped, step 6 B1 B0 then
 * (h odd: from B1 on) I1 I0, step 8 two W. Ranks 2 and 3 mirror 1 and 0. */
static void dualpipe_pp4_mb8_is_deepseeks_order_worked_by_hand(void)
{
    static const char *const want[] = {
        "0F0 0F1 0F2 7F4 7I4 7W4 7F5 (0F3;7B5)OVERLAP_F_B (7F6;0B0)OVERLAP_F_B 7B6 (7F7;0B1)OVERLAP_F_B 7B7 "
        "0I2 0W2 0I3 0W3",
        "1F0 6F4 1F1 6F5 1F2 6B4 (6F6;1B0)OVERLAP_F_B (1F3;6B5)OVERLAP_F_B (6F7;1B1)OVERLAP_F_B 6B6 1B2 6I7 1I3 "
        "6W7 1W3",
    };
    char got[4096];
    pp_error err;
    pp_schedule *s = dp_build(4, 8, &err);
    int r;
    PP_CHECK_MSG(s != NULL, "build: %s", err.message);
    if (!s) return;
    for (r = 0; r < 2; r++) {
        pp_test_compute_order(s, r, got, sizeof got);
        PP_CHECK_MSG(strcmp(got, want[r]) == 0, "rank %d:\n       got %s\n  expected %s", r, got, want[r]);
    }
    PP_CHECK_OK(pp_schedule_validate(s, &err), &err);
    pp_schedule_free(s);
}

/* The routes: microbatches 0..mb/2-1 cross stages 0..pp-1 (ranks 0..pp-1), the others stages
 * pp..2pp-1 (ranks pp-1..0); stage s computes model stage s % pp, so every model stage lives on
 * two ranks (2x parameters) and every rank holds two model stages, j and pp-1-j. */
/* Against tests/data/dualpipe_orders.txt: per-rank orders from tools/dualpipe_reference.py, a
 * derivation of dualpipe.py's step() written apart from the C generator. Covers mb >= 2pp that
 * is not 2pp (pp 2..8) and the drop rule below 2pp (pp 4, 6, 8). */
static void dualpipe_orders_match_an_independent_derivation_of_dualpipe_py(void)
{
    char path[1024], line[16384], got[16384];
    FILE *f;
    int checked = 0, last_pp = -1, last_mb = -1;
    pp_schedule *s = NULL;
    pp_error err;
    snprintf(path, sizeof path, "%s/dualpipe_orders.txt", pp_test_data_dir());
    f = fopen(path, "r");
    PP_CHECK_MSG(f != NULL, "open %s", path);
    if (!f) return;
    while (fgets(line, sizeof line, f)) {
        int pp, mb, r, n = 0;
        char *want;
        size_t len = strlen(line);
        if (line[0] == '#' || len < 2) continue;
        if (line[len - 1] == '\n') line[--len] = '\0';
        if (sscanf(line, "%d %d %d:%n", &pp, &mb, &r, &n) != 3 || n == 0) { PP_CHECK_MSG(0, "bad line: %s", line); continue; }
        want = line + n;
        while (*want == ' ') want++;
        if (pp != last_pp || mb != last_mb) {
            pp_schedule_free(s);
            s = dp_build(pp, mb, &err);
            PP_CHECK_MSG(s != NULL, "pp=%d mb=%d: %s", pp, mb, err.message);
            last_pp = pp; last_mb = mb;
        }
        if (!s) continue;
        pp_test_compute_order(s, r, got, sizeof got);
        PP_CHECK_MSG(strcmp(got, want) == 0, "pp=%d mb=%d rank %d:\n       got %s\n  expected %s", pp, mb, r, got, want);
        checked++;
    }
    pp_schedule_free(s);
    fclose(f);
    PP_CHECK_MSG(checked >= 50, "checked %d rank orders", checked);
}

static void dualpipe_routes_run_half_the_microbatches_each_way_through_the_same_model(void)
{
    pp_error err;
    pp_schedule *s = dp_build(4, 8, &err);
    int m, st, copies[4] = { 0, 0, 0, 0 };
    PP_CHECK_MSG(s != NULL, "build: %s", err.message);
    if (!s) return;
    for (m = 0; m < 8; m++) {
        PP_CHECK_INT(pp_mb_first_stage(s, m), m < 4 ? 0 : 4);
        PP_CHECK_INT(pp_mb_last_stage(s, m), m < 4 ? 3 : 7);
        PP_CHECK_INT(pp_stage_rank(s, pp_mb_first_stage(s, m)), m < 4 ? 0 : 3);
        PP_CHECK_INT(pp_stage_rank(s, pp_mb_last_stage(s, m)), m < 4 ? 3 : 0);
    }
    for (st = 0; st < 8; st++) {
        PP_CHECK_INT(pp_stage_model_stage(s, st), st % 4);
        copies[pp_stage_model_stage(s, st)]++;
        /* the up pipeline enters at rank pp-1 with model stage 0 */
        if (st >= 4) PP_CHECK_INT(pp_stage_rank(s, st), 3 - (st - 4));
    }
    for (st = 0; st < 4; st++) PP_CHECK_INT(copies[st], 2);
    PP_CHECK_INT(pp_mb_first_stage(s, 8), -1);
    PP_CHECK_INT(pp_stage_model_stage(s, 8), -1);
    pp_schedule_free(s);
    /* other placements: every microbatch crosses every stage, model stage = stage */
    PP_CHECK_OK(pp_schedule_create(4, 2, 8, PP_PLACEMENT_V, &s, &err), &err);
    if (s) {
        PP_CHECK_INT(pp_mb_first_stage(s, 7), 0);
        PP_CHECK_INT(pp_mb_last_stage(s, 7), 7);
        PP_CHECK_INT(pp_stage_model_stage(s, 5), 5);
        pp_schedule_free(s);
    }
}

/* Rank pp-1-r runs rank r's program with the directions swapped (dualpipe.py: phase ^=
 * is_in_second_half), and each rank runs mb/2 F and B-or-I per direction. */
static void dualpipe_ranks_mirror_each_other_with_the_directions_swapped(void)
{
    pp_error err;
    int pp;
    for (pp = 2; pp <= 8; pp += 2) {
        pp_schedule *s = dp_build(pp, 2 * pp + 4, &err);
        int r, i, half;
        PP_CHECK_MSG(s != NULL, "build pp=%d: %s", pp, err.message);
        if (!s) continue;
        half = s->mb / 2;
        for (r = 0; r < pp; r++) {
            int q = pp - 1 - r;
            PP_CHECK_INT(s->length[r], s->length[q]);
            for (i = 0; i < s->length[r] && i < s->length[q]; i++) {
                pp_action a = s->actions[r][i], b = s->actions[q][i];
                /* swap: down stage r <-> up stage pp+r (both model stage r), microbatch
                 * m <-> m +- mb/2 */
                int ms = a.mb < half ? a.mb + half : a.mb - half;
                int ss = a.stage < pp ? a.stage + pp : a.stage - pp;
                PP_CHECK_MSG(a.op == b.op && b.mb == ms && b.stage == ss, "pp=%d rank %d position %d", pp, r, i);
                if (!(a.op == b.op && b.mb == ms && b.stage == ss)) break;
            }
        }
        pp_schedule_free(s);
    }
}

/* Done means: validated (dependencies, rendezvous deadlock freedom, group pairing) for every
 * configuration accepted with pp in {2, 4, 6, 8} and mb in 2..32; the rest refused with the rule. */
static void every_dualpipe_schedule_with_even_pp_2_to_8_and_mb_2_to_32_is_valid(void)
{
    int pp, mb, valid = 0;
    for (pp = 2; pp <= 8; pp += 2)
        for (mb = 2; mb <= 32; mb++) {
            pp_error err;
            pp_schedule *s = dp_build(pp, mb, &err);
            if (mb % 2) {
                PP_CHECK_MSG(s == NULL && strstr(err.message, "even mb"), "pp=%d mb=%d: %s", pp, mb,
                             s ? "accepted" : err.message);
                pp_schedule_free(s);
                continue;
            }
            PP_CHECK_MSG(s != NULL, "pp=%d mb=%d: %s", pp, mb, err.message);
            if (!s) continue;
            if (pp_schedule_lower(s, &err) != PP_OK || pp_schedule_validate(s, &err) != PP_OK)
                pp_test_fail(__FILE__, __LINE__, "pp=%d mb=%d: %s", pp, mb, err.message);
            else
                valid++;
            pp_schedule_free(s);
        }
    PP_CHECK_INT(valid, 4 * 16);
}

/* Below dualpipe.py's num_chunks >= 2 * num_ranks the order is built for 2*pp microbatches and
 * cut back: exactly the same order minus the missing microbatches' actions (an FB that loses a
 * half keeps the other). */
static void dualpipe_below_2pp_microbatches_drops_the_padding(void)
{
    pp_error err;
    pp_schedule *full = dp_build(4, 8, &err), *cut = dp_build(4, 4, &err);
    int r;
    PP_CHECK(full != NULL && cut != NULL);
    if (full && cut) {
        for (r = 0; r < 4; r++) {
            int i, j = 0;
            for (i = 0; i < full->length[r]; i++) {
                pp_action a = full->actions[r][i], want = a;
                /* microbatch m of a direction in the 8-schedule is m (down) or 4 + m (up); kept
                 * when m < 2, renumbered to m or 2 + m */
                int keep_f = (a.mb % 4) < 2, keep_b = a.op == PP_OP_FB && (a.mb2 % 4) < 2;
                if (a.op == PP_OP_FB) {
                    if (keep_f && keep_b) { want.mb = a.mb % 4 + (a.mb >= 4 ? 2 : 0); want.mb2 = a.mb2 % 4 + (a.mb2 >= 4 ? 2 : 0); }
                    else if (keep_f) { want.op = PP_OP_F; want.mb = a.mb % 4 + (a.mb >= 4 ? 2 : 0); want.stage2 = want.mb2 = -1; }
                    else if (keep_b) { want.op = PP_OP_B; want.stage = a.stage2; want.mb = a.mb2 % 4 + (a.mb2 >= 4 ? 2 : 0); want.stage2 = want.mb2 = -1; }
                    else continue;
                } else {
                    if (!keep_f) continue;
                    want.mb = a.mb % 4 + (a.mb >= 4 ? 2 : 0);
                }
                PP_CHECK_MSG(j < cut->length[r], "rank %d: cut schedule too short", r);
                if (j >= cut->length[r]) break;
                PP_CHECK_MSG(cut->actions[r][j].op == want.op && cut->actions[r][j].stage == want.stage &&
                             cut->actions[r][j].mb == want.mb && cut->actions[r][j].stage2 == want.stage2 &&
                             cut->actions[r][j].mb2 == want.mb2, "rank %d position %d", r, j);
                j++;
            }
            PP_CHECK_INT(j, cut->length[r]);
        }
    }
    pp_schedule_free(full);
    pp_schedule_free(cut);
}

static void dualpipe_names_the_parameter_and_rule_it_refuses(void)
{
    pp_schedule_config c;
    pp_schedule *s = NULL;
    pp_schedule_kind k = PP_KIND_NONE;
    pp_error err;
    memset(&c, 0, sizeof c);
    c.kind = PP_DUALPIPE; c.pp = 3; c.mb = 6;
    PP_CHECK_FAILS(pp_schedule_build(&c, &s, &err), &err, PP_EUNSUPPORTED, "pp=3: dualpipe needs an even pp");
    c.pp = 1; c.mb = 2;
    PP_CHECK_FAILS(pp_schedule_build(&c, &s, &err), &err, PP_EUNSUPPORTED, "pp=1: dualpipe needs an even pp");
    c.pp = 4; c.mb = 7;
    PP_CHECK_FAILS(pp_schedule_build(&c, &s, &err), &err, PP_EUNSUPPORTED, "mb=7: dualpipe needs an even mb");
    c.mb = 8; c.vpp = 3;
    PP_CHECK_FAILS(pp_schedule_build(&c, &s, &err), &err, PP_EUNSUPPORTED, "vpp=3");
    c.vpp = 0; c.max_live = 5;
    PP_CHECK_FAILS(pp_schedule_build(&c, &s, &err), &err, PP_EUNSUPPORTED, "max_live=5");
    PP_CHECK_FAILS(pp_schedule_create(3, 2, 4, PP_PLACEMENT_DUAL, &s, &err), &err, PP_EINVAL, "pp=3");
    PP_CHECK_FAILS(pp_schedule_create(4, 2, 5, PP_PLACEMENT_DUAL, &s, &err), &err, PP_EINVAL, "mb=5");
    PP_CHECK_FAILS(pp_schedule_create(4, 1, 4, PP_PLACEMENT_DUAL, &s, &err), &err, PP_EINVAL, "vpp=1");
    {
        pp_greedy_config g;
        memset(&g, 0, sizeof g);
        g.pp = 4; g.mb = 8; g.vpp = 2; g.placement = PP_PLACEMENT_DUAL;
        PP_CHECK_FAILS(pp_schedule_build_greedy(&g, &s, &err), &err, PP_EUNSUPPORTED, "placement=dual");
    }
    PP_CHECK_OK(pp_schedule_kind_parse("dualpipe", &k, &err), &err);
    PP_CHECK(k == PP_DUALPIPE);
    PP_CHECK_STR(pp_schedule_kind_name(PP_DUALPIPE), "dualpipe");
}

/* The validator knows the routes: a down microbatch has no up stage, and nothing crosses the
 * end of a route (stage pp-1's output is the down pipeline's loss, not stage pp's input). */
static void validator_refuses_actions_off_a_microbatchs_route(void)
{
    pp_schedule *s = NULL, *c = NULL;
    pp_error err;
    pp_action a;
    int i;
    PP_CHECK_OK(pp_schedule_create(2, 2, 2, PP_PLACEMENT_DUAL, &s, &err), &err);
    if (!s) return;
    memset(&a, 0, sizeof a);
    a.stage2 = a.mb2 = -1;
    /* microbatch 0 goes down (stages 0, 1), microbatch 1 up (stages 2 on rank 1, 3 on rank 0) */
    a.op = PP_OP_F; a.stage = 0; a.mb = 0; pp_schedule_append(s, 0, a, &err);
    a.stage = 3; a.mb = 1; pp_schedule_append(s, 0, a, &err);
    a.op = PP_OP_B; a.stage = 3; a.mb = 1; pp_schedule_append(s, 0, a, &err);
    a.stage = 0; a.mb = 0; pp_schedule_append(s, 0, a, &err);
    a.op = PP_OP_F; a.stage = 2; a.mb = 1; pp_schedule_append(s, 1, a, &err);
    a.stage = 1; a.mb = 0; pp_schedule_append(s, 1, a, &err);
    a.op = PP_OP_B; a.stage = 1; a.mb = 0; pp_schedule_append(s, 1, a, &err);
    a.stage = 2; a.mb = 1; pp_schedule_append(s, 1, a, &err);
    PP_CHECK_OK(pp_schedule_validate(s, &err), &err);
    PP_CHECK_OK(pp_schedule_copy(s, &c, &err), &err);
    if (c) {
        PP_CHECK_OK(pp_schedule_lower(c, &err), &err);
        /* stage 1's F of microbatch 0 ends the down route: no SEND_F to stage 2 */
        for (i = 0; i < c->length[1]; i++)
            PP_CHECK(!(c->actions[1][i].op == PP_OP_SEND_F && c->actions[1][i].stage == 1));
        pp_schedule_free(c);
    }
    PP_CHECK_OK(pp_schedule_copy(s, &c, &err), &err);
    if (c) {
        /* stage 2 starts microbatch 1's up route: a SEND_B from it has no previous stage */
        a.op = PP_OP_SEND_B; a.stage = 2; a.mb = 1; a.group = 1;
        pp_schedule_append(c, 1, a, &err);
        PP_CHECK_FAILS(pp_schedule_validate(c, &err), &err, PP_EINVALID_SCHEDULE, "stage 2 has no previous stage to talk to");
        pp_schedule_free(c);
        a.group = 0;
    }
    a.op = PP_OP_F; a.stage = 3; a.mb = 0;   /* microbatch 0 on the up stage 3 */
    pp_schedule_append(s, 0, a, &err);
    PP_CHECK_FAILS(pp_schedule_validate(s, &err), &err, PP_EINVALID_SCHEDULE, "not on microbatch 0's route (stages 0..1)");
    pp_schedule_free(s);
}

/* CSV (PyTorch's form) carries no placement: the reader recognizes the two routes. */
static void dualpipe_csv_round_trips(void)
{
    pp_error err;
    pp_schedule *s = dp_build(4, 8, &err), *back = NULL;
    char *buf = NULL;
    size_t len = 0;
    FILE *f;
    int r, i;
    PP_CHECK(s != NULL);
    if (!s) return;
    PP_CHECK_OK(pp_schedule_lower(s, &err), &err);
    f = open_memstream(&buf, &len);
    PP_CHECK_OK(pp_schedule_write_csv(s, f, &err), &err);
    fclose(f);
    PP_CHECK_OK(pp_schedule_read_csv(buf, len, &back, &err), &err);
    if (back) {
        PP_CHECK(back->placement == PP_PLACEMENT_DUAL);
        PP_CHECK_INT(back->mb, 8);
        for (r = 0; r < 4; r++) {
            PP_CHECK_INT(back->length[r], s->length[r]);
            for (i = 0; i < s->length[r] && i < back->length[r]; i++)
                PP_CHECK(back->actions[r][i].op == s->actions[r][i].op && back->actions[r][i].stage == s->actions[r][i].stage &&
                         back->actions[r][i].mb == s->actions[r][i].mb && back->actions[r][i].stage2 == s->actions[r][i].stage2 &&
                         back->actions[r][i].mb2 == s->actions[r][i].mb2);
        }
        PP_CHECK_OK(pp_schedule_validate(back, &err), &err);
        pp_schedule_free(back);
    }
    free(buf);
    pp_schedule_free(s);
    /* the V kinds still read back as V (the reader tells the routes apart) */
    {
        static const pp_schedule_kind kinds[] = { PP_ZBV, PP_DUALPIPEV };
        int k;
        for (k = 0; k < 2; k++) {
            pp_schedule_config c;
            memset(&c, 0, sizeof c);
            c.kind = kinds[k]; c.pp = 4; c.mb = 8;
            s = NULL; back = NULL; buf = NULL; len = 0;
            PP_CHECK_OK(pp_schedule_build(&c, &s, &err), &err);
            if (!s) continue;
            PP_CHECK_OK(pp_schedule_lower(s, &err), &err);
            f = open_memstream(&buf, &len);
            PP_CHECK_OK(pp_schedule_write_csv(s, f, &err), &err);
            fclose(f);
            PP_CHECK_OK(pp_schedule_read_csv(buf, len, &back, &err), &err);
            if (back) PP_CHECK_MSG(back->placement == PP_PLACEMENT_V, "%s read back with placement %d", pp_schedule_kind_name(kinds[k]),
                                   (int)back->placement);
            pp_schedule_free(back);
            free(buf);
            pp_schedule_free(s);
        }
    }
}

/* A MIMO pipeline runs one stage per rank; DualPipe's two copies per rank are refused by name. */
static void mimo_pipeline_refuses_dualpipe(void)
{
    pp_mimo m;
    pp_mimo_module_config mods[2];
    pp_mimo_config cfg;
    pp_mimo_pipeline_config pc;
    pp_mimo_pipeline *pl = NULL;
    pp_error err;
    int k;
    memset(mods, 0, sizeof mods);
    snprintf(mods[0].name, sizeof mods[0].name, "vision");
    snprintf(mods[1].name, sizeof mods[1].name, "language");
    for (k = 0; k < 2; k++) { mods[k].tp = 1; mods[k].dp = 1; mods[k].pp = 2; mods[k].offset = 2 * k; }
    memset(&cfg, 0, sizeof cfg);
    cfg.num_modules = 2; cfg.modules = mods;
    PP_CHECK_OK(pp_mimo_init(&cfg, &m, &err), &err);
    memset(&pc, 0, sizeof pc);
    pc.kind = PP_DUALPIPE; pc.mb = 8;
    PP_CHECK_FAILS(pp_mimo_pipeline_create(&m, &pc, &pl, &err), &err, PP_EUNSUPPORTED,
                   "kind=dualpipe: DualPipe runs two copies of every stage");
    PP_CHECK(pl == NULL);
}

const pp_test_case pp_suite_dualpipe[] = {
    PP_TEST(dualpipe_pp2_mb4_is_deepseeks_order_worked_by_hand),
    PP_TEST(dualpipe_pp4_mb8_is_deepseeks_order_worked_by_hand),
    PP_TEST(dualpipe_orders_match_an_independent_derivation_of_dualpipe_py),
    PP_TEST(dualpipe_routes_run_half_the_microbatches_each_way_through_the_same_model),
    PP_TEST(dualpipe_ranks_mirror_each_other_with_the_directions_swapped),
    PP_TEST(every_dualpipe_schedule_with_even_pp_2_to_8_and_mb_2_to_32_is_valid),
    PP_TEST(dualpipe_below_2pp_microbatches_drops_the_padding),
    PP_TEST(dualpipe_names_the_parameter_and_rule_it_refuses),
    PP_TEST(validator_refuses_actions_off_a_microbatchs_route),
    PP_TEST(dualpipe_csv_round_trips),
    PP_TEST(mimo_pipeline_refuses_dualpipe),
    {0}
};
