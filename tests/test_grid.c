/* tests/test_grid.c — rank grids: coordinates, groups, orders, and the errors of bad grids.
 * The reference is Megatron-LM: its RankGenerator lays ranks out in the order "tp-cp-ep-dp-pp"
 * (first fastest) and numbers groups and members by decomposing indices over the masked and
 * unmasked dimensions, first dimension fastest. The 16-GPU example is the one in the docstring
 * of Megatron's initialize_model_parallel (tp 2, pp 4, so dp 2).                           */
#include <stdlib.h>
#include "pp_test.h"

static pp_grid make_grid(int world, int tp, int cp, int dp, int pp, const char *order)
{
    pp_grid g;
    pp_error err;
    pp_grid_config cfg;
    memset(&cfg, 0, sizeof cfg);
    memset(&g, 0, sizeof g);
    cfg.world = world; cfg.tp = tp; cfg.cp = cp; cfg.dp = dp; cfg.pp = pp; cfg.order = order;
    PP_CHECK_OK(pp_grid_init(&cfg, &g, &err), &err);
    return g;
}

/* Checks that the groups of `dims` are exactly `expect` (count groups of size members each, in
 * color order, members in index order). */
static void check_groups(const pp_grid *g, unsigned dims, int count, int size, const int *expect)
{
    int members[64], c, k;
    pp_error err;
    PP_CHECK_INT(pp_grid_group_size(g, dims), size);
    for (c = 0; c < count; c++) {
        PP_CHECK_OK(pp_grid_group_members(g, dims, c, members, 64, &err), &err);
        for (k = 0; k < size; k++)
            PP_CHECK_MSG(members[k] == expect[c * size + k], "dims 0x%x group %d member %d: %d, expected %d",
                         dims, c, k, members[k], expect[c * size + k]);
    }
    PP_CHECK_FAILS(pp_grid_group_members(g, dims, count, members, 64, &err), &err, PP_EINVAL, "color=");
}

static void grid_megatron_16_gpus_tp2_pp4_gives_its_documented_groups(void)
{
    pp_grid g = make_grid(16, 2, 0, 0, 4, NULL);
    static const int tp[] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15 };
    static const int dp[] = { 0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15 };
    static const int pp[] = { 0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15 };
    static const int mp[] = { 0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15 };
    PP_CHECK_INT(g.size[PP_DIM_DP], 2);
    check_groups(&g, PP_GROUP_TP, 8, 2, tp);
    check_groups(&g, PP_GROUP_DP, 8, 2, dp);
    check_groups(&g, PP_GROUP_PP, 4, 4, pp);
    check_groups(&g, PP_GROUP_TP | PP_GROUP_PP, 2, 8, mp);
}

static void grid_default_order_puts_tp_fastest_and_pp_slowest(void)
{
    /* rank = tp + 2*cp + 4*dp + 8*pp for tp 2, cp 2, dp 2, pp 2. Rank 13 = 1 + 4 + 8. */
    pp_grid g = make_grid(16, 2, 2, 0, 2, NULL);
    int c[PP_DIM_COUNT];
    char buf[32];
    pp_error err;
    PP_CHECK_OK(pp_grid_coords(&g, 13, c, &err), &err);
    PP_CHECK_INT(c[PP_DIM_TP], 1);
    PP_CHECK_INT(c[PP_DIM_CP], 0);
    PP_CHECK_INT(c[PP_DIM_DP], 1);
    PP_CHECK_INT(c[PP_DIM_PP], 1);
    PP_CHECK_INT(g.stride[PP_DIM_TP], 1);
    PP_CHECK_INT(g.stride[PP_DIM_CP], 2);
    PP_CHECK_INT(g.stride[PP_DIM_DP], 4);
    PP_CHECK_INT(g.stride[PP_DIM_PP], 8);
    pp_grid_order_format(&g, buf, sizeof buf);
    PP_CHECK_STR(buf, "tp-cp-dp-pp");
}

static void grid_dp_cp_group_holds_the_ranks_that_average_gradients(void)
{
    /* world 8 = tp 2 x cp 2 x dp 2: rank = tp + 2*cp + 4*dp. The gradient all-reduce runs over
     * dp x cp (Megatron's "dp-cp" group), which for tp coordinate 0 is ranks 0, 2, 4, 6 with
     * cp varying fastest (it comes first in the order). */
    pp_grid g = make_grid(8, 2, 2, 0, 1, NULL);
    static const int dpcp[] = { 0, 2, 4, 6, 1, 3, 5, 7 };
    static const int cp[] = { 0, 2, 1, 3, 4, 6, 5, 7 };
    static const int dp[] = { 0, 4, 1, 5, 2, 6, 3, 7 };
    pp_grid_group_info info;
    pp_error err;
    check_groups(&g, PP_GROUP_DP | PP_GROUP_CP, 2, 4, dpcp);
    check_groups(&g, PP_GROUP_CP, 4, 2, cp);
    check_groups(&g, PP_GROUP_DP, 4, 2, dp);
    PP_CHECK_OK(pp_grid_group(&g, 5, PP_GROUP_DP | PP_GROUP_CP, &info, &err), &err);
    PP_CHECK_INT(info.color, 1);   /* tp coordinate 1 */
    PP_CHECK_INT(info.index, 2);   /* cp 0, dp 1 -> 0 + 2*1 */
    PP_CHECK_INT(info.size, 4);
    PP_CHECK_INT(info.count, 2);
}

static void grid_custom_order_changes_the_layout(void)
{
    /* order tp-pp-dp (cp of size 1 left out): rank = tp + 2*pp + 4*dp, so the pipeline pairs
     * neighbours two apart and the data-parallel replicas four apart. */
    pp_grid g = make_grid(8, 2, 0, 0, 2, "tp-pp-dp");
    static const int pp[] = { 0, 2, 1, 3, 4, 6, 5, 7 };
    static const int dp[] = { 0, 4, 1, 5, 2, 6, 3, 7 };
    int c[PP_DIM_COUNT];
    char buf[32];
    pp_error err;
    check_groups(&g, PP_GROUP_PP, 4, 2, pp);
    check_groups(&g, PP_GROUP_DP, 4, 2, dp);
    PP_CHECK_OK(pp_grid_coords(&g, 6, c, &err), &err);
    PP_CHECK_INT(c[PP_DIM_TP], 0);
    PP_CHECK_INT(c[PP_DIM_PP], 1);
    PP_CHECK_INT(c[PP_DIM_DP], 1);
    pp_grid_order_format(&g, buf, sizeof buf);
    PP_CHECK_STR(buf, "tp-pp-dp-cp");
}

static void grid_every_rank_is_in_one_group_of_each_mask_at_its_index(void)
{
    pp_grid g = make_grid(24, 2, 3, 0, 2, "pp-tp-dp-cp");
    unsigned dims;
    int rank, members[32];
    pp_error err;
    for (dims = 1; dims <= PP_GROUP_ALL; dims++) {
        for (rank = 0; rank < 24; rank++) {
            pp_grid_group_info info;
            int coord[PP_DIM_COUNT], mc[PP_DIM_COUNT], k, d;
            PP_CHECK_OK(pp_grid_group(&g, rank, dims, &info, &err), &err);
            PP_CHECK_INT(info.size * info.count, 24);
            PP_CHECK_OK(pp_grid_group_members(&g, dims, info.color, members, 32, &err), &err);
            PP_CHECK_INT(members[info.index], rank);
            pp_grid_coords(&g, rank, coord, NULL);
            /* all members agree with the rank outside the mask */
            for (k = 0; k < info.size; k++) {
                pp_grid_coords(&g, members[k], mc, NULL);
                for (d = 0; d < PP_DIM_COUNT; d++)
                    if (!(dims & (1u << d))) PP_CHECK_INT(mc[d], coord[d]);
            }
        }
    }
    for (rank = 0; rank < 24; rank++) {
        int c[PP_DIM_COUNT];
        PP_CHECK_OK(pp_grid_coords(&g, rank, c, &err), &err);
        PP_CHECK_INT(pp_grid_rank(&g, c), rank);
    }
}

static void grid_shift_walks_the_pipeline_and_wraps(void)
{
    pp_grid g = make_grid(16, 2, 0, 0, 4, NULL);   /* pp stride 4 */
    PP_CHECK_INT(pp_grid_shift(&g, 1, PP_DIM_PP, 1), 5);
    PP_CHECK_INT(pp_grid_shift(&g, 13, PP_DIM_PP, 1), 1);
    PP_CHECK_INT(pp_grid_shift(&g, 1, PP_DIM_PP, -1), 13);
    PP_CHECK_INT(pp_grid_shift(&g, 3, PP_DIM_TP, 1), 2);
    PP_CHECK_INT(pp_grid_shift(&g, 16, PP_DIM_PP, 1), -1);
    PP_CHECK_INT(pp_grid_shift(&g, 0, (pp_dim)7, 1), -1);
}

static void grid_rank_of_out_of_range_coordinates_is_minus_one(void)
{
    pp_grid g = make_grid(8, 2, 0, 0, 2, NULL);
    int c[PP_DIM_COUNT] = { 0, 0, 2, 0 };   /* dp is 2: coordinates 0 and 1 */
    PP_CHECK_INT(pp_grid_rank(&g, c), -1);
    c[PP_DIM_DP] = 1;
    PP_CHECK_INT(pp_grid_rank(&g, c), 2);
}

static void grid_one_rank_is_a_valid_grid(void)
{
    pp_grid g = make_grid(1, 0, 0, 0, 0, NULL);
    pp_grid_group_info info;
    pp_error err;
    PP_CHECK_OK(pp_grid_group(&g, 0, PP_GROUP_ALL, &info, &err), &err);
    PP_CHECK_INT(info.size, 1);
    PP_CHECK_INT(info.count, 1);
}

static void grid_sizes_that_do_not_multiply_to_world_are_rejected(void)
{
    pp_grid g;
    pp_error err;
    pp_grid_config cfg = { 6, 4, 0, 0, 0, NULL };
    PP_CHECK_FAILS(pp_grid_init(&cfg, &g, &err), &err, PP_EINVAL, "world=6: must be a multiple of tp*cp*pp = 4");
    cfg.tp = 2; cfg.pp = 2; cfg.dp = 2;   /* 8 != 6 */
    PP_CHECK_FAILS(pp_grid_init(&cfg, &g, &err), &err, PP_EINVAL, "world=6: must equal tp*cp*dp*pp = 8");
    cfg.world = 4; cfg.tp = 8; cfg.pp = 0; cfg.dp = 0;
    PP_CHECK_FAILS(pp_grid_init(&cfg, &g, &err), &err, PP_EINVAL, "tp*cp*pp = 8");
}

static void grid_zero_and_negative_sizes_are_rejected_or_defaulted(void)
{
    pp_grid g;
    pp_error err;
    pp_grid_config cfg = { 4, 0, 0, 0, 0, NULL };
    PP_CHECK_OK(pp_grid_init(&cfg, &g, &err), &err);   /* zero = default: tp cp pp 1, dp 4 */
    PP_CHECK_INT(g.size[PP_DIM_DP], 4);
    cfg.tp = -2;
    PP_CHECK_FAILS(pp_grid_init(&cfg, &g, &err), &err, PP_EINVAL, "tp=-2: must be at least 1");
    cfg.tp = 1; cfg.pp = -1;
    PP_CHECK_FAILS(pp_grid_init(&cfg, &g, &err), &err, PP_EINVAL, "pp=-1");
    cfg.pp = 1; cfg.cp = -3;
    PP_CHECK_FAILS(pp_grid_init(&cfg, &g, &err), &err, PP_EINVAL, "cp=-3");
    cfg.cp = 1; cfg.dp = -1;
    PP_CHECK_FAILS(pp_grid_init(&cfg, &g, &err), &err, PP_EINVAL, "dp=-1");
    cfg.dp = 0; cfg.world = 0;
    PP_CHECK_FAILS(pp_grid_init(&cfg, &g, &err), &err, PP_EINVAL, "world=0: must be at least 1");
    PP_CHECK_FAILS(pp_grid_init(NULL, &g, &err), &err, PP_EINVAL, "must not be NULL");
}

static void grid_bad_orders_name_the_problem(void)
{
    pp_grid g;
    pp_error err;
    pp_grid_config cfg = { 8, 2, 0, 2, 0, "tp-dp-tp-pp" };
    PP_CHECK_FAILS(pp_grid_init(&cfg, &g, &err), &err, PP_EINVAL, "order='tp-dp-tp-pp': 'tp' appears twice");
    cfg.order = "tp-ep-dp-pp";
    PP_CHECK_FAILS(pp_grid_init(&cfg, &g, &err), &err, PP_EINVAL, "'ep' is not a dimension");
    cfg.order = "dp-pp";
    PP_CHECK_FAILS(pp_grid_init(&cfg, &g, &err), &err, PP_EINVAL, "leaves out tp, whose size is 2");
    cfg.order = "tp--pp";
    PP_CHECK_FAILS(pp_grid_init(&cfg, &g, &err), &err, PP_EINVAL, "'' is not a dimension");
    cfg.order = "tpdp";
    PP_CHECK_FAILS(pp_grid_init(&cfg, &g, &err), &err, PP_EINVAL, "is not a dimension");
    cfg.order = "pp-tp";      /* dp is 2 here, so it may not be left out */
    PP_CHECK_FAILS(pp_grid_init(&cfg, &g, &err), &err, PP_EINVAL, "leaves out dp, whose size is 2");
    cfg.world = 4; cfg.order = "pp-tp";   /* dp 1, cp 1: fine, they go slowest */
    PP_CHECK_OK(pp_grid_init(&cfg, &g, &err), &err);
    PP_CHECK_INT(g.stride[PP_DIM_PP], 1);
    PP_CHECK_INT(g.stride[PP_DIM_TP], 2);
}

static void grid_bad_queries_are_rejected(void)
{
    pp_grid g = make_grid(8, 2, 0, 0, 2, NULL);
    pp_grid_group_info info;
    int c[PP_DIM_COUNT], members[2];
    pp_error err;
    PP_CHECK_FAILS(pp_grid_coords(&g, 8, c, &err), &err, PP_EINVAL, "rank=8: must be between 0 and world-1 = 7");
    PP_CHECK_FAILS(pp_grid_coords(&g, -1, c, &err), &err, PP_EINVAL, "rank=-1");
    PP_CHECK_FAILS(pp_grid_group(&g, 0, 0, &info, &err), &err, PP_EINVAL, "dims=0x0");
    PP_CHECK_FAILS(pp_grid_group(&g, 0, 0x10, &info, &err), &err, PP_EINVAL, "dims=0x10");
    PP_CHECK_FAILS(pp_grid_group(&g, 9, PP_GROUP_PP, &info, &err), &err, PP_EINVAL, "rank=9");
    PP_CHECK_FAILS(pp_grid_group_members(&g, PP_GROUP_TP | PP_GROUP_DP, 0, members, 2, &err), &err,
                   PP_EINVAL, "capacity=2: the group has 4 members");
    PP_CHECK_FAILS(pp_grid_group_members(&g, PP_GROUP_PP, -1, members, 2, &err), &err, PP_EINVAL,
                   "color=-1: must be between 0 and 3");
    PP_CHECK_INT(pp_grid_group_size(&g, 0), 0);
}

static void grid_dims_text_round_trips(void)
{
    unsigned dims = 0;
    char buf[32];
    pp_error err;
    PP_CHECK_OK(pp_grid_dims_parse("dp-cp", &dims, &err), &err);
    PP_CHECK_INT(dims, PP_GROUP_DP | PP_GROUP_CP);
    PP_CHECK_INT(pp_grid_dims_format(dims, buf, sizeof buf), 5);
    PP_CHECK_STR(buf, "cp-dp");
    PP_CHECK_OK(pp_grid_dims_parse("pp", &dims, &err), &err);
    PP_CHECK_INT(dims, PP_GROUP_PP);
    pp_grid_dims_format(PP_GROUP_ALL, buf, sizeof buf);
    PP_CHECK_STR(buf, "tp-cp-dp-pp");
    PP_CHECK_FAILS(pp_grid_dims_parse("", &dims, &err), &err, PP_EINVAL, "group=''");
    PP_CHECK_FAILS(pp_grid_dims_parse("tp-xx", &dims, &err), &err, PP_EINVAL, "group='tp-xx': 'xx' is not a dimension");
    PP_CHECK_STR(pp_dim_name(PP_DIM_CP), "cp");
    PP_CHECK_STR(pp_dim_name((pp_dim)9), "?");
}


/* --- placement by speed ------------------------------------------------------------------------ */

static double pl_bottleneck(int n, const double *load, const double *t, const int *rank_of)
{
    double worst = 0;
    int g;
    for (g = 0; g < n; g++) if (load[rank_of[g]] * t[g] > worst) worst = load[rank_of[g]] * t[g];
    return worst;
}

static int pl_fixed(int n, const int *a)
{
    int g, k = 0;
    for (g = 0; g < n; g++) k += a[g] == g;
    return k;
}

/* The least bottleneck over all n! assignments, by brute force (Heap's algorithm), and the most
 * GPUs kept on their own rank by any assignment that reaches it. */
static double pl_brute(int n, const double *load, const double *t, int *most_fixed)
{
    int a[8], c[8], i = 0, k, pass;
    double best = 0;
    for (pass = 0; pass < 2; pass++) {   /* first the bottleneck, then the fixed points at it */
        for (k = 0; k < n; k++) { a[k] = k; c[k] = 0; }
        i = 0;
        if (pass == 0) best = pl_bottleneck(n, load, t, a);
        else *most_fixed = n;   /* the identity: at the bottleneck only if it is optimal */
        if (pass == 1 && pl_bottleneck(n, load, t, a) > best) *most_fixed = -1;
        while (i < n) {
            if (c[i] < i) {
                int j = i % 2 ? c[i] : 0, tmp = a[j];
                a[j] = a[i]; a[i] = tmp;
                if (pass == 0 && pl_bottleneck(n, load, t, a) < best) best = pl_bottleneck(n, load, t, a);
                if (pass == 1 && pl_bottleneck(n, load, t, a) <= best && pl_fixed(n, a) > *most_fixed)
                    *most_fixed = pl_fixed(n, a);
                c[i]++; i = 0;
            } else {
                c[i] = 0; i++;
            }
        }
    }
    return best;
}

/* Two GPUs: rank 1 computes 48 GEMMs a microbatch-block where rank 0 computes 47
 * (block 0 skips its input gradient), and GPU 0 runs 1.2% faster: rank 1 goes to GPU 0. */
static void place_by_speed_puts_the_heavier_rank_on_the_faster_gpu(void)
{
    const double load[2] = { 47, 48 }, fast0[2] = { 1272.8, 1288.5 }, fast1[2] = { 1305.8, 1292.0 };
    int rank_of[2];
    double gain = -1;
    pp_error err;
    PP_CHECK_OK(pp_place_by_speed(2, load, fast0, 0.001, rank_of, &gain, &err), &err);
    PP_CHECK_INT(rank_of[0], 1);
    PP_CHECK_INT(rank_of[1], 0);
    /* before: 48 x 1288.5 on GPU 1; after: max(48 x 1272.8, 47 x 1288.5) */
    PP_CHECK_NEAR(gain, 1 - 48 * 1272.8 / (48 * 1288.5), 1e-12);
    /* GPU 1 faster: rank 1 is already there */
    PP_CHECK_OK(pp_place_by_speed(2, load, fast1, 0.001, rank_of, &gain, &err), &err);
    PP_CHECK(rank_of[0] == 0 && rank_of[1] == 1);
    PP_CHECK_NEAR(gain, 0, 0);
    /* a gain under min_gain keeps the identity: 1.2% is not more than 2% */
    PP_CHECK_OK(pp_place_by_speed(2, load, fast0, 0.02, rank_of, &gain, &err), &err);
    PP_CHECK(rank_of[0] == 0 && rank_of[1] == 1);
    PP_CHECK_NEAR(gain, 0, 0);
}

/* Random loads and times, n = 1..7: the result is a permutation, reaches the brute-force least
 * bottleneck, and keeps as many GPUs on their own rank as any assignment that does; equal loads
 * or equal times keep the identity. Loads come in few distinct values, so that many assignments
 * tie and the fewest-moves choice matters. */
static void place_by_speed_matches_brute_force_and_keeps_ties_in_place(void)
{
    unsigned long long x = 0x9e3779b97f4a7c15ull;
    int n, trial, g;
    pp_error err;
    for (n = 1; n <= 7; n++)
        for (trial = 0; trial < 60; trial++) {
            double load[8], t[8], gain;
            int rank_of[8], seen[8] = { 0 };
            for (g = 0; g < n; g++) {
                x = x * 6364136223846793005ull + 1442695040888963407ull;
                load[g] = trial % 2 ? 1 + (double)((x >> 40) % 3)   /* few distinct loads: many ties */
                                    : 1 + (double)(x >> 40) / (1 << 20) * (trial % 3 ? 1 : 0.001);
                x = x * 6364136223846793005ull + 1442695040888963407ull;
                t[g] = 1 + (double)(x >> 40) / (1 << 22);
            }
            PP_CHECK_OK(pp_place_by_speed(n, load, t, 0, rank_of, &gain, &err), &err);
            for (g = 0; g < n; g++) {
                PP_CHECK(rank_of[g] >= 0 && rank_of[g] < n);
                if (rank_of[g] >= 0 && rank_of[g] < n) seen[rank_of[g]]++;
            }
            for (g = 0; g < n; g++) PP_CHECK_INT(seen[g], 1);
            {
                int most_fixed = -1;
                double best = pl_brute(n, load, t, &most_fixed);
                PP_CHECK_NEAR(pl_bottleneck(n, load, t, rank_of), best, 1e-12);
                PP_CHECK_MSG(pl_fixed(n, rank_of) == most_fixed, "n=%d trial %d: %d GPUs kept, the most at the "
                             "least bottleneck is %d", n, trial, pl_fixed(n, rank_of), most_fixed);
            }
            PP_CHECK(gain >= 0 && gain < 1);
        }
    {
        const double same[4] = { 3, 3, 3, 3 }, t[4] = { 4, 1, 3, 2 }, l[4] = { 5, 1, 9, 2 }, tsame[4] = { 2, 2, 2, 2 };
        int rank_of[4];
        PP_CHECK_OK(pp_place_by_speed(4, same, t, 0, rank_of, NULL, &err), &err);
        for (g = 0; g < 4; g++) PP_CHECK_INT(rank_of[g], g);
        PP_CHECK_OK(pp_place_by_speed(4, l, tsame, 0, rank_of, NULL, &err), &err);
        for (g = 0; g < 4; g++) PP_CHECK_INT(rank_of[g], g);
    }
}

static void place_by_speed_names_the_parameter_it_refuses(void)
{
    const double load[2] = { 1, 2 }, t[2] = { 1, 1 }, bad_t[2] = { 1, 0 }, bad_l[2] = { 1, -1 };
    double nan_t[2] = { 1, 1 };
    int rank_of[2];
    pp_error err;
    nan_t[1] = strtod("nan", NULL);
    PP_CHECK_FAILS(pp_place_by_speed(0, load, t, 0, rank_of, NULL, &err), &err, PP_EINVAL, "n=0: must be at least 1");
    PP_CHECK_FAILS(pp_place_by_speed(2, NULL, t, 0, rank_of, NULL, &err), &err, PP_EINVAL, "must not be NULL");
    PP_CHECK_FAILS(pp_place_by_speed(2, load, bad_t, 0, rank_of, NULL, &err), &err, PP_EINVAL, "gpu_time[1]=0");
    PP_CHECK_FAILS(pp_place_by_speed(2, load, nan_t, 0, rank_of, NULL, &err), &err, PP_EINVAL, "gpu_time[1]=");
    PP_CHECK_FAILS(pp_place_by_speed(2, bad_l, t, 0, rank_of, NULL, &err), &err, PP_EINVAL, "rank_load[1]=-1");
    PP_CHECK_FAILS(pp_place_by_speed(2, load, t, 1, rank_of, NULL, &err), &err, PP_EINVAL, "min_gain=1: must be in [0, 1)");
    PP_CHECK_FAILS(pp_place_by_speed(2, load, t, -0.5, rank_of, NULL, &err), &err, PP_EINVAL, "min_gain=-0.5");
    {   /* out of memory at each allocation in turn: PP_ENOMEM, then the answer (rank 1 to GPU 0) */
        const double fast0[2] = { 1, 2 };
        long k;
        int done = 0;
        for (k = 0; k < 64 && !done; k++) {
            pp_status st;
            pp_test_alloc_countdown = k;
            st = pp_place_by_speed(2, load, fast0, 0, rank_of, NULL, &err);
            pp_test_alloc_countdown = -1;
            if (st == PP_OK) done = 1;
            else PP_CHECK_MSG(st == PP_ENOMEM, "allocation %ld failing gave %s", k, pp_status_name(st));
        }
        PP_CHECK(done && k > 3);
        PP_CHECK(rank_of[0] == 1 && rank_of[1] == 0);
    }
}

/* The embedding group on Megatron's 16-GPU grid (tp 2, pp 4; pipelines [0 4 8 12] [1 5 9 13]
 * [2 6 10 14] [3 7 11 15]): Megatron-LM's embedding group is a pipeline's first and last rank,
 * so rank 0 and rank 12 form one, rank 13 and rank 1 another; middle ranks are in none. With the
 * last stage on pipeline rank 0 (a V placement) the group is that one rank. */
static void embedding_group_is_the_first_and_last_rank_of_the_pipeline(void)
{
    pp_grid g = make_grid(16, 2, 0, 0, 4, NULL);
    int m[2] = { -1, -1 }, n = -1, r;
    pp_error err;
    PP_CHECK_OK(pp_grid_embedding_group(&g, 0, 3, m, &n, &err), &err);
    PP_CHECK(n == 2 && m[0] == 0 && m[1] == 12);
    PP_CHECK_OK(pp_grid_embedding_group(&g, 12, 3, m, &n, &err), &err);
    PP_CHECK(n == 2 && m[0] == 0 && m[1] == 12);
    PP_CHECK_OK(pp_grid_embedding_group(&g, 13, 3, m, &n, &err), &err);
    PP_CHECK(n == 2 && m[0] == 1 && m[1] == 13);
    PP_CHECK_OK(pp_grid_embedding_group(&g, 5, 3, m, &n, &err), &err);
    PP_CHECK_INT(n, 0);
    PP_CHECK_OK(pp_grid_embedding_group(&g, 9, 0, m, &n, &err), &err);   /* V: both ends on pipeline rank 0 */
    PP_CHECK_INT(n, 0);
    PP_CHECK_OK(pp_grid_embedding_group(&g, 1, 0, m, &n, &err), &err);
    PP_CHECK(n == 1 && m[0] == 1);
    /* an end in the middle of the pipeline (uneven placements): pipeline ranks 0 and 2 */
    PP_CHECK_OK(pp_grid_embedding_group(&g, 10, 2, m, &n, &err), &err);
    PP_CHECK(n == 2 && m[0] == 2 && m[1] == 10);
    /* every member of every group names the same group; each pipeline has exactly one */
    for (r = 0; r < 16; r++) {
        int m2[2], n2, k;
        PP_CHECK_OK(pp_grid_embedding_group(&g, r, 3, m, &n, &err), &err);
        PP_CHECK_INT(n, (r < 4 || r >= 12) ? 2 : 0);
        for (k = 0; k < n; k++) {
            PP_CHECK_OK(pp_grid_embedding_group(&g, m[k], 3, m2, &n2, &err), &err);
            PP_CHECK(n2 == n && m2[0] == m[0] && m2[1] == m[1]);
        }
    }
    PP_CHECK_FAILS(pp_grid_embedding_group(&g, 16, 3, m, &n, &err), &err, PP_EINVAL, "rank=16: must be between 0");
    PP_CHECK_FAILS(pp_grid_embedding_group(&g, 0, 4, m, &n, &err), &err, PP_EINVAL,
                   "last_pp_rank=4: must be between 0 and pp-1 = 3");
    PP_CHECK_FAILS(pp_grid_embedding_group(&g, 0, -1, m, &n, &err), &err, PP_EINVAL, "last_pp_rank=-1");
    PP_CHECK_FAILS(pp_grid_embedding_group(&g, 0, 3, NULL, &n, &err), &err, PP_EINVAL, "must not be NULL");
}

const pp_test_case pp_suite_grid[] = {
    PP_TEST(embedding_group_is_the_first_and_last_rank_of_the_pipeline),
    PP_TEST(place_by_speed_puts_the_heavier_rank_on_the_faster_gpu),
    PP_TEST(place_by_speed_matches_brute_force_and_keeps_ties_in_place),
    PP_TEST(place_by_speed_names_the_parameter_it_refuses),
    PP_TEST(grid_megatron_16_gpus_tp2_pp4_gives_its_documented_groups),
    PP_TEST(grid_default_order_puts_tp_fastest_and_pp_slowest),
    PP_TEST(grid_dp_cp_group_holds_the_ranks_that_average_gradients),
    PP_TEST(grid_custom_order_changes_the_layout),
    PP_TEST(grid_every_rank_is_in_one_group_of_each_mask_at_its_index),
    PP_TEST(grid_shift_walks_the_pipeline_and_wraps),
    PP_TEST(grid_rank_of_out_of_range_coordinates_is_minus_one),
    PP_TEST(grid_one_rank_is_a_valid_grid),
    PP_TEST(grid_sizes_that_do_not_multiply_to_world_are_rejected),
    PP_TEST(grid_zero_and_negative_sizes_are_rejected_or_defaulted),
    PP_TEST(grid_bad_orders_name_the_problem),
    PP_TEST(grid_bad_queries_are_rejected),
    PP_TEST(grid_dims_text_round_trips),
    {0}
};
