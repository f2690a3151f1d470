/* tests/test_layers.c — which layers each (pipeline rank, virtual stage) builds.
 *
 * The reference is Megatron-LM:
 *   - get_num_layers_to_build (transformer_block.py) and get_transformer_layer_offset
 *     (transformer_layer.py) for the even, uneven (num_layers_in_first/last_pipeline_stage) and
 *     account_for_embedding/loss_in_pipeline_split forms: transcribed below as megatron_count /
 *     megatron_offset and compared with pp_layers over a grid of settings;
 *   - PipelineParallelLayerLayout (parse_str_to_list, validate_layer_layout, get_layer_offset);
 *   - the hybrid allocation's select_pipeline_segment ('|' segments, vpp_rank * pp + pp_rank);
 *   - --moe-layer-freq as moe_freq_type and get_gpt_decoder_block_spec read it.
 * Hand-worked vectors carry their arithmetic in comments.                                    */
#include <stdlib.h>
#include <time.h>
#include "pp_test.h"

static pp_layers_config config(int num_layers, int pp, int vpp)
{
    pp_layers_config c;
    memset(&c, 0, sizeof c);
    c.num_layers = num_layers; c.pp = pp; c.vpp = vpp;
    return c;
}

static pp_layers *build(const pp_layers_config *cfg)
{
    pp_layers *l = NULL;
    pp_error err;
    PP_CHECK_OK(pp_layers_build(cfg, &l, &err), &err);
    return l;
}

static pp_layers *build_layout(const char *layout, int pp)
{
    pp_layers_config c = config(0, pp, 0);
    c.layout = layout;
    return build(&c);
}

static pp_layers *build_hybrid(const char *pattern, int pp)
{
    pp_layers_config c = config(0, pp, 0);
    c.hybrid = pattern;
    return build(&c);
}

/* stage s must hold global decoder layers [first[s], first[s] + count[s]). */
static void check_ranges(const pp_layers *l, int stages, const int *first, const int *count)
{
    int s, f, n, total = 0;
    pp_error err;
    if (!l) return;
    PP_CHECK_INT(l->num_stages, stages);
    for (s = 0; s < stages && s < l->num_stages; s++) {
        PP_CHECK_OK(pp_layers_stage_range(l, s, &f, &n, &err), &err);
        PP_CHECK_MSG(f == first[s] && n == count[s], "stage %d: [%d,%d), expected [%d,%d)", s, f, f + n, first[s],
                     first[s] + count[s]);
        total += n;
    }
    PP_CHECK_INT(total, l->num_layers);
}

static void check_type(const pp_layers *l, int stage, pp_layer_type type, int first, int count)
{
    int f = -1, n = -1;
    pp_error err;
    if (!l) return;
    PP_CHECK_OK(pp_layers_type_range(l, stage, type, &f, &n, &err), &err);
    PP_CHECK_MSG(f == first && n == count, "stage %d %s: [%d,%d), expected [%d,%d)", stage,
                 pp_layer_type_name(type), f, f + n, first, first + count);
}

static void check_text(const pp_layers *l, int stage, const char *expect)
{
    char buf[256];
    if (!l) return;
    PP_CHECK_INT(pp_layers_stage_text(l, stage, buf, sizeof buf), (long long)strlen(expect));
    PP_CHECK_STR(buf, expect);
}

/* pp_layers_build must fail with `status` and a message containing `needle`. */
static void check_fails(const pp_layers_config *cfg, pp_status status, const char *needle)
{
    pp_layers *l = (pp_layers *)1;
    pp_error err;
    PP_CHECK_FAILS(pp_layers_build(cfg, &l, &err), &err, status, needle);
    PP_CHECK(l == NULL);
    PP_CHECK(strchr(err.message, '\n') == NULL);
}

static void check_layout_fails(const char *layout, int pp, pp_status status, const char *needle)
{
    pp_layers_config c = config(0, pp, 0);
    c.layout = layout;
    check_fails(&c, status, needle);
}

static void check_hybrid_fails(const char *pattern, int pp, int vpp, pp_status status, const char *needle)
{
    pp_layers_config c = config(0, pp, vpp);
    c.hybrid = pattern;
    check_fails(&c, status, needle);
}

/* The layout string of any result parses back (same pp) to the same stages and items. */
static void check_round_trip(const pp_layers *l)
{
    pp_layers *back;
    int s, i;
    if (!l || !l->layout) return;
    back = build_layout(l->layout, l->pp);
    if (!back) { PP_CHECK_MSG(0, "layout '%s' does not parse back", l->layout); return; }
    PP_CHECK_INT(back->num_stages, l->num_stages);
    PP_CHECK_INT(back->num_items, l->num_items);
    for (s = 0; s < l->num_stages && s < back->num_stages; s++) {
        PP_CHECK_MSG(back->first[s] == l->first[s] && back->count[s] == l->count[s],
                     "layout '%s' stage %d: [%d,+%d) back as [%d,+%d)", l->layout, s, l->first[s], l->count[s],
                     back->first[s], back->count[s]);
        PP_CHECK_INT(back->stage_items[s], l->stage_items[s]);
    }
    for (i = 0; i < l->num_items && i < back->num_items; i++) PP_CHECK_INT(back->item_type[i], l->item_type[i]);
    PP_CHECK_STR(back->layout, l->layout);
    pp_layers_free(back);
}

/* ============================================================================================
 * Megatron-LM's formulas, transcribed (Python's // on the non-negative values valid settings
 * produce). -1 stands for None.
 * ============================================================================================ */
typedef struct mcfg { int L, pp, vpp, first, last, emb, loss; } mcfg;   /* vpp, first, last: -1 = None */

static int megatron_count(const mcfg *c, int vp_stage, int pp_rank)
{
    int is_first = pp_rank == 0, is_last = pp_rank == c->pp - 1, per, n;
    if (c->first >= 0 || c->last >= 0) {
        int left = c->L, stages = c->pp;
        if (c->first >= 0) { left -= c->first; stages--; }
        if (c->last >= 0) { left -= c->last; stages--; }
        per = stages > 0 ? left / stages : 0;
        if (is_first && c->first >= 0) per = c->first;
        if (is_last && c->last >= 0) per = c->last;
    } else {
        per = (c->L + c->emb + c->loss) / c->pp;
    }
    n = (c->vpp >= 0 && c->pp > 1) ? per / c->vpp : per;
    if (c->emb && (c->vpp < 0 || vp_stage == 0) && is_first) n--;
    if (c->loss && (c->vpp < 0 || vp_stage == c->vpp - 1) && is_last) n--;
    return n;
}

static int megatron_offset(const mcfg *c, int vp_stage, int pp_rank)
{
    int offset;
    if (c->pp <= 1) return 0;
    if (c->first >= 0 || c->last >= 0) {
        int middle_stages = c->pp - (c->first >= 0) - (c->last >= 0);
        int f = c->first >= 0 ? c->first : 0, la = c->last >= 0 ? c->last : 0;
        int middle = c->L - f - la, middle_rank = c->first < 0 ? pp_rank : pp_rank - 1;
        if (c->vpp >= 0) {
            int fc = c->first < 0 ? 0 : c->first / c->vpp, lc = c->last < 0 ? 0 : c->last / c->vpp;
            int mc = middle / c->vpp, total = fc + mc + lc;
            /* Megatron evaluates mc // middle_stages even when middle_rank is 0; guard the 0 */
            offset = pp_rank == 0 ? vp_stage * total
                                  : vp_stage * total + fc + middle_rank * (middle_stages ? mc / middle_stages : 0);
        } else {
            int per = middle_stages > 0 ? middle / middle_stages : 0;
            offset = pp_rank == 0 ? 0 : middle_rank * per + f;
        }
    } else {
        int L = c->L + c->emb + c->loss, per = L / c->pp;
        if (c->vpp >= 0) {
            offset = vp_stage * (L / c->vpp) + pp_rank * (per / c->vpp);
            if (c->emb && !(vp_stage == 0 && pp_rank == 0)) offset--;
        } else {
            offset = pp_rank * per;
            if (c->emb && pp_rank != 0) offset--;
        }
    }
    return offset;
}

static void layers_match_megatron_formulas_over_a_grid_of_settings(void)
{
    int L, pp, vpp, first, last, flags, checked = 0;
    for (L = 1; L <= 26; L++)
        for (pp = 1; pp <= 5; pp++)
            for (vpp = 1; vpp <= 3; vpp++)
                for (first = 0; first <= 7; first++)
                    for (last = 0; last <= 7; last++)
                        for (flags = 0; flags < 4; flags++) {
                            pp_layers_config c = config(L, pp, vpp);
                            mcfg m;
                            pp_layers *l = NULL;
                            pp_error err;
                            int r, v;
                            if ((first || last) && flags) continue;
                            c.first = first; c.last = last;
                            c.account_for_embedding = flags & 1; c.account_for_loss = (flags >> 1) & 1;
                            if (pp_layers_build(&c, &l, &err) != PP_OK) continue;
                            m.L = L; m.pp = pp; m.vpp = vpp > 1 ? vpp : -1;
                            m.first = first ? first : -1; m.last = last ? last : -1;
                            m.emb = c.account_for_embedding; m.loss = c.account_for_loss;
                            for (v = 0; v < vpp; v++)
                                for (r = 0; r < pp; r++) {
                                    int s = pp_layers_stage(l, r, v);
                                    PP_CHECK_MSG(l->count[s] == megatron_count(&m, v, r) &&
                                                 l->first[s] == megatron_offset(&m, v, r),
                                                 "L=%d pp=%d vpp=%d first=%d last=%d emb=%d loss=%d rank %d chunk "
                                                 "%d: [%d,+%d), Megatron [%d,+%d)", L, pp, vpp, first, last, m.emb,
                                                 m.loss, r, v, l->first[s], l->count[s], megatron_offset(&m, v, r),
                                                 megatron_count(&m, v, r));
                                }
                            check_round_trip(l);
                            pp_layers_free(l);
                            checked++;
                        }
    PP_CHECK(checked > 2000);   /* the grid really exercised the forms */
}

/* ============================================================================================
 * Even, uneven, accounted
 * ============================================================================================ */

static void layers_moonlight_27_layers_pp2_first13_splits_13_and_14(void)
{
    pp_layers_config c = config(27, 2, 0);
    static const int first[] = { 0, 13 }, count[] = { 13, 14 };
    pp_layers *l;
    c.first = 13;
    l = build(&c);
    check_ranges(l, 2, first, count);
    if (l) {
        PP_CHECK_INT(l->form, PP_LAYERS_UNEVEN);
        PP_CHECK_STR(l->layout, "Et*13|t*14L");
        check_text(l, 0, "Et*13");
        check_text(l, 1, "t*14L");
        PP_CHECK_INT(pp_layers_layer_stage(l, 12), 0);
        PP_CHECK_INT(pp_layers_layer_stage(l, 13), 1);
        PP_CHECK_INT(pp_layers_layer_stage(l, 27), -1);
    }
    check_round_trip(l);
    pp_layers_free(l);
}

/* Megatron's comment in get_num_layers_to_build: 8 layers, 2 stages, 4 model chunks ->
 * stage 0: [0] [2] [4] [6], stage 1: [1] [3] [5] [7]; with 2 chunks: [0,1] [4,5] / [2,3] [6,7]. */
static void layers_even_interleaved_matches_megatrons_documented_assignment(void)
{
    pp_layers_config c = config(8, 2, 4);
    pp_layers *l = build(&c);
    int r, v;
    if (l)
        for (r = 0; r < 2; r++)
            for (v = 0; v < 4; v++) {
                int s = pp_layers_stage(l, r, v);
                PP_CHECK_INT(s, v * 2 + r);
                PP_CHECK_INT(l->first[s], 2 * v + r);
                PP_CHECK_INT(l->count[s], 1);
            }
    pp_layers_free(l);
    c = config(8, 2, 2);
    l = build(&c);
    if (l) {
        PP_CHECK_INT(l->first[pp_layers_stage(l, 0, 0)], 0);
        PP_CHECK_INT(l->first[pp_layers_stage(l, 0, 1)], 4);
        PP_CHECK_INT(l->first[pp_layers_stage(l, 1, 0)], 2);
        PP_CHECK_INT(l->first[pp_layers_stage(l, 1, 1)], 6);
        PP_CHECK_INT(l->count[0], 2);
        PP_CHECK_STR(l->layout, "Et*2|(t*2|)*2t*2L");
        PP_CHECK_INT(pp_layers_stage(l, 2, 0), -1);
        PP_CHECK_INT(pp_layers_stage(l, 0, 2), -1);
    }
    check_round_trip(l);
    pp_layers_free(l);
}

/* 24 layers, pp 4, vpp 2, first 4, last 4: the middle 16 over 2 ranks = 8 each, 4 per chunk;
 * first and last 2 per chunk. A chunk row holds 2 + 4 + 4 + 2 = 12 layers. Megatron's offset
 * for rank 1 chunk 1: 1*12 + 2 + 0*(8/2) = 14. */
static void layers_uneven_interleaved_first_and_last(void)
{
    pp_layers_config c = config(24, 4, 2);
    static const int first[] = { 0, 2, 6, 10, 12, 14, 18, 22 }, count[] = { 2, 4, 4, 2, 2, 4, 4, 2 };
    pp_layers *l;
    c.first = 4; c.last = 4;
    l = build(&c);
    check_ranges(l, 8, first, count);
    check_round_trip(l);
    pp_layers_free(l);
}

/* 30 layers, pp 4, last 6: the other 24 over 3 ranks. */
static void layers_uneven_last_only_splits_the_rest_evenly(void)
{
    pp_layers_config c = config(30, 4, 0);
    static const int first[] = { 0, 8, 16, 24 }, count[] = { 8, 8, 8, 6 };
    pp_layers *l;
    c.last = 6;
    l = build(&c);
    check_ranges(l, 4, first, count);
    pp_layers_free(l);
}

/* 30 layers + embedding + loss = 32 over pp 4: 8 each, the first and last give one up: 7 8 8 7.
 * With vpp 2: 4 per chunk, stage 0 and stage 7 have 3. */
static void layers_account_for_embedding_and_loss(void)
{
    pp_layers_config c = config(30, 4, 0);
    static const int first[] = { 0, 7, 15, 23 }, count[] = { 7, 8, 8, 7 };
    static const int first2[] = { 0, 3, 7, 11, 15, 19, 23, 27 }, count2[] = { 3, 4, 4, 4, 4, 4, 4, 3 };
    pp_layers *l;
    c.account_for_embedding = 1; c.account_for_loss = 1;
    l = build(&c);
    check_ranges(l, 4, first, count);
    if (l) PP_CHECK_STR(l->layout, "Et*7|(t*8|)*2t*7L");
    pp_layers_free(l);
    c.vpp = 2;
    l = build(&c);
    check_ranges(l, 8, first2, count2);
    check_round_trip(l);
    pp_layers_free(l);
    /* embedding only: 31 over pp 1 -> one stage of 30 */
    c = config(30, 1, 0);
    c.account_for_embedding = 1;
    l = build(&c);
    if (l) PP_CHECK_INT(l->count[0], 30);
    pp_layers_free(l);
}

static void layers_mtp_sits_on_the_last_stage_without_a_layout(void)
{
    pp_layers_config c = config(8, 2, 0);
    pp_layers *l;
    c.mtp_layers = 2;
    l = build(&c);
    check_type(l, 0, PP_LAYER_MTP, 0, 0);
    check_type(l, 1, PP_LAYER_MTP, 0, 2);
    check_type(l, 1, PP_LAYER_LOSS, 0, 1);
    check_type(l, 0, PP_LAYER_EMBEDDING, 0, 1);
    check_text(l, 1, "t*4m*2L");
    if (l) { PP_CHECK_INT(l->mtp_layers, 2); PP_CHECK(!l->mtp_standalone); }
    check_round_trip(l);
    pp_layers_free(l);
}

static void layers_even_and_uneven_errors_name_the_rule(void)
{
    pp_layers_config c = config(27, 2, 0);
    check_fails(&c, PP_EINVAL, "num_layers=27: does not divide evenly over pp=2");
    c = config(27, 1, 0);
    c.first = 13;
    check_fails(&c, PP_EINVAL, "num_layers=27 minus first stage 13 and last stage 0 leaves 14 layers, but pp=1 has "
                "0 middle stages");
    c = config(27, 2, 0);
    c.first = 13; c.last = 10;
    check_fails(&c, PP_EINVAL, "leaves 4 layers, but pp=2 has 0 middle stages");
    c = config(27, 4, 0);
    c.first = 10;
    check_fails(&c, PP_EINVAL, "leaves 17 layers, which do not divide evenly over 3 middle stages (pp=4)");
    c = config(27, 3, 0);
    c.first = 20; c.last = 10;
    check_fails(&c, PP_EINVAL, "first=20, last=10: together more than num_layers=27");
    c = config(24, 4, 2);
    c.first = 3;
    check_fails(&c, PP_EINVAL, "first=3: the first stage's layers must divide evenly over vpp=2");
    c = config(24, 4, 2);
    c.last = 5;
    check_fails(&c, PP_EINVAL, "last=5: the last stage's layers must divide evenly over vpp=2");
    c = config(26, 4, 2);
    c.first = 2; c.last = 6;
    check_fails(&c, PP_EINVAL, "vpp=2: each middle rank's 9 layers do not divide evenly over 2 chunks");
    c = config(24, 2, 0);
    c.first = 12; c.account_for_loss = 1;
    check_fails(&c, PP_EINVAL, "cannot be combined with account_for_embedding/loss_in_pipeline_split");
    c = config(30, 4, 0);
    c.account_for_embedding = 1;
    check_fails(&c, PP_EINVAL, "num_layers=30: with the embedding counted as a layer that is 31");
    c = config(24, 4, 4);
    check_fails(&c, PP_EINVAL, "vpp=4: each rank's 6 layers do not divide evenly over 4 chunks");
    c = config(8, 1, 2);
    check_fails(&c, PP_EINVAL, "vpp=2: virtual stages need pp >= 2");
    c = config(0, 2, 0);
    check_fails(&c, PP_EINVAL, "num_layers=0: must be at least 1");
    c = config(8, -1, 0);
    check_fails(&c, PP_EINVAL, "pp=-1");
    c = config(8, 2, 0);
    c.first = -3;
    check_fails(&c, PP_EINVAL, "first=-3: must be at least 1");
    c = config(8, 1, 0);
    c.first = 4; c.last = 4;
    check_fails(&c, PP_EINVAL, "pp=1 has a single stage");
    {
        pp_layers *l = NULL;
        pp_error err;
        PP_CHECK_FAILS(pp_layers_build(NULL, &l, &err), &err, PP_EINVAL, "cfg");
        PP_CHECK(pp_layers_build(&c, NULL, NULL) == PP_EINVAL);   /* no pp_error: still a status */
    }
}

/* ============================================================================================
 * moe_layer_freq: which decoder layers are MoE, and their own index space
 * ============================================================================================ */

/* DeepSeek-V3: 61 layers, the first 3 dense ("[0]*3+[1]*58"), pp 16 with the layout of
 * Megatron's DeepSeek-V3 recipe; stage 0 holds layers 0-2 (dense), stage 1 layers 3-4 = MoE
 * layers 0-1, rank 0 chunk 1 is stage 16 with layers 33-34 = MoE 30-31, the MTP is on rank 14. */
static void layers_deepseek_v3_layout_with_moe_indices(void)
{
    pp_layers_config c = config(61, 16, 0);
    pp_layers *l;
    c.layout = "Et*3|(tt|)*29,m|L";
    c.moe_layer_freq = "[0]*3+[1]*58";
    c.mtp_layers = 1;
    l = build(&c);
    if (!l) return;
    PP_CHECK_INT(l->vpp, 2);
    PP_CHECK_INT(l->num_layers, 61);
    check_type(l, 0, PP_LAYER_MOE, 0, 0);
    check_type(l, 0, PP_LAYER_DENSE, 0, 3);
    check_type(l, 1, PP_LAYER_MOE, 0, 2);
    check_type(l, 1, PP_LAYER_DENSE, 3, 0);
    PP_CHECK_INT(pp_layers_stage(l, 0, 1), 16);
    PP_CHECK_INT(l->first[16], 33);
    check_type(l, 16, PP_LAYER_MOE, 30, 2);
    check_type(l, 30, PP_LAYER_MTP, 0, 1);
    check_type(l, 31, PP_LAYER_LOSS, 0, 1);
    PP_CHECK_INT(30 % 16, 14);
    PP_CHECK(l->mtp_standalone);                  /* the MTP is on rank 14, not the last rank 15 */
    PP_CHECK(!l->is_moe[2] && l->is_moe[3] && l->is_moe[60]);
    PP_CHECK_INT(pp_layers_type_index(l, 2, PP_LAYER_MOE), -1);
    PP_CHECK_INT(pp_layers_type_index(l, 2, PP_LAYER_DENSE), 2);
    PP_CHECK_INT(pp_layers_type_index(l, 3, PP_LAYER_MOE), 0);
    PP_CHECK_INT(pp_layers_type_index(l, 34, PP_LAYER_MOE), 31);
    PP_CHECK_INT(pp_layers_type_index(l, 60, PP_LAYER_MOE), 57);
    PP_CHECK_INT(pp_layers_type_index(l, 60, PP_LAYER_DECODER), 60);
    PP_CHECK_INT(pp_layers_type_index(l, 61, PP_LAYER_MOE), -1);
    check_round_trip(l);
    pp_layers_free(l);
}

/* moe_freq_type's examples: "([1]*3+[0]*1)*3" is [1,1,1,0]*3; an integer N marks i % N == 0. */
static void layers_moe_layer_freq_reads_megatrons_forms(void)
{
    static const unsigned char expect[12] = { 1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 0 };
    pp_layers_config c = config(12, 2, 0);
    pp_layers *l;
    int g;
    c.moe_layer_freq = "([1]*3+[0]*1)*3";
    l = build(&c);
    if (l) {
        for (g = 0; g < 12; g++) PP_CHECK_INT(l->is_moe[g], expect[g]);
        check_type(l, 1, PP_LAYER_MOE, 5, 4);        /* layers 6..11: 1,0,1,1,1,0 -> MoE 5..8 */
        check_type(l, 1, PP_LAYER_DENSE, 1, 2);
    }
    pp_layers_free(l);
    c.moe_layer_freq = "4";                          /* layers 0, 4, 8 */
    l = build(&c);
    if (l) {
        for (g = 0; g < 12; g++) PP_CHECK_INT(l->is_moe[g], g % 4 == 0);
        check_type(l, 1, PP_LAYER_MOE, 2, 1);
    }
    pp_layers_free(l);
    c.moe_layer_freq = " [ 0 , 1 , ] * 6 ";         /* Python allows the spaces and the comma */
    l = build(&c);
    if (l) PP_CHECK(l->is_moe[1] && !l->is_moe[10] && l->is_moe[11]);
    pp_layers_free(l);
    c.moe_layer_freq = "3*[1]+[0]*0+[0,0]*(2+3)-1";
    check_fails(&c, PP_EPARSE, "unexpected text");
    c.moe_layer_freq = "3*[1]+[0]*0+[0,0]*(2+2)+[1]";
    l = build(&c);
    if (l) PP_CHECK(l->is_moe[0] && l->is_moe[2] && !l->is_moe[3] && l->is_moe[11]);
    pp_layers_free(l);
}

static void layers_moe_layer_freq_errors(void)
{
    pp_layers_config c = config(12, 2, 0);
    c.moe_layer_freq = "[1]*11";
    check_fails(&c, PP_EINVAL, "the list has 11 entries, but the model has 12 decoder layers");
    c.moe_layer_freq = "[1]*11+[2]";
    check_fails(&c, PP_EINVAL, "entry 11 is 2; use 0 (dense) or 1 (MoE)");
    c.moe_layer_freq = "0";
    check_fails(&c, PP_EINVAL, "moe_layer_freq=0: must be at least 1");
    c.moe_layer_freq = "two";
    check_fails(&c, PP_EPARSE, "expected an integer N");
    c.moe_layer_freq = "[1,0";
    check_fails(&c, PP_EPARSE, "expected ',' or ']'");
    c.moe_layer_freq = "[1]*[2]";
    check_fails(&c, PP_EPARSE, "cannot multiply a list by a list");
    c.moe_layer_freq = "1+[1]*11";
    check_fails(&c, PP_EPARSE, "cannot add a number and a list");
    c.moe_layer_freq = "([1]*12";
    check_fails(&c, PP_EPARSE, "expected ')'");
    c.moe_layer_freq = "[1]*99999999999";
    check_fails(&c, PP_EPARSE, "number too large");
    c.moe_layer_freq = "[1]*1000*1000*1000";
    check_fails(&c, PP_EPARSE, "list too long");
    c.moe_layer_freq = "(1+2)*3+[0]";
    check_fails(&c, PP_EPARSE, "cannot add a number and a list");
    c.moe_layer_freq = "(3)";                      /* no '[': read as an integer, like int(x) */
    check_fails(&c, PP_EPARSE, "expected an integer N");
    c = config(0, 1, 0);
    c.hybrid = "MEME";
    c.moe_layer_freq = "1";
    check_fails(&c, PP_EINVAL, "does not apply to a hybrid pattern");
}

/* ============================================================================================
 * Layout strings
 * ============================================================================================ */

/* The docstring example of TransformerConfig: 'E|(tt|)*2,(t|)*4,mL' is 8 stages; with pp 4:
 * rank 0 chunk 0 holds the embedding, ranks 1-2 chunk 0 two decoders, rank 3 chunk 0 one,
 * ranks 0-2 chunk 1 one each, rank 3 chunk 1 the MTP and the loss. */
static void layers_layout_docstring_example(void)
{
    static const int first[] = { 0, 0, 2, 4, 5, 6, 7, 8 }, count[] = { 0, 2, 2, 1, 1, 1, 1, 0 };
    pp_layers *l = build_layout("E|(tt|)*2,(t|)*4,mL", 4);
    check_ranges(l, 8, first, count);
    if (!l) return;
    PP_CHECK_INT(l->vpp, 2);
    PP_CHECK_INT(l->form, PP_LAYERS_LAYOUT);
    check_text(l, 0, "E");
    check_text(l, 7, "mL");
    PP_CHECK(!l->mtp_standalone);
    PP_CHECK_INT(pp_layers_stage(l, 3, 1), 7);
    check_round_trip(l);
    pp_layers_free(l);
    /* Megatron's get_layer_offset for pp 4: chunk 1 rank 2 = all of chunk 0 (5) + ranks 0-1 (2) */
    l = build_layout("E|(tt|)*2,(t|)*4,mL", 4);
    if (l) PP_CHECK_INT(l->first[pp_layers_stage(l, 2, 1)], 7);
    pp_layers_free(l);
}

/* parse_str_to_list's comments: "(ab|cd|ef)*2" repeats the group, "(|ab)*2,cd" -> "|ab|abcd". */
static void layers_layout_expansion_follows_megatrons_two_passes(void)
{
    static const int first[] = { 0, 0, 1, 3 }, count[] = { 0, 1, 2, 1 };
    pp_layers *l = build_layout("E(|t)*2,t|tL", 2);     /* E|t|tt|tL */
    check_ranges(l, 4, first, count);
    pp_layers_free(l);
    l = build_layout("E,t*3,(t*2|)*2,L", 3);          /* Ettttt|tt|L: groups expand before x*N */
    if (l) { PP_CHECK_INT(l->count[0], 5); PP_CHECK_INT(l->count[1], 2); PP_CHECK_INT(l->count[2], 0); }
    pp_layers_free(l);
    l = build_layout("Et*0t*12|t*010L", 2);           /* counts: 0 drops the letter, leading zeros */
    if (l) { PP_CHECK_INT(l->count[0], 12); PP_CHECK_INT(l->count[1], 10); }
    pp_layers_free(l);
    l = build_layout("E||t|L", 4);                    /* empty stages are allowed */
    if (l) { PP_CHECK_INT(l->count[1], 0); PP_CHECK_INT(l->count[2], 1); check_text(l, 1, ""); }
    pp_layers_free(l);
    /* A quirk kept on purpose: pass 2's "(.)\*(\d+)" repeats any character, so ")*0" vanishes and
     * "E)*0tL" parses as "EtL" in Megatron too; while "((t)*2)*2" leaves a '(' behind. */
    l = build_layout("E)*0tL", 1);
    if (l) PP_CHECK_INT(l->num_layers, 1);
    pp_layers_free(l);
    check_layout_fails("E((t)*2)*2L", 1, PP_EPARSE, "'(' at position 2 is not part of a repeat");
    check_layout_fails("E((t)*2)*2L", 1, PP_EPARSE, "groups do not nest");
    check_layout_fails("(Et|tL", 1, PP_EPARSE, "'(' at position 0 is not part of a repeat");
    check_layout_fails("Et*|tL", 1, PP_EPARSE, "'*' at position 2 is not part of a repeat");
    check_layout_fails("Et**2L", 1, PP_EPARSE, "'*' at position 2");
    check_layout_fails("Et\n*0L", 1, PP_EPARSE, "'\\x0a' at position 2");   /* '.' skips newlines */
    check_layout_fails("E()*2tL", 1, PP_EPARSE, "'(' at position 1");        /* [^)]+ needs one char */
}

static void layers_layout_errors_follow_validate_layer_layout(void)
{
    pp_layers_config c;
    check_layout_fails("Ettx|L", 2, PP_EPARSE, "layout 'Ettx|L': 'x' at position 3 (stage 0) is not a layer; "
                       "known layers are E (embedding), t (decoder), m (MTP), L (loss)");
    check_layout_fails("Et|t|tL", 2, PP_EINVAL, "layout 'Et|t|tL': 3 stages, not a multiple of pp=2");
    check_layout_fails("tE|tL", 2, PP_EINVAL, "the first layer must be E (embedding), but it is 't'");
    check_layout_fails("|", 2, PP_EINVAL, "the first layer must be E (embedding), but the layout has no layers");
    check_layout_fails("Et|Lt", 2, PP_EINVAL, "the last layer must be L (loss), but it is 't'");
    check_layout_fails("Et|EtL", 2, PP_EINVAL, "E (embedding) appears 2 times");
    check_layout_fails("EtL|tL", 2, PP_EINVAL, "L (loss) appears 2 times");
    check_layout_fails("E|L", 2, PP_EINVAL, "has no decoder layers (t)");
    check_layout_fails("Et|mtL", 2, PP_EINVAL, "decoder layer 't' at position 4 comes after the MTP layer at position 3");
    /* MTP in chunk 0 of a vpp-2 layout: Megatron wants it in the last chunk of its rank */
    check_layout_fails("Et|tm||L", 2, PP_EINVAL, "MTP layers in stage 1 (rank 1, chunk 0)");
    check_layout_fails("Etm|mL", 2, PP_EINVAL, "MTP layers in stages 0 and 1; all 2 of them must be in one stage");
    check_layout_fails("Et*99999999999L", 1, PP_EINVAL, "a repeat count is larger than");
    check_layout_fails("E(t*2000|)*1000L", 1, PP_EINVAL, "expands to more than");
    check_layout_fails("Et|tL", 1, PP_EINVAL, "vpp=2: virtual stages need pp >= 2");
    c = config(3, 2, 0);
    c.layout = "Et|tL";
    check_fails(&c, PP_EINVAL, "num_layers=3: the layout has 2 decoder layers (t)");
    c = config(2, 2, 2);
    c.layout = "Et|tL";
    check_fails(&c, PP_EINVAL, "vpp=2: conflicts with the layout, whose 2 stages over pp=2 make vpp=1");
    c = config(0, 2, 0);
    c.layout = "Et|tmL"; c.mtp_layers = 2;
    check_fails(&c, PP_EINVAL, "mtp_layers=2: the layout has 1 MTP layers (m)");
    c = config(0, 2, 0);
    c.layout = "Et|tL"; c.first = 1;
    check_fails(&c, PP_EINVAL, "layout: cannot be set with first=1");
    c.first = 0; c.hybrid = "MM";
    check_fails(&c, PP_EINVAL, "give one of them, not both");
}

/* ============================================================================================
 * Hybrid patterns
 * ============================================================================================ */

static void layers_hybrid_pipes_give_segments_in_megatron_order(void)
{
    /* 4 segments over pp 2: vpp 2; segment s = vpp_rank * 2 + pp_rank, offset = layers before */
    static const int first[] = { 0, 4, 6, 9 }, count[] = { 4, 2, 3, 3 };
    pp_layers *l = build_hybrid("M*-E|M*|-EE|M*M", 2);
    check_ranges(l, 4, first, count);
    if (!l) return;
    PP_CHECK_INT(l->vpp, 2);
    PP_CHECK_INT(l->form, PP_LAYERS_HYBRID);
    PP_CHECK(l->layout == NULL);
    PP_CHECK_STR(l->pattern, "M*-E|M*|-EE|M*M");
    check_text(l, 2, "-EE");
    check_type(l, 0, PP_LAYER_MAMBA, 0, 1);
    check_type(l, 3, PP_LAYER_MAMBA, 2, 2);
    check_type(l, 2, PP_LAYER_MOE, 1, 2);         /* 'E' is the MoE layer of a hybrid model */
    check_type(l, 3, PP_LAYER_ATTENTION, 2, 1);
    check_type(l, 0, PP_LAYER_EMBEDDING, 0, 1);
    check_type(l, 3, PP_LAYER_LOSS, 0, 1);
    PP_CHECK(l->is_moe[3] && l->is_moe[7] && l->is_moe[8] && !l->is_moe[6]);
    PP_CHECK_INT(l->layer_type[9], PP_LAYER_MAMBA);
    PP_CHECK_INT(pp_layers_type_index(l, 8, PP_LAYER_MOE), 2);
    PP_CHECK_INT(pp_layers_type_index(l, 10, PP_LAYER_ATTENTION), 2);
    PP_CHECK_INT(pp_layers_type_index(l, 10, PP_LAYER_MAMBA), -1);
    pp_layers_free(l);
}

/* Megatron's docstring example "M-M-|M-M*-/MM/MM": 2 stages, then two MTP depths of "MM". */
static void layers_hybrid_mtp_suffix_and_auto_split(void)
{
    static const int first[] = { 0, 4 }, count[] = { 4, 5 };
    static const int first3[] = { 0, 3, 5 }, count3[] = { 3, 2, 2 };
    pp_layers_config c;
    pp_layers *l = build_hybrid("M-M-|M-M*-/MM/MM", 2);
    check_ranges(l, 2, first, count);
    check_type(l, 1, PP_LAYER_MTP, 0, 2);
    if (l) { PP_CHECK_INT(l->mtp_layers, 2); PP_CHECK_STR(l->pattern, "M-M-|M-M*-/MM/MM"); }
    pp_layers_free(l);
    l = build_hybrid("M*M*//", 1);                   /* only empty MTP parts: no MTP */
    if (l) PP_CHECK_INT(l->mtp_layers, 0);
    pp_layers_free(l);
    l = build_hybrid("M*M*M*M*", 2);                 /* no '|': even split, pipes written in */
    if (l) { PP_CHECK_INT(l->count[0], 4); PP_CHECK_STR(l->pattern, "M*M*|M*M*"); }
    pp_layers_free(l);
    c = config(0, 3, 0);                              /* no '|', first 3 of 7 over pp 3 */
    c.hybrid = "MM*MM*M";
    c.first = 3;
    l = build(&c);
    check_ranges(l, 3, first3, count3);
    if (l) PP_CHECK_STR(l->pattern, "MM*|MM|*M");
    pp_layers_free(l);
    l = build_hybrid("MG*D+CHW-E", 1);               /* every symbol of the newest allocation */
    if (l) {
        check_type(l, 0, PP_LAYER_GDN, 0, 1);
        check_type(l, 0, PP_LAYER_DSA, 0, 1);
        check_type(l, 0, PP_LAYER_MLA, 0, 1);
        check_type(l, 0, PP_LAYER_CSA, 0, 1);
        check_type(l, 0, PP_LAYER_HCA, 0, 1);
        check_type(l, 0, PP_LAYER_SWA, 0, 1);
        check_type(l, 0, PP_LAYER_DECODER, 0, 10);
    }
    pp_layers_free(l);
}

static void layers_hybrid_errors(void)
{
    pp_layers_config c;
    check_hybrid_fails("M*x|M*", 2, 0, PP_EPARSE, "'x' at position 2 is not a layer symbol");
    check_hybrid_fails("[M*E]M", 1, 0, PP_EPARSE, "bracketed layer groups are not supported");
    check_hybrid_fails("M*|M*|M*", 2, 0, PP_EINVAL, "3 '|'-separated segments, not a multiple of pp=2");
    check_hybrid_fails("M*|M*|M*|M*", 2, 3, PP_EINVAL, "4 '|'-separated segments, but pp=2 x vpp=3 needs 6");
    check_hybrid_fails("M*M*", 2, 2, PP_EINVAL, "without '|' separators cannot be interleaved");
    check_hybrid_fails("M*M*M", 2, 0, PP_EINVAL, "num_layers=5: does not divide evenly over pp=2");
    check_hybrid_fails("M*M*/MM/M*", 1, 0, PP_EINVAL, "all MTP patterns must be identical; pattern 1 is 'MM', but "
                       "pattern 2 is 'M*'");
    check_hybrid_fails("M*M*/M|M", 1, 0, PP_EPARSE, "of the MTP pattern is not a layer symbol (stage boundaries");
    check_hybrid_fails("|", 2, 0, PP_EINVAL, "has no decoder layers");
    check_hybrid_fails("M*|M*", 1, 0, PP_EINVAL, "vpp=2: virtual stages need pp >= 2");
    c = config(5, 2, 0);
    c.hybrid = "M*|M*";
    check_fails(&c, PP_EINVAL, "num_layers=5: the hybrid pattern has 4 layers");
    c = config(0, 2, 0);
    c.hybrid = "M*|M*"; c.first = 2;
    check_fails(&c, PP_EINVAL, "cannot be set when the hybrid pattern has '|' separators");
    c = config(0, 2, 0);
    c.hybrid = "M*|M*"; c.account_for_loss = 1;
    check_fails(&c, PP_EINVAL, "account_for_embedding/loss do not apply");
    c = config(0, 2, 0);
    c.hybrid = "M*|M*/MM"; c.mtp_layers = 2;
    check_fails(&c, PP_EINVAL, "mtp_layers=2: the hybrid pattern has 1 MTP depths");
}

/* ============================================================================================
 * Balanced split
 * ============================================================================================ */

static pp_layers *balance(int n, int pp, int vpp, const double *cost, const double *memory, double cap)
{
    pp_balance_config b;
    pp_layers *l = NULL;
    pp_error err;
    memset(&b, 0, sizeof b);
    b.num_layers = n; b.pp = pp; b.vpp = vpp; b.cost = cost; b.memory = memory; b.memory_cap = cap;
    PP_CHECK_OK(pp_layers_balance(&b, &l, &err), &err);
    return l;
}

/* Greedy filling to the average fails on [1,2,3,4,5] in 3 stages; the optimum is
 * [1,2,3] [4] [5] = 6, 4, 5. In 2 stages: [1,2,3] [4,5] = 6, 9 -> 9. */
static void layers_balance_is_exact_on_hand_worked_cases(void)
{
    static const double c[5] = { 1, 2, 3, 4, 5 };
    static const int first3[] = { 0, 3, 4 }, count3[] = { 3, 1, 1 };
    static const int first2[] = { 0, 3 }, count2[] = { 3, 2 };
    pp_layers *l = balance(5, 3, 1, c, NULL, 0);
    check_ranges(l, 3, first3, count3);
    if (l) {
        PP_CHECK_NEAR(l->max_cost, 6, 0);
        PP_CHECK_NEAR(l->stage_cost[1], 4, 0);
        PP_CHECK_STR(l->layout, "Et*3|t|tL");
        PP_CHECK_INT(l->form, PP_LAYERS_BALANCED);
    }
    check_round_trip(l);
    pp_layers_free(l);
    l = balance(5, 2, 1, c, NULL, 0);
    check_ranges(l, 2, first2, count2);
    if (l) PP_CHECK_NEAR(l->max_cost, 9, 0);
    pp_layers_free(l);
    l = balance(8, 4, 1, NULL, NULL, 0);             /* unit costs: 2 each */
    if (l) { PP_CHECK_STR(l->layout, "Et*2|(t*2|)*2t*2L"); PP_CHECK_NEAR(l->max_cost, 2, 0); }
    pp_layers_free(l);
    l = balance(3, 2, 3, NULL, NULL, 0);             /* 6 stages, 3 layers: empty stages, max 1 */
    if (l) { PP_CHECK_NEAR(l->max_cost, 1, 0); PP_CHECK_INT(l->num_stages, 6); }
    check_round_trip(l);
    pp_layers_free(l);
}

/* The embedding and loss load the first and last stages: 8 unit layers, embedding 2, loss 2,
 * pp 4: total 12, so 3 per stage: 1 layer + E, 3, 3, 1 layer + L. */
static void layers_balance_counts_embedding_loss_and_mtp(void)
{
    pp_balance_config b;
    pp_layers *l = NULL;
    pp_error err;
    static const int first[] = { 0, 1, 4, 7 }, count[] = { 1, 3, 3, 1 };
    memset(&b, 0, sizeof b);
    b.num_layers = 8; b.pp = 4; b.embedding_cost = 2; b.loss_cost = 1; b.mtp_layers = 1; b.mtp_cost = 1;
    PP_CHECK_OK(pp_layers_balance(&b, &l, &err), &err);
    check_ranges(l, 4, first, count);
    if (l) {
        PP_CHECK_NEAR(l->max_cost, 3, 0);
        PP_CHECK_STR(l->layout, "Et|(t*3|)*2tmL");
        check_type(l, 3, PP_LAYER_MTP, 0, 1);
    }
    check_round_trip(l);
    pp_layers_free(l);
}

/* Memory: four layers of cost 1 and memory 1, 2, 3, 4, two stages, cap 6: the cost-best split
 * [1,2] [3,4] (costs 2, 2) breaks the cap (3 + 4 = 7); [1,2,3] [4] (memory 6, 4) fits, at cost 3.
 * With a cap of 5 no two stages fit: greedy filling needs [1,2] [3] [4], 3 stages. */
static void layers_balance_respects_the_memory_cap(void)
{
    static const double c[4] = { 1, 1, 1, 1 }, m[4] = { 1, 2, 3, 4 };
    pp_balance_config b;
    pp_layers *l = balance(4, 2, 1, c, m, 6);
    pp_error err;
    if (l) {
        PP_CHECK_STR(l->layout, "Et*3|tL");
        PP_CHECK_NEAR(l->stage_memory[0], 6, 0);
        PP_CHECK_NEAR(l->stage_memory[1], 4, 0);
        PP_CHECK_NEAR(l->max_cost, 3, 0);
    }
    pp_layers_free(l);
    memset(&b, 0, sizeof b);
    b.num_layers = 4; b.pp = 2; b.cost = c; b.memory = m; b.memory_cap = 5;
    PP_CHECK_FAILS(pp_layers_balance(&b, &l, &err), &err, PP_EINVAL,
                   "memory_cap=5: the layers need at least 3 stages under this cap, but pp*vpp = 2");
    b.memory_cap = 3.5;
    PP_CHECK_FAILS(pp_layers_balance(&b, &l, &err), &err, PP_EINVAL, "memory_cap=3.5: layer 3 alone needs 4");
    b.memory_cap = 10; b.embedding_memory = 11;
    PP_CHECK_FAILS(pp_layers_balance(&b, &l, &err), &err, PP_EINVAL, "the embedding alone needs 11");
    b.embedding_memory = 0; b.memory = NULL;
    PP_CHECK_FAILS(pp_layers_balance(&b, &l, &err), &err, PP_EINVAL, "memory_cap=10: needs the per-layer memory");
    b.memory = m; b.num_layers = 0;
    PP_CHECK_FAILS(pp_layers_balance(&b, &l, &err), &err, PP_EINVAL, "num_layers=0");
    b.num_layers = 4;
    {
        double bad[4] = { 1, -1, 1, 1 };
        b.cost = bad;
        PP_CHECK_FAILS(pp_layers_balance(&b, &l, &err), &err, PP_EINVAL, "cost[1]=-1: must be a finite number >= 0");
        bad[1] = HUGE_VAL;
        PP_CHECK_FAILS(pp_layers_balance(&b, &l, &err), &err, PP_EINVAL, "cost[1]=inf");
    }
    b.cost = c; b.vpp = 2; b.pp = 1;
    PP_CHECK_FAILS(pp_layers_balance(&b, &l, &err), &err, PP_EINVAL, "vpp=2: virtual stages need pp >= 2");
    PP_CHECK(l == NULL);
}

static unsigned pp_test_rng(unsigned *state)
{
    *state = *state * 1664525u + 1013904223u;
    return *state >> 8;
}

/* Every split of n <= 8 layers into k <= 4 stages, enumerated: the result's bottleneck is the
 * least over all of them (computed in the same summation order), and among the splits that reach
 * it, its sum of squares is the least. Costs are non-integers to exercise rounding. */
static void layers_balance_matches_brute_force_on_random_cases(void)
{
    unsigned rng = 12345;
    int trial;
    for (trial = 0; trial < 300; trial++) {
        int n = 1 + (int)(pp_test_rng(&rng) % 8), pp = 1 + (int)(pp_test_rng(&rng) % 4), k = pp;
        double c[8], m[8], cap = 0, best = HUGE_VAL, best_sq = HUGE_VAL, ecost, lcost;
        int cut[5], i, s, use_mem = trial % 3 == 0, feasible = 0;
        pp_balance_config b;
        pp_layers *l = NULL;
        pp_error err;
        pp_status st;
        for (i = 0; i < n; i++) {
            c[i] = (double)(pp_test_rng(&rng) % 1000) / 7.0;
            m[i] = (double)(pp_test_rng(&rng) % 100) / 3.0;
        }
        ecost = (double)(pp_test_rng(&rng) % 100) / 9.0;
        lcost = (double)(pp_test_rng(&rng) % 100) / 9.0;
        if (use_mem) cap = 40 + (double)(pp_test_rng(&rng) % 60);
        /* enumerate cut points 0 = cut[0] <= cut[1] <= ... <= cut[k] = n */
        cut[0] = 0; cut[k] = n;
        for (i = 1; i < k; i++) cut[i] = 0;
        for (;;) {
            double worst = 0, sq = 0;
            int ok = 1;
            for (s = 0; s < k; s++) {
                double acc = s == 0 ? ecost : 0, accm = 0;
                for (i = cut[s]; i < cut[s + 1]; i++) { acc += c[i]; accm += m[i]; }
                if (s == k - 1) acc += lcost;
                if (use_mem && accm > cap) ok = 0;
                if (acc > worst) worst = acc;
                sq += acc * acc;
            }
            if (ok && (worst < best || (worst == best && sq < best_sq))) { best = worst; best_sq = sq; feasible = 1; }
            /* next non-decreasing cut vector */
            for (i = k - 1; i >= 1 && cut[i] == n; i--) {}
            if (i < 1) break;
            cut[i]++;
            for (s = i + 1; s < k; s++) cut[s] = cut[i];
        }
        memset(&b, 0, sizeof b);
        b.num_layers = n; b.pp = pp; b.cost = c; b.embedding_cost = ecost; b.loss_cost = lcost;
        if (use_mem) { b.memory = m; b.memory_cap = cap; }
        st = pp_layers_balance(&b, &l, &err);
        if (!feasible) { PP_CHECK_MSG(st == PP_EINVAL, "trial %d: infeasible cap accepted", trial); continue; }
        PP_CHECK_MSG(st == PP_OK, "trial %d: %s", trial, err.message);
        if (!l) continue;
        {
            double sq = 0;
            for (s = 0; s < k; s++) sq += l->stage_cost[s] * l->stage_cost[s];
            PP_CHECK_MSG(l->max_cost == best, "trial %d (n=%d k=%d): bottleneck %.17g, brute force %.17g", trial, n,
                         k, l->max_cost, best);
            PP_CHECK_MSG(sq <= best_sq * (1 + 1e-12), "trial %d: sum of squares %.17g, best %.17g", trial, sq, best_sq);
        }
        check_round_trip(l);
        pp_layers_free(l);
    }
}


/* A hybrid pattern's symbols are the layers the balance splits, so a stage may end between a
 * layer's attention ('*') and its MLP ('-'): a GPT of 24 layers (attention 0.69, MLP 0.31, the
 * output layer 0.56 on the last stage) at pp 2, vpp 2 with ranks balanced moves one MLP off the
 * rank that holds the head (12 | 11 | 13 | 12 units looped; 11 | 13 | 12 | 12 under the V), where
 * whole layers leave 12 against 12.56. The items, MoE marks and types follow the pattern. */
static void layers_balance_splits_a_hybrid_pattern_between_attention_and_mlp(void)
{
    char pattern[49];
    double cost[48], speed[2] = { 1, 1 };
    pp_balance_config b;
    pp_layers *l = NULL;
    pp_error err;
    int u;
    for (u = 0; u < 48; u++) { pattern[u] = u % 2 ? '-' : '*'; cost[u] = u % 2 ? 0.31 : 0.69; }
    pattern[48] = '\0';
    memset(&b, 0, sizeof b);
    b.pp = 2; b.vpp = 2; b.cost = cost; b.loss_cost = 0.56; b.rank_speed = speed; b.hybrid = pattern;
    PP_CHECK_OK(pp_layers_balance(&b, &l, &err), &err);
    if (l) {
        PP_CHECK_STR(l->pattern, "*-*-*-*-*-*-|*-*-*-*-*-*|-*-*-*-*-*-*-|*-*-*-*-*-*-");
        PP_CHECK(l->layout == NULL);
        PP_CHECK_INT(l->num_layers, 48);
        PP_CHECK_INT(l->count[1], 11);
        PP_CHECK_INT(l->first[2], 23);
        PP_CHECK_INT(l->layer_type[23], PP_LAYER_MLP);
        PP_CHECK_NEAR(l->rank_time[0], 12.31, 1e-9);
        PP_CHECK_NEAR(l->rank_time[1], 12.25, 1e-9);
    }
    pp_layers_free(l);
    b.v_placement = 1;
    PP_CHECK_OK(pp_layers_balance(&b, &l, &err), &err);
    if (l) {
        PP_CHECK_STR(l->pattern, "*-*-*-*-*-*|-*-*-*-*-*-*-|*-*-*-*-*-*-|*-*-*-*-*-*-");
        PP_CHECK_NEAR(l->rank_time[0], 12.25, 1e-9);
        PP_CHECK_NEAR(l->rank_time[1], 12.31, 1e-9);
    }
    pp_layers_free(l);
    /* MoE symbols keep their marks; num_layers 0 counts the symbols */
    memset(&b, 0, sizeof b);
    b.pp = 2; b.hybrid = "*-*E";
    PP_CHECK_OK(pp_layers_balance(&b, &l, &err), &err);
    if (l) {
        PP_CHECK_STR(l->pattern, "*-|*E");
        PP_CHECK_INT(l->is_moe[3], 1);
        PP_CHECK_INT(pp_layers_type_index(l, 3, PP_LAYER_MOE), 0);
    }
    pp_layers_free(l);
    l = NULL;
    b.hybrid = "*-|*-";
    PP_CHECK_FAILS(pp_layers_balance(&b, &l, &err), &err, PP_EPARSE, "'|' at position 2 is not a layer symbol (the "
                   "balance places the stage breaks");
    b.hybrid = "*-*E"; b.moe_layer_freq = "2";
    PP_CHECK_FAILS(pp_layers_balance(&b, &l, &err), &err, PP_EINVAL, "a hybrid pattern marks its MoE layers itself");
    b.moe_layer_freq = NULL; b.num_layers = 3;
    PP_CHECK_FAILS(pp_layers_balance(&b, &l, &err), &err, PP_EINVAL, "num_layers=3: the hybrid pattern has 4 layers");
    b.num_layers = 0; b.hybrid = "";
    PP_CHECK_FAILS(pp_layers_balance(&b, &l, &err), &err, PP_EINVAL, "has 0 layers, must have 1 to");
    PP_CHECK(l == NULL);
}
/* Speeds. 16 equal layers, pp 2, rank 1 1.35x slower (speeds 1 and 1/1.35): x layers on rank 0
 * take x, 16 - x on rank 1 take 1.35 (16 - x); x = 9 gives max(9, 9.45) = 9.45, x = 10 gives 10,
 * x = 8 gives 10.8. With the V placement (vpp 2, rank 0 holding stages 0 and 3) the ranks' sums are
 * again 9 and 7; the exact split of stage times alone (5, 3, 3, 5: stage times at most 5) would
 * give rank 0 ten layers, which is why the ranks' sums are balanced after it. Looped stages
 * (rank 0 holding stages 0 and 2) likewise. */
static char *capture(pp_status (*write)(const pp_layers *, FILE *, pp_error *), const pp_layers *l);

static void layers_balance_gives_a_slow_rank_fewer_layers(void)
{
    static const double speed[2] = { 1, 1 / 1.35 };
    pp_balance_config b;
    pp_layers *l = NULL;
    pp_error err;
    int v;
    memset(&b, 0, sizeof b);
    b.num_layers = 16; b.pp = 2; b.rank_speed = speed;
    PP_CHECK_OK(pp_layers_balance(&b, &l, &err), &err);
    if (l) {
        PP_CHECK_STR(l->layout, "Et*9|t*7L");
        PP_CHECK_NEAR(l->max_cost, 9.45, 1e-12);
        PP_CHECK_NEAR(l->rank_time[0], 9, 0);
        PP_CHECK_NEAR(l->rank_time[1], 9.45, 1e-12);
        PP_CHECK_NEAR(l->stage_cost[1], 7, 0);      /* stage costs stay costs, not times */
    }
    check_round_trip(l);
    pp_layers_free(l);
    for (v = 0; v <= 1; v++) {
        b.vpp = 2; b.v_placement = v;
        PP_CHECK_OK(pp_layers_balance(&b, &l, &err), &err);
        if (!l) continue;
        PP_CHECK_MSG(l->count[0] + l->count[v ? 3 : 2] == 9, "%s: rank 0 holds %d layers (%s), expected 9",
                     v ? "V" : "looped", l->count[0] + l->count[v ? 3 : 2], l->layout);
        PP_CHECK_NEAR(l->max_cost, 9.45, 1e-12);
        /* the split says where its stages are: the text and JSON name each stage's rank */
        PP_CHECK_INT(l->v_placement, v);
        PP_CHECK_INT(pp_layers_rank(l, 2), v ? 1 : 0);
        PP_CHECK_INT(pp_layers_rank(l, 3), v ? 0 : 1);
        PP_CHECK_INT(pp_layers_rank(l, 4), -1);
        PP_CHECK_INT(pp_layers_rank(NULL, 0), -1);
        {
            char *text = capture(pp_layers_write_text, l), *json = capture(pp_layers_write_json, l);
            PP_CHECK_CONTAINS(text, v ? "stage 3 rank 0 chunk 1" : "stage 3 rank 1 chunk 1");
            PP_CHECK_CONTAINS(text, "rank time 9 9.45");
            PP_CHECK_CONTAINS(json, v ? "\"v_placement\":true" : "\"v_placement\":false");
            PP_CHECK_CONTAINS(json, v ? "{\"stage\":3,\"rank\":0,\"chunk\":1" : "{\"stage\":3,\"rank\":1,\"chunk\":1");
            free(text);
            free(json);
        }
        pp_layers_free(l);
    }
    /* equal speeds balance the ranks' sums; without speeds the stages (rank_time still reported) */
    b.num_layers = 10; b.v_placement = 0;
    b.rank_speed = NULL;
    PP_CHECK_OK(pp_layers_balance(&b, &l, &err), &err);
    if (l) { PP_CHECK_NEAR(l->max_cost, 3, 0); PP_CHECK_NEAR(l->rank_time[0] + l->rank_time[1], 10, 0); }
    pp_layers_free(l);
    /* bad speeds and placements are named */
    b.rank_speed = speed; b.vpp = 1; b.v_placement = 1;
    PP_CHECK_FAILS(pp_layers_balance(&b, &l, &err), &err, PP_EINVAL,
                   "v_placement=1: the V placement holds 2 stages a rank, but vpp=1");
    {
        double bad[2] = { 1, 0 };
        b.v_placement = 0; b.rank_speed = bad;
        PP_CHECK_FAILS(pp_layers_balance(&b, &l, &err), &err, PP_EINVAL, "rank_speed[1]=0: must be a finite number > 0");
        bad[1] = HUGE_VAL;
        PP_CHECK_FAILS(pp_layers_balance(&b, &l, &err), &err, PP_EINVAL, "rank_speed[1]=inf");
    }
    PP_CHECK(l == NULL);
}

/* Every split of n <= 9 layers into pp*vpp stages (pp 1..3, vpp 1..2, looped and V), enumerated
 * with random speeds: at vpp 1 the slowest rank's time is the least of all splits (exact); at
 * vpp 2 it is the least whenever the decoder layers cost alike (an embedding and a loss of their
 * own cost around them; layers of unequal costs can end a few percent above it). rank_time is
 * each rank's stages' costs / its speed. */
static void layers_balance_with_speeds_matches_brute_force(void)
{
    unsigned rng = 777;
    int trial;
    for (trial = 0; trial < 300; trial++) {
        int pp = 1 + (int)(pp_test_rng(&rng) % 3), vpp = pp > 1 ? 1 + (int)(pp_test_rng(&rng) % 2) : 1;
        int S = pp * vpp, n = S + (int)(pp_test_rng(&rng) % (10 - S)), v = vpp == 2 && trial % 2;
        int alike = trial % 3 != 0, cut[7], i, s, r;
        double c[9], speed[3], front = (double)(pp_test_rng(&rng) % 30) / 10, back = (double)(pp_test_rng(&rng) % 30) / 10;
        double best = HUGE_VAL;
        pp_balance_config b;
        pp_layers *l = NULL;
        pp_error err;
        for (i = 0; i < n; i++) c[i] = alike ? 1 : (double)(1 + pp_test_rng(&rng) % 9);
        for (r = 0; r < pp; r++) speed[r] = 0.5 + (double)(pp_test_rng(&rng) % 100) / 100;
        cut[0] = 0; cut[S] = n;
        for (i = 1; i < S; i++) cut[i] = 0;
        for (;;) {
            double rt[3] = { 0, 0, 0 }, worst = 0;
            for (s = 0; s < S; s++) {
                double acc = s == 0 ? front : 0;
                for (i = cut[s]; i < cut[s + 1]; i++) acc += c[i];
                if (s == S - 1) acc += back;
                rt[v ? (s < pp ? s : 2 * pp - 1 - s) : s % pp] += acc;
            }
            for (r = 0; r < pp; r++) if (rt[r] / speed[r] > worst) worst = rt[r] / speed[r];
            if (worst < best) best = worst;
            for (i = S - 1; i >= 1 && cut[i] == n; i--) {}
            if (i < 1) break;
            cut[i]++;
            for (s = i + 1; s < S; s++) cut[s] = cut[i];
        }
        memset(&b, 0, sizeof b);
        b.num_layers = n; b.pp = pp; b.vpp = vpp; b.cost = c; b.embedding_cost = front; b.loss_cost = back;
        b.rank_speed = speed; b.v_placement = v;
        PP_CHECK_OK(pp_layers_balance(&b, &l, &err), &err);
        if (!l) continue;
        if (vpp == 1 || alike)
            PP_CHECK_MSG(l->max_cost <= best * (1 + 1e-12), "trial %d (pp %d vpp %d n %d%s): slowest rank %.17g, brute "
                         "force %.17g", trial, pp, vpp, n, v ? " V" : "", l->max_cost, best);
        for (r = 0; r < pp; r++) {
            double acc = 0;
            for (s = 0; s < S; s++)
                if ((v ? (s < pp ? s : 2 * pp - 1 - s) : s % pp) == r) acc += l->stage_cost[s];
            PP_CHECK_NEAR(acc / speed[r], l->rank_time[r], 1e-9 * (1 + acc));
        }
        check_round_trip(l);
        pp_layers_free(l);
    }
}

/* ============================================================================================
 * Output, queries, fuzzing
 * ============================================================================================ */

static char *capture(pp_status (*write)(const pp_layers *, FILE *, pp_error *), const pp_layers *l)
{
    FILE *f = tmpfile();
    char *buf;
    long n;
    pp_error err;
    if (!f) return NULL;
    PP_CHECK_OK(write(l, f, &err), &err);
    n = ftell(f);
    rewind(f);
    buf = (char *)calloc(1, (size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) buf[0] = '\0';
    fclose(f);
    return buf;
}

static void layers_text_and_json_list_every_stage(void)
{
    pp_layers_config c = config(6, 2, 0);
    pp_layers *l;
    char *text, *json;
    c.moe_layer_freq = "[0]+[1]*5";
    l = build(&c);
    if (!l) return;
    text = capture(pp_layers_write_text, l);
    json = capture(pp_layers_write_json, l);
    if (text)
        PP_CHECK_STR(text, "stage 0 rank 0 chunk 0 layers [0,3) items Et*3 moe [0,2) dense [0,1)\n"
                           "stage 1 rank 1 chunk 0 layers [3,6) items t*3L moe [2,5) dense [1,1)\n"
                           "layout Et*3|t*3L\n");
    if (json) {
        PP_CHECK_CONTAINS(json, "{\"form\":\"even\",\"pp\":2,\"vpp\":1,\"num_stages\":2,\"num_layers\":6,");
        PP_CHECK_CONTAINS(json, "\"layout\":\"Et*3|t*3L\",\"is_moe\":[0,1,1,1,1,1],\"stages\":[{\"stage\":0,");
        PP_CHECK_CONTAINS(json, "{\"stage\":1,\"rank\":1,\"chunk\":0,\"first\":3,\"count\":3,\"items\":\"t*3L\","
                                "\"types\":{\"decoder\":{\"first\":3,\"count\":3},\"moe\":{\"first\":2,\"count\":3}");
        PP_CHECK(json[strlen(json) - 2] == '}');
    }
    free(text);
    free(json);
    pp_layers_free(l);
}

/* The writers are linear in the stages: 65536 stages (pp 64, vpp 1024) are written as text and
 * JSON in well under a second; writers that rescanned every stage per stage took minutes. The
 * bound (10 s of CPU for both) leaves room for sanitizers and loaded machines. */
static void layers_writers_are_linear_in_stages(void)
{
    pp_layers_config c;
    pp_layers *l = NULL;
    pp_error err;
    char *text, *json;
    clock_t t0;
    double cpu;
    memset(&c, 0, sizeof c);
    c.pp = 64;
    c.layout = "Et(|)*65535L";
    PP_CHECK_OK(pp_layers_build(&c, &l, &err), &err);
    if (!l) return;
    PP_CHECK_INT(l->num_stages, 65536);
    t0 = clock();
    text = capture(pp_layers_write_text, l);
    json = capture(pp_layers_write_json, l);
    cpu = (double)(clock() - t0) / CLOCKS_PER_SEC;
    PP_CHECK_MSG(cpu < 10.0, "writing 65536 stages took %.1f s of CPU", cpu);
    if (text) PP_CHECK_CONTAINS(text, "stage 65535 rank 63 chunk 1023 layers [1,1) items L\n");
    if (json) PP_CHECK_CONTAINS(json, "{\"stage\":65535,\"rank\":63,\"chunk\":1023,\"first\":1,\"count\":0,\"items\":\"L\"");
    free(text);
    free(json);
    pp_layers_free(l);
}

static void layers_queries_reject_out_of_range(void)
{
    pp_layers_config c = config(4, 2, 0);
    pp_layers *l = build(&c);
    pp_error err;
    int f, n;
    char buf[8];
    if (!l) return;
    PP_CHECK_FAILS(pp_layers_stage_range(l, 2, &f, &n, &err), &err, PP_EINVAL, "stage=2: must be between 0 and 1");
    PP_CHECK_FAILS(pp_layers_stage_range(l, -1, &f, &n, &err), &err, PP_EINVAL, "stage=-1");
    PP_CHECK_FAILS(pp_layers_type_range(l, 0, PP_LAYER_TYPE_COUNT, &f, &n, &err), &err, PP_EINVAL, "type=");
    PP_CHECK_FAILS(pp_layers_stage_range(NULL, 0, &f, &n, &err), &err, PP_EINVAL, "layers");
    PP_CHECK_INT(pp_layers_stage_text(l, 5, buf, sizeof buf), -1);
    PP_CHECK_INT(pp_layers_stage_text(l, 1, buf, 3), 4);      /* "t*2L" truncated like snprintf */
    PP_CHECK_STR(buf, "t*");
    PP_CHECK_INT(pp_layers_layer_stage(l, -1), -1);
    PP_CHECK_INT(pp_layers_type_index(l, 1, (pp_layer_type)99), -1);
    PP_CHECK_STR(pp_layer_type_name(PP_LAYER_MOE), "moe");
    PP_CHECK_STR(pp_layers_form_name(PP_LAYERS_HYBRID), "hybrid");
    {
        pp_layer_type t;
        PP_CHECK_OK(pp_layer_type_parse("mamba", &t, &err), &err);
        PP_CHECK_INT(t, PP_LAYER_MAMBA);
        PP_CHECK_FAILS(pp_layer_type_parse("moo", &t, &err), &err, PP_EINVAL, "layer type 'moo': unknown");
    }
    pp_layers_free(l);
    pp_layers_free(NULL);
    /* empty stages: the stage that builds a layer is never an empty one */
    l = build_layout("Et||t|L", 2);
    if (l) {
        PP_CHECK_INT(pp_layers_layer_stage(l, 0), 0);
        PP_CHECK_INT(pp_layers_layer_stage(l, 1), 2);
    }
    pp_layers_free(l);
}

/* A successful result must be self-consistent: ranges tile the decoder, type counts add up. */
static void check_invariants(const pp_layers *l)
{
    int s, t, g = 0, items = 0;
    for (s = 0; s < l->num_stages; s++) {
        PP_CHECK(l->first[s] == g);
        g += l->count[s];
        items += l->stage_items[s + 1] - l->stage_items[s];
    }
    PP_CHECK(g == l->num_layers);
    PP_CHECK(items == l->num_items);
    for (t = 0; t < PP_LAYER_TYPE_COUNT; t++) {
        int run = 0;
        for (s = 0; s < l->num_stages; s++) {
            PP_CHECK(l->type_first[s * PP_LAYER_TYPE_COUNT + t] == run);
            run += l->type_count[s * PP_LAYER_TYPE_COUNT + t];
        }
    }
}

/* Random strings over each parser's alphabet (and a few strangers): every call either succeeds
 * with a consistent result whose layout parses back, or fails with a one-line message. ASan and
 * the leak checker watch the error paths. Bounded: a few thousand strings per parser. */
static void layers_fuzz_the_string_parsers(void)
{
    static const char layout_abc[] = "EEttttmL||||()**0123456789,,x\n";
    static const char hybrid_abc[] = "MMM***---EEGD+CHW||||//[]x";
    static const char moe_abc[] = "[[]]((01010123456789,,++** x";
    unsigned rng = 777;
    int trial, ok = 0, failed = 0;
    for (trial = 0; trial < 6000; trial++) {
        char text[48];
        int len = (int)(pp_test_rng(&rng) % 40), i, kind = trial % 3;
        const char *abc = kind == 0 ? layout_abc : kind == 1 ? hybrid_abc : moe_abc;
        size_t n = strlen(abc);
        pp_layers_config c = config(0, 1 + (int)(pp_test_rng(&rng) % 3), 0);
        pp_layers *l = NULL;
        pp_error err;
        pp_status st;
        if (kind == 0 && trial % 5 == 0) {            /* mostly well-formed layouts too */
            snprintf(text, sizeof text, "E%s|t*%u|(t|)*%u,m|L", pp_test_rng(&rng) % 2 ? "t" : "",
                     pp_test_rng(&rng) % 4, pp_test_rng(&rng) % 3);
        } else {
            for (i = 0; i < len; i++) text[i] = abc[pp_test_rng(&rng) % n];
            text[len] = '\0';
        }
        if (kind == 0) c.layout = text;
        else if (kind == 1) c.hybrid = text;
        else { c.num_layers = 1 + (int)(pp_test_rng(&rng) % 8); c.moe_layer_freq = text; }
        err.message[0] = '\0';
        st = pp_layers_build(&c, &l, &err);
        if (st == PP_OK) {
            ok++;
            PP_CHECK(l != NULL);
            if (l) { check_invariants(l); check_round_trip(l); }
        } else {
            failed++;
            PP_CHECK(l == NULL);
            PP_CHECK_MSG(err.message[0] && !strchr(err.message, '\n'), "'%s': message '%s'", text, err.message);
        }
        pp_layers_free(l);
    }
    PP_CHECK(ok > 100 && failed > 100);               /* both paths were exercised */
}

const pp_test_case pp_suite_layers[] = {
    PP_TEST(layers_moonlight_27_layers_pp2_first13_splits_13_and_14),
    PP_TEST(layers_even_interleaved_matches_megatrons_documented_assignment),
    PP_TEST(layers_uneven_interleaved_first_and_last),
    PP_TEST(layers_uneven_last_only_splits_the_rest_evenly),
    PP_TEST(layers_account_for_embedding_and_loss),
    PP_TEST(layers_mtp_sits_on_the_last_stage_without_a_layout),
    PP_TEST(layers_match_megatron_formulas_over_a_grid_of_settings),
    PP_TEST(layers_even_and_uneven_errors_name_the_rule),
    PP_TEST(layers_deepseek_v3_layout_with_moe_indices),
    PP_TEST(layers_moe_layer_freq_reads_megatrons_forms),
    PP_TEST(layers_moe_layer_freq_errors),
    PP_TEST(layers_layout_docstring_example),
    PP_TEST(layers_layout_expansion_follows_megatrons_two_passes),
    PP_TEST(layers_layout_errors_follow_validate_layer_layout),
    PP_TEST(layers_hybrid_pipes_give_segments_in_megatron_order),
    PP_TEST(layers_hybrid_mtp_suffix_and_auto_split),
    PP_TEST(layers_hybrid_errors),
    PP_TEST(layers_balance_is_exact_on_hand_worked_cases),
    PP_TEST(layers_balance_counts_embedding_loss_and_mtp),
    PP_TEST(layers_balance_respects_the_memory_cap),
    PP_TEST(layers_balance_matches_brute_force_on_random_cases),
    PP_TEST(layers_balance_gives_a_slow_rank_fewer_layers),
    PP_TEST(layers_balance_splits_a_hybrid_pattern_between_attention_and_mlp),
    PP_TEST(layers_balance_with_speeds_matches_brute_force),
    PP_TEST(layers_text_and_json_list_every_stage),
    PP_TEST(layers_writers_are_linear_in_stages),
    PP_TEST(layers_queries_reject_out_of_range),
    PP_TEST(layers_fuzz_the_string_parsers),
    { 0, 0 }
};
