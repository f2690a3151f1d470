/* Tests of >>mimo: module grids, rank roles, bridges, the physical-program check, the global
 * gradient norm, and a two-module model trained on CPU threads that must equal the one-process
 * run (examples/mimo_model.h). Runs under TSan too (make test). */
#include "pp_test.h"
#include "../examples/mimo_model.h"

/* --- helpers ------------------------------------------------------------------------------------ */

static pp_mimo_module_config mod(const char *name, int offset, int tp, int dp, int pp)
{
    pp_mimo_module_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.name, sizeof c.name, "%s", name);
    c.offset = offset; c.tp = tp; c.dp = dp; c.pp = pp;
    return c;
}

static pp_status init2(pp_mimo *m, pp_mimo_module_config a, pp_mimo_module_config b, int world, pp_error *err)
{
    pp_mimo_module_config mods[2];
    pp_mimo_config cfg;
    mods[0] = a; mods[1] = b;
    memset(&cfg, 0, sizeof cfg);
    cfg.world = world; cfg.num_modules = 2; cfg.modules = mods;
    return pp_mimo_init(&cfg, m, err);
}

/* links of a rank as text "peer:part/parts peer:part/parts" */
static const char *links_text(const pp_mimo *m, int enc, int rank, int op, char *buf, size_t size)
{
    pp_mimo_link l[16];
    int n = 0, i;
    size_t len = 0;
    pp_error err;
    buf[0] = '\0';
    if (pp_mimo_bridge_links(m, enc, rank, op, l, 16, &n, &err) != PP_OK) { snprintf(buf, size, "error: %.200s", err.message); return buf; }
    for (i = 0; i < n; i++) len += (size_t)snprintf(buf + len, size - len, "%s%d:%d/%d", i ? " " : "", l[i].peer, l[i].part, l[i].parts);
    return buf;
}

/* --- module grids ----------------------------------------------------------------------------- */

static void mimo_issue_example_is_non_colocated_on_four_ranks(void)
{
    pp_mimo m;
    pp_error err;
    PP_CHECK_OK(init2(&m, mod("vision", 0, 1, 2, 1), mod("language", 2, 1, 1, 2), 0, &err), &err);
    PP_CHECK_INT(m.world, 4);
    PP_CHECK_INT(m.layout, PP_MIMO_NON_COLOCATED);
    PP_CHECK_INT(m.language, 1);
    PP_CHECK_INT(m.modules[0].size, 2);
    PP_CHECK_INT(m.modules[1].offset, 2);
    PP_CHECK_INT(m.modules[1].grid.size[PP_DIM_PP], 2);
    PP_CHECK_INT(pp_mimo_find(&m, "vision"), 0);
    PP_CHECK_INT(pp_mimo_find(&m, "audio"), -1);
    PP_CHECK_STR(pp_mimo_layout_name(m.layout), "non-colocated");
}

static void mimo_grids_on_the_same_ranks_are_colocated_even_with_other_sizes(void)
{
    pp_mimo m;
    pp_error err;
    /* 4 ranks: vision dp=4, language pp=2 x dp=2 */
    PP_CHECK_OK(init2(&m, mod("vision", 0, 1, 4, 1), mod("language", 0, 1, 2, 2), 0, &err), &err);
    PP_CHECK_INT(m.layout, PP_MIMO_COLOCATED);
    PP_CHECK_INT(m.world, 4);
}

static void mimo_some_coinciding_some_disjoint_is_mixed(void)
{
    pp_mimo_module_config mods[3];
    pp_mimo_config cfg;
    pp_mimo m;
    pp_error err;
    mods[0] = mod("vision", 0, 1, 2, 1); mods[1] = mod("audio", 0, 2, 1, 1); mods[2] = mod("language", 2, 1, 1, 2);
    memset(&cfg, 0, sizeof cfg);
    cfg.num_modules = 3; cfg.modules = mods;
    PP_CHECK_OK(pp_mimo_init(&cfg, &m, &err), &err);
    PP_CHECK_INT(m.layout, PP_MIMO_MIXED);
}

static void mimo_rejects_grids_that_overlap_without_coinciding(void)
{
    pp_mimo m;
    pp_error err;
    PP_CHECK_FAILS(init2(&m, mod("vision", 0, 1, 4, 1), mod("language", 2, 1, 2, 2), 0, &err), &err, PP_EINVAL,
                   "modules vision (ranks 0-3) and language (ranks 2-5) share ranks 2-3 but do not coincide");
    /* same start, different size */
    PP_CHECK_FAILS(init2(&m, mod("vision", 0, 1, 2, 1), mod("language", 0, 1, 1, 4), 0, &err), &err, PP_EINVAL,
                   "modules vision (ranks 0-1) and language (ranks 0-3) share ranks 0-1");
}

static void mimo_rejects_a_rank_in_no_grid(void)
{
    pp_mimo m;
    pp_error err;
    PP_CHECK_FAILS(init2(&m, mod("vision", 0, 1, 2, 1), mod("language", 4, 1, 1, 2), 0, &err), &err, PP_EINVAL,
                   "ranks 2-3 of world=6 belong to no module grid (vision: ranks 0-1, language: ranks 4-5)");
    PP_CHECK_FAILS(init2(&m, mod("vision", 0, 1, 2, 1), mod("language", 2, 1, 1, 2), 5, &err), &err, PP_EINVAL,
                   "rank 4 of world=5 belongs to no module grid");
    PP_CHECK_FAILS(init2(&m, mod("vision", 1, 1, 2, 1), mod("language", 3, 1, 1, 2), 0, &err), &err, PP_EINVAL,
                   "rank 0 of world=5 belongs to no module grid");
}

static void mimo_rejects_a_grid_past_the_world(void)
{
    pp_mimo m;
    pp_error err;
    PP_CHECK_FAILS(init2(&m, mod("vision", 0, 1, 2, 1), mod("language", 2, 1, 1, 2), 3, &err), &err, PP_EINVAL,
                   "module language: ranks 2-3 (offset 2 + tp*cp*dp*pp 2) go past world=3");
}

static void mimo_needs_a_language_model_unless_another_is_named(void)
{
    pp_mimo_module_config mods[2];
    pp_mimo_config cfg;
    pp_mimo m;
    pp_error err;
    mods[0] = mod("vision", 0, 1, 2, 1); mods[1] = mod("text", 2, 1, 1, 2);
    memset(&cfg, 0, sizeof cfg);
    cfg.num_modules = 2; cfg.modules = mods;
    PP_CHECK_FAILS(pp_mimo_init(&cfg, &m, &err), &err, PP_EINVAL,
                   "no module named 'language' (the language model): name one so, or set language to the language "
                   "model's name (modules: vision, text)");
    cfg.language = "text";
    PP_CHECK_OK(pp_mimo_init(&cfg, &m, &err), &err);
    PP_CHECK_INT(m.language, 1);
}

static void mimo_rejects_bad_module_configs_naming_the_module(void)
{
    pp_mimo m;
    pp_error err;
    pp_mimo_module_config v = mod("vision", 0, 1, 2, 1);
    PP_CHECK_FAILS(init2(&m, mod("language", 0, 1, 2, 1), mod("language", 2, 1, 1, 2), 0, &err), &err, PP_EINVAL,
                   "module language: the name is used twice (modules[0] and modules[1])");
    PP_CHECK_FAILS(init2(&m, mod("vis ion", 0, 1, 2, 1), mod("language", 2, 1, 1, 2), 0, &err), &err, PP_EINVAL,
                   "modules[0].name='vis ion': must be 1 to 31 characters");
    PP_CHECK_FAILS(init2(&m, mod("", 0, 1, 2, 1), mod("language", 2, 1, 1, 2), 0, &err), &err, PP_EINVAL,
                   "modules[0].name='': must be");
    PP_CHECK_FAILS(init2(&m, mod("vision", -1, 1, 2, 1), mod("language", 2, 1, 1, 2), 0, &err), &err, PP_EINVAL,
                   "module vision: offset=-1: must be >= 0");
    PP_CHECK_FAILS(init2(&m, mod("vision", 0, 1, -2, 1), mod("language", 2, 1, 1, 2), 0, &err), &err, PP_EINVAL,
                   "module vision: dp=-2: must be >= 1 (0 means 1)");
    v.ep = 3;
    PP_CHECK_FAILS(init2(&m, v, mod("language", 2, 1, 1, 2), 0, &err), &err, PP_EINVAL,
                   "module vision: ep=3: must divide cp*dp = 2");
    v.ep = 0;
    snprintf(v.order, sizeof v.order, "tp-ep");
    PP_CHECK_FAILS(init2(&m, v, mod("language", 2, 1, 1, 2), 0, &err), &err, PP_EINVAL,
                   "module vision: order='tp-ep': 'ep' is not a dimension");
    snprintf(v.order, sizeof v.order, "dp-tp");
    PP_CHECK_OK(init2(&m, v, mod("language", 2, 1, 1, 2), 0, &err), &err);
}

static void mimo_order_decides_which_rank_holds_which_coordinates(void)
{
    pp_mimo m;
    pp_error err;
    pp_mimo_module_config l = mod("language", 0, 2, 1, 2);
    int c[PP_DIM_COUNT] = { 1, 0, 0, 0 };
    /* default tp-cp-dp-pp: (tp 1, pp 0) is rank 1; with tp-pp order too; with pp-tp: rank 2 */
    PP_CHECK_OK(init2(&m, mod("vision", 0, 1, 4, 1), l, 0, &err), &err);
    PP_CHECK_INT(pp_mimo_rank(&m, 1, c), 1);
    snprintf(l.order, sizeof l.order, "pp-tp");
    PP_CHECK_OK(init2(&m, mod("vision", 0, 1, 4, 1), l, 0, &err), &err);
    PP_CHECK_INT(pp_mimo_rank(&m, 1, c), 2);
    c[0] = 2;
    PP_CHECK_INT(pp_mimo_rank(&m, 1, c), -1);
}

static void mimo_grid_text_parses_every_key(void)
{
    pp_mimo_module_config c;
    pp_error err;
    PP_CHECK_OK(pp_mimo_module_parse("vision:offset=4,tp=2,cp=1,dp=3,pp=5,ep=3,order=tp-dp-pp", &c, &err), &err);
    PP_CHECK_STR(c.name, "vision");
    PP_CHECK_INT(c.offset, 4); PP_CHECK_INT(c.tp, 2); PP_CHECK_INT(c.cp, 1); PP_CHECK_INT(c.dp, 3);
    PP_CHECK_INT(c.pp, 5); PP_CHECK_INT(c.ep, 3);
    PP_CHECK_STR(c.order, "tp-dp-pp");
    PP_CHECK_OK(pp_mimo_module_parse("language:", &c, &err), &err);
    PP_CHECK_INT(c.tp, 0);
}

static void mimo_grid_text_errors_name_the_part(void)
{
    pp_mimo_module_config c;
    pp_error err;
    PP_CHECK_FAILS(pp_mimo_module_parse("vision", &c, &err), &err, PP_EINVAL, "expected NAME:key=value");
    PP_CHECK_FAILS(pp_mimo_module_parse(":tp=1", &c, &err), &err, PP_EINVAL, "expected NAME:key=value");
    PP_CHECK_FAILS(pp_mimo_module_parse("vision:xp=1", &c, &err), &err, PP_EINVAL, "'xp' is not a key");
    PP_CHECK_FAILS(pp_mimo_module_parse("vision:tp=1,tp=2", &c, &err), &err, PP_EINVAL, "tp appears twice");
    PP_CHECK_FAILS(pp_mimo_module_parse("vision:tp=two", &c, &err), &err, PP_EINVAL, "tp=two: expected a whole number");
    PP_CHECK_FAILS(pp_mimo_module_parse("vision:dp=0", &c, &err), &err, PP_EINVAL, "dp=0: must be from 1");
    PP_CHECK_FAILS(pp_mimo_module_parse("vision:dp=", &c, &err), &err, PP_EINVAL, "dp has no value");
    PP_CHECK_FAILS(pp_mimo_module_parse("vision:dp=2,", &c, &err), &err, PP_EINVAL, "ends with ','");
    PP_CHECK_FAILS(pp_mimo_module_parse("vision:dp", &c, &err), &err, PP_EINVAL, "'dp' is not key=value");
    PP_CHECK_FAILS(pp_mimo_module_parse("vi-sion:dp=1", &c, &err), &err, PP_EINVAL, "name 'vi-sion' must be");
    PP_CHECK_FAILS(pp_mimo_module_parse("vision:offset=99999999999", &c, &err), &err, PP_EINVAL, "offset=");
}

static void mimo_group_colors_split_the_world_into_each_modules_groups(void)
{
    pp_mimo m;
    pp_error err;
    int color, key;
    /* world 6: vision dp=2 on ranks 0-1; language tp=2 x pp=2 on ranks 2-5 (rank 2 + tp + 2 * pp) */
    PP_CHECK_OK(init2(&m, mod("vision", 0, 1, 2, 1), mod("language", 2, 2, 1, 2), 0, &err), &err);
    PP_CHECK_OK(pp_mimo_group_color(&m, 0, 1, PP_GROUP_DP, &color, &key, &err), &err);
    PP_CHECK_INT(color, 0); PP_CHECK_INT(key, 1);
    PP_CHECK_OK(pp_mimo_group_color(&m, 0, 4, PP_GROUP_DP, &color, &key, &err), &err);
    PP_CHECK_INT(color, -1); PP_CHECK_INT(key, 0);
    /* language pp groups: [2 4] and [3 5] -> colors 6 + 0 and 6 + 1 */
    PP_CHECK_OK(pp_mimo_group_color(&m, 1, 5, PP_GROUP_PP, &color, &key, &err), &err);
    PP_CHECK_INT(color, 7); PP_CHECK_INT(key, 1);
    PP_CHECK_OK(pp_mimo_group_color(&m, 1, 2, PP_GROUP_TP, &color, &key, &err), &err);
    PP_CHECK_INT(color, 6); PP_CHECK_INT(key, 0);
    PP_CHECK_FAILS(pp_mimo_group_color(&m, 1, 2, 0, &color, &key, &err), &err, PP_EINVAL, "dims");
    PP_CHECK_FAILS(pp_mimo_group_color(&m, 2, 2, PP_GROUP_TP, &color, &key, &err), &err, PP_EINVAL, "module=2");
}

/* --- rank roles ------------------------------------------------------------------------------- */

static void mimo_roles_give_each_rank_its_modules_and_stages(void)
{
    pp_mimo m;
    pp_mimo_role r;
    pp_error err;
    PP_CHECK_OK(init2(&m, mod("vision", 0, 1, 2, 1), mod("language", 2, 1, 1, 2), 0, &err), &err);
    PP_CHECK_OK(pp_mimo_rank_role(&m, 1, &r, &err), &err);
    PP_CHECK_INT(r.num_modules, 1);
    PP_CHECK_INT(r.modules[0].module, 0);
    PP_CHECK_INT(r.modules[0].coord[PP_DIM_DP], 1);
    PP_CHECK(r.modules[0].is_first_stage && r.modules[0].is_last_stage);
    PP_CHECK_INT(r.path, PP_MIMO_PATH_ENCODER);
    PP_CHECK(r.has_encoder && !r.has_language);
    PP_CHECK_OK(pp_mimo_rank_role(&m, 2, &r, &err), &err);
    PP_CHECK_INT(r.path, PP_MIMO_PATH_LANGUAGE);
    PP_CHECK_INT(r.modules[0].stage, 0);
    PP_CHECK(r.modules[0].is_first_stage && !r.modules[0].is_last_stage);
    PP_CHECK_INT(r.modules[0].local_rank, 0);
    PP_CHECK(pp_mimo_role_module(&r, 0) == NULL);
    PP_CHECK_OK(pp_mimo_rank_role(&m, 3, &r, &err), &err);
    PP_CHECK(!r.modules[0].is_first_stage && r.modules[0].is_last_stage);
    PP_CHECK_FAILS(pp_mimo_rank_role(&m, 4, &r, &err), &err, PP_EINVAL, "rank=4: must be between 0 and world-1 = 3");
    /* colocated: both modules on one rank */
    PP_CHECK_OK(init2(&m, mod("vision", 0, 1, 4, 1), mod("language", 0, 1, 2, 2), 0, &err), &err);
    PP_CHECK_OK(pp_mimo_rank_role(&m, 3, &r, &err), &err);
    PP_CHECK_INT(r.num_modules, 2);
    PP_CHECK_INT(r.path, PP_MIMO_PATH_BOTH);
    PP_CHECK_INT(pp_mimo_role_module(&r, 0)->coord[PP_DIM_DP], 3);
    PP_CHECK_INT(pp_mimo_role_module(&r, 1)->stage, 1);          /* rank 3 = dp 1 + 2 * pp 1 */
    PP_CHECK_INT(pp_mimo_role_module(&r, 1)->coord[PP_DIM_DP], 1);
}

static void mimo_expert_ranks_fold_out_of_cp_and_dp(void)
{
    pp_mimo m;
    pp_mimo_role r;
    pp_error err;
    pp_mimo_module_config l = mod("language", 0, 1, 2, 1);
    l.cp = 2; l.ep = 2;
    /* rank = cp + 2 * dp; q = cp + 2 * dp; ep rank q % 2, expert dp q / 2 */
    PP_CHECK_OK(init2(&m, mod("vision", 0, 1, 4, 1), l, 0, &err), &err);
    PP_CHECK_OK(pp_mimo_rank_role(&m, 3, &r, &err), &err);
    PP_CHECK_INT(pp_mimo_role_module(&r, 1)->ep_rank, 1);
    PP_CHECK_INT(pp_mimo_role_module(&r, 1)->expert_dp_rank, 1);
    PP_CHECK_OK(pp_mimo_rank_role(&m, 2, &r, &err), &err);
    PP_CHECK_INT(pp_mimo_role_module(&r, 1)->ep_rank, 0);
    PP_CHECK_INT(pp_mimo_role_module(&r, 1)->expert_dp_rank, 1);
}

/* --- bridges ---------------------------------------------------------------------------------- */

static void mimo_bridge_fan_in_concatenates_encoder_replicas_in_dp_order(void)
{
    pp_mimo m;
    pp_error err;
    char b[256];
    PP_CHECK_OK(init2(&m, mod("vision", 0, 1, 2, 1), mod("language", 2, 1, 1, 2), 0, &err), &err);
    PP_CHECK_STR(links_text(&m, 0, 2, PP_OP_RECV_F, b, sizeof b), "0:0/2 1:1/2");
    PP_CHECK_STR(links_text(&m, 0, 0, PP_OP_SEND_F, b, sizeof b), "2:0/1");
    PP_CHECK_STR(links_text(&m, 0, 1, PP_OP_SEND_F, b, sizeof b), "2:0/1");
    PP_CHECK_STR(links_text(&m, 0, 2, PP_OP_SEND_B, b, sizeof b), "0:0/2 1:1/2");
    PP_CHECK_STR(links_text(&m, 0, 1, PP_OP_RECV_B, b, sizeof b), "2:0/1");
    PP_CHECK_STR(links_text(&m, 0, 3, PP_OP_RECV_F, b, sizeof b), "");   /* not the first stage */
    PP_CHECK_STR(links_text(&m, 0, 2, PP_OP_SEND_F, b, sizeof b), "");   /* not an encoder rank */
}

static void mimo_bridge_fan_out_splits_an_encoder_output_over_language_replicas(void)
{
    pp_mimo m;
    pp_error err;
    char b[256];
    /* vision on rank 0 (dp 1), language dp 2 on ranks 1, 2 */
    PP_CHECK_OK(init2(&m, mod("vision", 0, 1, 1, 1), mod("language", 1, 1, 2, 1), 0, &err), &err);
    PP_CHECK_STR(links_text(&m, 0, 0, PP_OP_SEND_F, b, sizeof b), "1:0/2 2:1/2");
    PP_CHECK_STR(links_text(&m, 0, 2, PP_OP_RECV_F, b, sizeof b), "0:0/1");
    PP_CHECK_STR(links_text(&m, 0, 2, PP_OP_SEND_B, b, sizeof b), "0:0/1");
    PP_CHECK_STR(links_text(&m, 0, 0, PP_OP_RECV_B, b, sizeof b), "1:0/2 2:1/2");
    /* fan-out 2 from dp 2 to dp 4: replica 1 feeds language replicas 2 and 3 */
    PP_CHECK_OK(init2(&m, mod("vision", 0, 1, 2, 1), mod("language", 2, 1, 4, 1), 0, &err), &err);
    PP_CHECK_STR(links_text(&m, 0, 1, PP_OP_SEND_F, b, sizeof b), "4:0/2 5:1/2");
}

static void mimo_bridge_pairs_tensor_parallel_ranks_modulo_the_other_side(void)
{
    pp_mimo m;
    pp_error err;
    char b[256];
    /* vision tp=2 on ranks 0,1; language tp=4 on ranks 2..5 */
    PP_CHECK_OK(init2(&m, mod("vision", 0, 2, 1, 1), mod("language", 2, 4, 1, 1), 0, &err), &err);
    PP_CHECK_STR(links_text(&m, 0, 0, PP_OP_SEND_F, b, sizeof b), "2:0/1 4:0/1");
    PP_CHECK_STR(links_text(&m, 0, 1, PP_OP_SEND_F, b, sizeof b), "3:0/1 5:0/1");
    PP_CHECK_STR(links_text(&m, 0, 5, PP_OP_RECV_F, b, sizeof b), "1:0/1");
    /* gradients: encoder tp t gets them from language tp t % 4 */
    PP_CHECK_STR(links_text(&m, 0, 2, PP_OP_SEND_B, b, sizeof b), "0:0/1");
    PP_CHECK_STR(links_text(&m, 0, 4, PP_OP_SEND_B, b, sizeof b), "");
    PP_CHECK_STR(links_text(&m, 0, 1, PP_OP_RECV_B, b, sizeof b), "3:0/1");
}

static void mimo_bridge_rejects_dp_sizes_that_do_not_divide_and_split_sequences(void)
{
    pp_mimo m;
    pp_error err;
    pp_mimo_link l[4];
    int n;
    pp_mimo_module_config v = mod("vision", 0, 1, 1, 1);
    PP_CHECK_OK(init2(&m, mod("vision", 0, 1, 3, 1), mod("language", 3, 1, 2, 1), 0, &err), &err);
    PP_CHECK_FAILS(pp_mimo_bridge_links(&m, 0, 0, PP_OP_SEND_F, l, 4, &n, &err), &err, PP_EINVAL,
                   "bridge vision -> language: dp=3 and dp=2: one must be a multiple of the other");
    v.cp = 2;
    PP_CHECK_OK(init2(&m, v, mod("language", 2, 1, 1, 1), 0, &err), &err);
    PP_CHECK_FAILS(pp_mimo_bridge_links(&m, 0, 0, PP_OP_SEND_F, l, 4, &n, &err), &err, PP_EUNSUPPORTED,
                   "cp=2 on vision: the bridge does not split sequences");
    PP_CHECK_OK(init2(&m, mod("vision", 0, 1, 2, 1), mod("language", 2, 1, 1, 2), 0, &err), &err);
    PP_CHECK_FAILS(pp_mimo_bridge_links(&m, 0, 2, PP_OP_RECV_F, l, 1, &n, &err), &err, PP_EINVAL,
                   "capacity=1: rank 2 has 2 RECV_F links");
    PP_CHECK_OK(pp_mimo_bridge_links(&m, 0, 2, PP_OP_RECV_F, NULL, 0, &n, &err), &err);
    PP_CHECK_INT(n, 2);
    PP_CHECK_FAILS(pp_mimo_bridge_links(&m, 1, 2, PP_OP_RECV_F, l, 4, &n, &err), &err, PP_EINVAL, "is the language model");
    PP_CHECK_FAILS(pp_mimo_bridge_links(&m, 0, 2, PP_OP_F, l, 4, &n, &err), &err, PP_EINVAL, "op=0: must be");
}

/* --- the pipeline and its physical programs ------------------------------------------------------ */

static int count_ops(const pp_mimo_programs *p, int rank, int op, int peer)
{
    int i, n = 0;
    for (i = 0; i < p->length[rank]; i++) n += p->ops[rank][i].op == op && (peer < 0 || p->ops[rank][i].peer == peer);
    return n;
}

static void mimo_non_colocated_pipeline_puts_the_encoder_before_the_language_model(void)
{
    pp_mimo m;
    pp_error err;
    pp_mimo_pipeline *pl = NULL;
    pp_mimo_pipeline_config pc;
    int mod_, ms, i;
    PP_CHECK_OK(init2(&m, mod("vision", 0, 1, 2, 1), mod("language", 2, 1, 1, 2), 0, &err), &err);
    memset(&pc, 0, sizeof pc);
    pc.mb = 4;
    PP_CHECK_OK(pp_mimo_pipeline_create(&m, &pc, &pl, &err), &err);
    if (!pl) return;
    PP_CHECK_INT(pl->schedule->pp, 3);
    PP_CHECK_INT(pl->schedule->kind, PP_1F1B);
    PP_CHECK_INT(pl->encoder, 0);
    PP_CHECK_INT(pp_mimo_pipeline_rank(pl, 0), 0);
    PP_CHECK_INT(pp_mimo_pipeline_rank(pl, 1), 0);
    PP_CHECK_INT(pp_mimo_pipeline_rank(pl, 2), 1);
    PP_CHECK_INT(pp_mimo_pipeline_rank(pl, 3), 2);
    PP_CHECK_OK(pp_mimo_pipeline_stage(pl, 1, &mod_, &ms, &err), &err);
    PP_CHECK_INT(mod_, 1); PP_CHECK_INT(ms, 0);
    PP_CHECK_FAILS(pp_mimo_pipeline_stage(pl, 3, &mod_, &ms, &err), &err, PP_EINVAL, "stage=3: must be between 0 and 2");
    /* rank 2 receives each microbatch's input twice (parts 0 and 1 of 2, in one group) and sends the
     * gradient back twice; ranks 0 and 1 run the same program with their own peer */
    PP_CHECK_INT(count_ops(pl->programs, 2, PP_OP_RECV_F, 0), 4);
    PP_CHECK_INT(count_ops(pl->programs, 2, PP_OP_RECV_F, 1), 4);
    PP_CHECK_INT(count_ops(pl->programs, 2, PP_OP_SEND_B, 1), 4);
    PP_CHECK_INT(count_ops(pl->programs, 0, PP_OP_SEND_F, 2), 4);
    PP_CHECK_INT(pl->programs->length[0], pl->programs->length[1]);
    for (i = 0; i + 1 < pl->programs->length[2]; i++) {
        pp_mimo_op a = pl->programs->ops[2][i], b2 = pl->programs->ops[2][i + 1];
        if (a.op == PP_OP_RECV_F && a.peer == 0) {
            PP_CHECK(b2.op == PP_OP_RECV_F && b2.peer == 1 && b2.group == a.group && b2.mb == a.mb);
            PP_CHECK_INT(a.part, 0); PP_CHECK_INT(b2.part, 1); PP_CHECK_INT(b2.parts, 2);
        }
    }
    {
        char txt[128];
        pp_mimo_op o = pl->programs->ops[2][0];
        pp_mimo_op_format(&m, o, txt, sizeof txt);
        PP_CHECK_STR(txt, "RECV_F language.0 mb0 from rank 0 [part 0 of 2]");
    }
    pp_mimo_pipeline_free(pl);
}

/* Every layout of this sweep builds a validated pipeline whose physical programs check out. */
static void mimo_pipelines_check_out_over_kinds_and_grids(void)
{
    static const pp_schedule_kind kinds[] = { PP_GPIPE, PP_1F1B, PP_ZB_H1, PP_ZB_H2 };
    static const int grids[][8] = {
        /* vision tp, dp, pp, language tp, dp, pp, colocated */
        { 1, 2, 1, 1, 1, 2, 0 }, { 1, 1, 1, 1, 2, 1, 0 }, { 1, 2, 2, 1, 1, 2, 0 }, { 2, 2, 1, 1, 1, 3, 0 },
        { 1, 4, 1, 2, 2, 2, 0 }, { 2, 1, 2, 4, 1, 1, 0 }, { 1, 4, 1, 1, 2, 2, 1 }, { 1, 2, 1, 1, 2, 1, 1 },
        { 2, 2, 1, 1, 2, 2, 1 }, { 1, 8, 1, 2, 1, 4, 1 },
    };
    size_t g, k;
    for (g = 0; g < sizeof grids / sizeof grids[0]; g++) {
        const int *x = grids[g];
        int nv = x[0] * x[1] * x[2];
        for (k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
            pp_mimo m;
            pp_error err;
            pp_mimo_pipeline *pl = NULL;
            pp_mimo_pipeline_config pc;
            PP_CHECK_OK(init2(&m, mod("vision", 0, x[0], x[1], x[2]), mod("language", x[6] ? 0 : nv, x[3], x[4], x[5]), 0,
                              &err), &err);
            memset(&pc, 0, sizeof pc);
            pc.kind = kinds[k];
            pc.mb = 4;
            PP_CHECK_OK(pp_mimo_pipeline_create(&m, &pc, &pl, &err), &err);
            PP_CHECK_OK(pl ? pp_mimo_check(pl->programs, &err) : PP_EINVAL, &err);
            pp_mimo_pipeline_free(pl);
        }
    }
}

static pp_mimo_op comm(int op, int peer, int group, int mb)
{
    pp_mimo_op o;
    memset(&o, 0, sizeof o);
    o.op = op; o.peer = peer; o.group = group; o.mb = mb; o.parts = 1;
    o.tag = pp_transfer_tag(PP_OP_SEND_F, 0, mb, 0);
    return o;
}

static void mimo_check_finds_ranks_that_wait_for_each_other(void)
{
    /* both ranks receive first, in a group of its own, then send: a rendezvous deadlock */
    pp_mimo_op r0[2], r1[2];
    pp_mimo_op *ops[2];
    int len[2] = { 2, 2 };
    pp_mimo_programs p;
    pp_error err;
    r0[0] = comm(PP_OP_RECV_F, 1, 0, 0); r0[1] = comm(PP_OP_SEND_F, 1, 1, 0);
    r1[0] = comm(PP_OP_RECV_F, 0, 0, 0); r1[1] = comm(PP_OP_SEND_F, 0, 1, 0);
    ops[0] = r0; ops[1] = r1;
    p.world = 2; p.length = len; p.ops = ops;
    PP_CHECK_FAILS(pp_mimo_check(&p, &err), &err, PP_EDEADLOCK,
                   "the programs deadlock: rank 0 at position 0 waits for RECV_F module0.0 mb0 from rank 1, but rank 1 "
                   "is at position 0");
    /* posted as one group each, the same transfers finish */
    r0[1].group = 0; r1[1].group = 0;
    PP_CHECK_OK(pp_mimo_check(&p, &err), &err);
}

static void mimo_check_finds_a_send_without_its_receive(void)
{
    pp_mimo_op r0[2], r1[1];
    pp_mimo_op *ops[2];
    int len[2] = { 2, 1 };
    pp_mimo_programs p;
    pp_error err;
    r0[0] = comm(PP_OP_SEND_F, 1, 0, 0); r0[1] = comm(PP_OP_SEND_F, 1, 1, 1);
    r1[0] = comm(PP_OP_RECV_F, 0, 0, 0);
    ops[0] = r0; ops[1] = r1;
    p.world = 2; p.length = len; p.ops = ops;
    PP_CHECK_FAILS(pp_mimo_check(&p, &err), &err, PP_EINVALID_SCHEDULE,
                   "rank 0 position 1 (SEND_F module0.0 mb1 to rank 1): no matching receive on rank 1");
    r0[1].peer = 5;
    PP_CHECK_FAILS(pp_mimo_check(&p, &err), &err, PP_EINVAL, "peer=5 is not a rank of world=2");
}

static void mimo_pipeline_rejects_layouts_it_cannot_run(void)
{
    pp_mimo m;
    pp_error err;
    pp_mimo_pipeline *pl = NULL;
    pp_mimo_pipeline_config pc;
    pp_mimo_module_config mods[3];
    pp_mimo_config cfg;
    memset(&pc, 0, sizeof pc);
    pc.mb = 4;
    PP_CHECK_OK(init2(&m, mod("vision", 0, 1, 1, 2), mod("language", 0, 1, 2, 1), 0, &err), &err);
    PP_CHECK_FAILS(pp_mimo_pipeline_create(&m, &pc, &pl, &err), &err, PP_EUNSUPPORTED,
                   "module vision: pp=2: a colocated encoder runs outside the language model's pipeline and needs pp=1");
    mods[0] = mod("vision", 0, 1, 2, 1); mods[1] = mod("audio", 2, 1, 1, 1); mods[2] = mod("language", 3, 1, 1, 2);
    memset(&cfg, 0, sizeof cfg);
    cfg.num_modules = 3; cfg.modules = mods;
    PP_CHECK_OK(pp_mimo_init(&cfg, &m, &err), &err);
    PP_CHECK_FAILS(pp_mimo_pipeline_create(&m, &pc, &pl, &err), &err, PP_EUNSUPPORTED,
                   "non-colocated with 3 modules (vision, audio, language): a pipeline holds one encoder");
    mods[1] = mod("audio", 0, 2, 1, 1); mods[2] = mod("language", 2, 1, 1, 2);
    PP_CHECK_OK(pp_mimo_init(&cfg, &m, &err), &err);
    PP_CHECK_FAILS(pp_mimo_pipeline_create(&m, &pc, &pl, &err), &err, PP_EUNSUPPORTED, "layout mixed");
    PP_CHECK_OK(init2(&m, mod("vision", 0, 1, 2, 1), mod("language", 2, 1, 1, 2), 0, &err), &err);
    pc.kind = PP_ZBV;
    PP_CHECK_FAILS(pp_mimo_pipeline_create(&m, &pc, &pl, &err), &err, PP_EUNSUPPORTED, "one stage per rank");
    pc.kind = PP_1F1B; pc.mb = 0;
    PP_CHECK_FAILS(pp_mimo_pipeline_create(&m, &pc, &pl, &err), &err, PP_EINVAL, "mb=0: must be at least 1");
    PP_CHECK(pl == NULL);
}

static void mimo_colocated_programs_bridge_around_the_language_pipeline(void)
{
    pp_mimo m;
    pp_error err;
    pp_mimo_pipeline *pl = NULL;
    pp_mimo_pipeline_config pc;
    const pp_mimo_programs *p;
    PP_CHECK_OK(init2(&m, mod("vision", 0, 1, 2, 1), mod("language", 0, 1, 1, 2), 0, &err), &err);
    memset(&pc, 0, sizeof pc);
    pc.mb = 3;
    PP_CHECK_OK(pp_mimo_pipeline_create(&m, &pc, &pl, &err), &err);
    if (!pl) return;
    PP_CHECK_INT(pl->encoder, -1);
    PP_CHECK_INT(pl->num_bridged, 1);
    PP_CHECK_INT(pl->schedule->pp, 2);
    p = pl->programs;
    /* rank 0 (vision dp 0, language stage 0): 3 encoder forwards, then one group: a send to itself
     * and receives from itself and rank 1 for each microbatch */
    PP_CHECK_INT(p->ops[0][0].op, PP_OP_F);
    PP_CHECK_INT(p->ops[0][0].module, 0);
    PP_CHECK_INT(p->ops[0][3].op, PP_OP_SEND_F);
    PP_CHECK_INT(p->ops[0][3].peer, 0);
    PP_CHECK_INT(count_ops(p, 0, PP_OP_RECV_F, 1), 3);
    /* rank 1 (vision dp 1, language stage 1): its encoder output to rank 0, the pipeline's
     * gradients to rank 0, the bridge's gradients from rank 0 */
    PP_CHECK_INT(count_ops(p, 1, PP_OP_SEND_F, 0), 3);
    PP_CHECK_INT(count_ops(p, 1, PP_OP_SEND_B, 0), 3);
    PP_CHECK_INT(count_ops(p, 1, PP_OP_RECV_B, 0), 3);
    PP_CHECK_INT(p->ops[1][p->length[1] - 1].op, PP_OP_B);
    pp_mimo_pipeline_free(pl);
}

/* --- gradients ---------------------------------------------------------------------------------- */

static void mimo_each_gradient_is_counted_on_exactly_one_replica(void)
{
    pp_mimo m;
    pp_error err;
    pp_mimo_module_config l = mod("language", 0, 2, 2, 1);
    int r;
    l.ep = 2;
    /* language tp=2 x dp=2 on ranks 0..3: rank = tp + 2 * dp */
    PP_CHECK_OK(init2(&m, mod("vision", 0, 1, 4, 1), l, 0, &err), &err);
    for (r = 0; r < 4; r++) {
        int t = r % 2, d = r / 2;
        PP_CHECK_INT(pp_mimo_grad_counted(&m, 1, r, 0), d == 0);
        PP_CHECK_INT(pp_mimo_grad_counted(&m, 1, r, PP_MIMO_GRAD_TP_REPLICATED), d == 0 && t == 0);
        PP_CHECK_INT(pp_mimo_grad_counted(&m, 1, r, PP_MIMO_GRAD_EXPERT), 1);   /* ep = dp: each its own experts */
        PP_CHECK_INT(pp_mimo_grad_counted(&m, 1, r, PP_MIMO_GRAD_EXPERT | PP_MIMO_GRAD_TP_REPLICATED), t == 0);
        PP_CHECK_INT(pp_mimo_grad_counted(&m, 1, r, PP_MIMO_GRAD_SHARED), 0);
        PP_CHECK_INT(pp_mimo_grad_counted(&m, 0, r, 0), r == 0);
    }
    PP_CHECK_INT(pp_mimo_grad_counted(&m, 1, 4, 0), -1);
    PP_CHECK_INT(pp_mimo_grad_counted(&m, 2, 0, 0), -1);
}

typedef struct norm_case { pp_mimo m; pp_mimo_norm out[4]; double sumsq[4][PP_MIMO_MAX_MODULES]; } norm_case;

static pp_status norm_rank(void *user, int rank, pp_transport *t, pp_error *err)
{
    norm_case *c = (norm_case *)user;
    /* vision dp=2 on ranks 0,1: both replicas hold [3, 4] (|.|^2 = 25, counted once);
     * language pp=2: rank 2 [1, 2, 2] (9), rank 3 [12] (144) plus a tied copy of rank 2's
     * embedding [1, 2] that must not count */
    static const float v[2] = { 3, 4 }, l2[3] = { 1, 2, 2 }, l3[1] = { 12 }, tied[2] = { 1, 2 };
    pp_mimo_grad g[2];
    int n = 1;
    pp_status s;
    memset(g, 0, sizeof g);
    memset(c->sumsq[rank], 0, sizeof c->sumsq[rank]);
    if (rank < 2) { g[0].module = 0; g[0].grad = v; g[0].count = 2; }
    else if (rank == 2) { g[0].module = 1; g[0].grad = l2; g[0].count = 3; }
    else {
        g[0].module = 1; g[0].grad = l3; g[0].count = 1;
        g[1].module = 1; g[1].grad = tied; g[1].count = 2; g[1].flags = PP_MIMO_GRAD_SHARED; n = 2;
    }
    s = pp_mimo_grad_sumsq(&c->m, rank, g, n, c->sumsq[rank], err);
    if (s != PP_OK) return s;
    return pp_mimo_grad_norm(&c->m, t, c->sumsq[rank], 1.0, 10.0, &c->out[rank], err);
}

static void mimo_global_norm_counts_dp_replicas_and_tied_copies_once(void)
{
    norm_case *c = (norm_case *)calloc(1, sizeof *c);
    pp_error err;
    int r;
    PP_CHECK_OK(init2(&c->m, mod("vision", 0, 1, 2, 1), mod("language", 2, 1, 1, 2), 0, &err), &err);
    PP_CHECK_OK(pp_threads_run(4, norm_rank, c, NULL, NULL, &err), &err);
    PP_CHECK_NEAR(c->sumsq[1][0], 0.0, 0);       /* dp replica 1 adds nothing */
    for (r = 0; r < 4; r++) {
        PP_CHECK_NEAR(c->out[r].norm, sqrt(178.0), 1e-12);
        PP_CHECK_NEAR(c->out[r].module_norm[0], 5.0, 1e-12);
        PP_CHECK_NEAR(c->out[r].module_norm[1], sqrt(153.0), 1e-12);
        PP_CHECK_NEAR(c->out[r].clip, 1.0 / (sqrt(178.0) + 1e-6), 1e-12);
        PP_CHECK_INT(c->out[r].finite, 1);
    }
    free(c);
}

static void mimo_norm_inputs_are_checked(void)
{
    pp_mimo m;
    pp_error err;
    pp_mimo_grad g;
    double s[PP_MIMO_MAX_MODULES] = { 0 };
    float x[2] = { 1, 2 };
    PP_CHECK_OK(init2(&m, mod("vision", 0, 1, 2, 1), mod("language", 2, 1, 1, 2), 0, &err), &err);
    memset(&g, 0, sizeof g);
    g.module = 1; g.grad = x; g.count = 2;
    PP_CHECK_FAILS(pp_mimo_grad_sumsq(&m, 0, &g, 1, s, &err), &err, PP_EINVAL,
                   "grads[0]: rank 0 does not run module language (ranks 2-3)");
    g.flags = 8;
    PP_CHECK_FAILS(pp_mimo_grad_sumsq(&m, 2, &g, 1, s, &err), &err, PP_EINVAL, "grads[0].flags=0x8: unknown bits");
    g.flags = 0; g.module = 5;
    PP_CHECK_FAILS(pp_mimo_grad_sumsq(&m, 2, &g, 1, s, &err), &err, PP_EINVAL, "grads[0].module=5");
    g.module = 1; g.grad = NULL;
    PP_CHECK_FAILS(pp_mimo_grad_sumsq(&m, 2, &g, 1, s, &err), &err, PP_EINVAL, "grads[0].grad: NULL for 2 values");
}

typedef struct sum_case { float v[3][5]; pp_status st[3]; pp_error err[3]; } sum_case;

static pp_status sum_rank(void *user, int rank, pp_transport *t, pp_error *err)
{
    sum_case *c = (sum_case *)user;
    int members[3] = { 2, 0, 1 }, k, bad[2] = { 0, 0 };
    for (k = 0; k < 5; k++) c->v[rank][k] = (float)(rank + 1) * 0.1f + (float)k;
    if (pp_mimo_group_sum(t, members, 3, c->v[rank], 5, 3, 10.0, err) != PP_OK) return err->status;
    c->st[rank] = pp_mimo_group_sum(t, bad, 2, c->v[rank], 5, 3, 10.0, &c->err[rank]);
    return PP_OK;
}

static void mimo_group_sum_gives_every_member_identical_sums(void)
{
    sum_case *c = (sum_case *)calloc(1, sizeof *c);
    pp_error err;
    int k, r;
    PP_CHECK_OK(pp_threads_run(3, sum_rank, c, NULL, NULL, &err), &err);
    for (k = 0; k < 5; k++) {
        /* in member order 2, 0, 1 */
        float want = 0.0f;
        want += 0.3f + (float)k; want += 0.1f + (float)k; want += 0.2f + (float)k;
        for (r = 0; r < 3; r++) PP_CHECK(memcmp(&c->v[r][k], &want, sizeof want) == 0);
    }
    PP_CHECK_INT(c->st[1], PP_EINVAL);
    PP_CHECK_CONTAINS(c->err[1].message, "members[1]=0: appears twice");
    free(c);
}

/* --- the transport of a pipeline rank ------------------------------------------------------------ */

typedef struct wrap_case { const pp_mimo_pipeline *pl; float red[4][2]; pp_status post[4]; pp_error err[4]; } wrap_case;

static pp_status wrap_rank(void *user, int rank, pp_transport *t, pp_error *err)
{
    wrap_case *c = (wrap_case *)user;
    pp_mimo_transport *mt = NULL;
    pp_transport lt;
    pp_status s = pp_mimo_transport_create(c->pl, rank, t, &mt, &lt, err);
    if (s != PP_OK) return s;
    /* every rank adds (1, its pipeline stage): each stage counts once */
    c->red[rank][0] = 1.0f;
    c->red[rank][1] = (float)lt.rank;
    s = lt.all_reduce(lt.user, c->red[rank], 2, 10.0, err);
    if (s == PP_OK && rank == 2) {
        /* a tensor of 9 bytes does not split into 2 parts along the batch */
        char buf[9];
        pp_transfer x;
        void *h = NULL;
        memset(&x, 0, sizeof x);
        x.is_send = 0; x.peer = 0; x.buf = buf; x.bytes = 9;
        c->post[rank] = lt.post(lt.user, &x, 1, &h, &c->err[rank]);
    }
    pp_mimo_transport_free(mt);
    return s;
}

static void mimo_transport_counts_each_stage_once_and_splits_only_whole_parts(void)
{
    pp_mimo m;
    pp_error err;
    pp_mimo_pipeline *pl = NULL;
    pp_mimo_pipeline_config pc;
    wrap_case *c = (wrap_case *)calloc(1, sizeof *c);
    int r;
    PP_CHECK_OK(init2(&m, mod("vision", 0, 1, 2, 1), mod("language", 2, 1, 1, 2), 0, &err), &err);
    memset(&pc, 0, sizeof pc);
    pc.mb = 2;
    PP_CHECK_OK(pp_mimo_pipeline_create(&m, &pc, &pl, &err), &err);
    c->pl = pl;
    PP_CHECK_OK(pp_threads_run(4, wrap_rank, c, NULL, NULL, &err), &err);
    for (r = 0; r < 4; r++) {
        PP_CHECK_NEAR(c->red[r][0], 3.0, 0);        /* three stages, though four ranks */
        PP_CHECK_NEAR(c->red[r][1], 0 + 1 + 2, 0);
    }
    PP_CHECK_INT(c->post[2], PP_EINVAL);
    PP_CHECK_CONTAINS(c->err[2].message, "of 9 bytes: does not split into 2 equal parts along the batch");
    pp_mimo_pipeline_free(pl);
    free(c);
}

/* --- training: the threads run equals the one-process run ------------------------------------- */

static void train_and_compare(pp_mimo_module_config v, pp_mimo_module_config l, int colocated, pp_schedule_kind kind)
{
    pp_mimo m;
    pp_error err;
    pp_mimo_pipeline *pl = NULL;
    pp_mimo_pipeline_config pc;
    mm_job job;
    mm_params ref, refg;
    mm_step_result res[MM_MAX_STEPS];
    int s, r;
    PP_CHECK_OK(init2(&m, v, l, 0, &err), &err);
    PP_CHECK_INT(m.layout, colocated ? PP_MIMO_COLOCATED : PP_MIMO_NON_COLOCATED);
    memset(&pc, 0, sizeof pc);
    pc.kind = kind;
    pc.mb = 4;
    PP_CHECK_OK(pp_mimo_pipeline_create(&m, &pc, &pl, &err), &err);
    if (!pl) return;
    memset(&job, 0, sizeof job);
    job.pl = pl;
    job.cfg.mb = 4; job.cfg.rows = 8; job.cfg.lr = 0.5f; job.cfg.max_norm = 0.25f;
    job.steps = 3;
    job.vision = 0; job.language = 1;
    job.timeout_s = 20;
    mm_init(&ref);
    for (s = 0; s < job.steps; s++) mm_reference_step(&ref, &job.cfg, s, &res[s], &refg);
    PP_CHECK_OK(mm_run_threads(&job, colocated, &err), &err);
    for (r = 0; r < m.world; r++) {
        for (s = 0; s < job.steps; s++) {
            PP_CHECK_NEAR(job.loss[r][s], res[s].loss, 1e-6);
            PP_CHECK_NEAR(job.norm[r][s], res[s].norm, 1e-6 * res[s].norm);
            PP_CHECK_NEAR(job.clip[r][s], res[s].clip, 1e-5);
        }
        PP_CHECK_MSG(mm_max_param_diff(&job, r, &ref) < 1e-5, "rank %d: weights differ from the one-process run by %g",
                     r, mm_max_param_diff(&job, r, &ref));
    }
    PP_CHECK(res[0].clip < 1.0);     /* the clip was exercised */
    mm_job_free(&job);
    pp_mimo_pipeline_free(pl);
}

static void mimo_non_colocated_fan_in_trains_like_one_process(void)
{
    /* the issue's layout: vision dp=2 on ranks 0,1; language pp=2 on ranks 2,3 */
    train_and_compare(mod("vision", 0, 1, 2, 1), mod("language", 2, 1, 1, 2), 0, PP_1F1B);
}

static void mimo_non_colocated_fan_out_and_encoder_pipeline_train_like_one_process(void)
{
    train_and_compare(mod("vision", 0, 1, 1, 1), mod("language", 1, 1, 2, 1), 0, PP_GPIPE);
    train_and_compare(mod("vision", 0, 1, 2, 2), mod("language", 4, 1, 1, 2), 0, PP_1F1B);
}

static void mimo_colocated_trains_like_one_process(void)
{
    /* vision dp=2 and language pp=2 on the same two ranks */
    train_and_compare(mod("vision", 0, 1, 2, 1), mod("language", 0, 1, 1, 2), 1, PP_1F1B);
    /* four ranks: vision dp=4 fans in 2:1 to language dp=2 x pp=2 */
    train_and_compare(mod("vision", 0, 1, 4, 1), mod("language", 0, 1, 2, 2), 1, PP_ZB_H1);
}

const pp_test_case pp_suite_mimo[] = {
    PP_TEST(mimo_issue_example_is_non_colocated_on_four_ranks),
    PP_TEST(mimo_grids_on_the_same_ranks_are_colocated_even_with_other_sizes),
    PP_TEST(mimo_some_coinciding_some_disjoint_is_mixed),
    PP_TEST(mimo_rejects_grids_that_overlap_without_coinciding),
    PP_TEST(mimo_rejects_a_rank_in_no_grid),
    PP_TEST(mimo_rejects_a_grid_past_the_world),
    PP_TEST(mimo_needs_a_language_model_unless_another_is_named),
    PP_TEST(mimo_rejects_bad_module_configs_naming_the_module),
    PP_TEST(mimo_order_decides_which_rank_holds_which_coordinates),
    PP_TEST(mimo_group_colors_split_the_world_into_each_modules_groups),
    PP_TEST(mimo_grid_text_parses_every_key),
    PP_TEST(mimo_grid_text_errors_name_the_part),
    PP_TEST(mimo_roles_give_each_rank_its_modules_and_stages),
    PP_TEST(mimo_expert_ranks_fold_out_of_cp_and_dp),
    PP_TEST(mimo_bridge_fan_in_concatenates_encoder_replicas_in_dp_order),
    PP_TEST(mimo_bridge_fan_out_splits_an_encoder_output_over_language_replicas),
    PP_TEST(mimo_bridge_pairs_tensor_parallel_ranks_modulo_the_other_side),
    PP_TEST(mimo_bridge_rejects_dp_sizes_that_do_not_divide_and_split_sequences),
    PP_TEST(mimo_non_colocated_pipeline_puts_the_encoder_before_the_language_model),
    PP_TEST(mimo_pipelines_check_out_over_kinds_and_grids),
    PP_TEST(mimo_check_finds_ranks_that_wait_for_each_other),
    PP_TEST(mimo_check_finds_a_send_without_its_receive),
    PP_TEST(mimo_pipeline_rejects_layouts_it_cannot_run),
    PP_TEST(mimo_colocated_programs_bridge_around_the_language_pipeline),
    PP_TEST(mimo_each_gradient_is_counted_on_exactly_one_replica),
    PP_TEST(mimo_global_norm_counts_dp_replicas_and_tied_copies_once),
    PP_TEST(mimo_norm_inputs_are_checked),
    PP_TEST(mimo_group_sum_gives_every_member_identical_sums),
    PP_TEST(mimo_transport_counts_each_stage_once_and_splits_only_whole_parts),
    PP_TEST(mimo_non_colocated_fan_in_trains_like_one_process),
    PP_TEST(mimo_non_colocated_fan_out_and_encoder_pipeline_train_like_one_process),
    PP_TEST(mimo_colocated_trains_like_one_process),
    {0}
};
