/* Tests of >>replay: which MoE layers a stage replays and which recorded rows its local tokens
 * take, after packing, the CP split and the sequence-parallel split. */
#include <stdlib.h>
#include "pp_test.h"

static int rows_equal(const int64_t *a, const int64_t *b, int n)
{
    int i;
    for (i = 0; i < n; i++) if (a[i] != b[i]) return 0;
    return 1;
}

static void moe_layout_follows_megatron_freq_and_first_k_dense(void)
{
    pp_moe_layout m;
    static const unsigned char pattern[6] = { 0, 0, 1, 0, 1, 1 };
    memset(&m, 0, sizeof m);
    m.num_layers = 8;
    PP_CHECK_INT(pp_moe_count(&m), 8);              /* moe_freq 0 = 1: every layer */
    m.moe_freq = 2;
    PP_CHECK_INT(pp_moe_count(&m), 4);              /* layers 0 2 4 6 (Megatron: i % 2 == 0) */
    PP_CHECK_INT(pp_moe_is_moe(&m, 0), 1);
    PP_CHECK_INT(pp_moe_is_moe(&m, 1), 0);
    m.first_k_dense = 3;
    PP_CHECK_INT(pp_moe_count(&m), 2);              /* 4 6 */
    PP_CHECK_INT(pp_moe_is_moe(&m, 2), 0);
    PP_CHECK_INT(pp_moe_is_moe(&m, 8), -1);
    m.num_layers = 6; m.pattern = pattern;
    PP_CHECK_INT(pp_moe_count(&m), 3);
    PP_CHECK_INT(pp_moe_is_moe(&m, 4), 1);
    m.pattern = NULL; m.num_layers = 0;
    PP_CHECK_INT(pp_moe_count(&m), -1);
}

/* 27 layers, the first dense (DeepSeek-V2-Lite / Moonlight: first_k_dense_replace = 1), pp 2 with
 * 13 layers on the first stage. Stage 0 = layers [0, 13): MoE layers 1 .. 12, slots 0 .. 11 of
 * the compressed recording (26 slots); stage 1 = [13, 27): layers 13 .. 26, slots 12 .. 25. Each
 * slot is replayed exactly once. With the full layout (27 slots) the slot is the layer index. */
static void uneven_27_layer_split_lines_up_with_the_recording(void)
{
    pp_moe_layout m;
    int32_t layers[27], payload[27];
    int count, i;
    pp_error err;
    memset(&m, 0, sizeof m);
    m.num_layers = 27; m.first_k_dense = 1;
    PP_CHECK_INT(pp_moe_count(&m), 26);
    PP_CHECK_OK(pp_moe_stage_layers(&m, 0, 13, layers, payload, &count, &err), &err);
    PP_CHECK_INT(count, 12);
    for (i = 0; i < count; i++) { PP_CHECK_INT(layers[i], i + 1); PP_CHECK_INT(payload[i], i); }
    PP_CHECK_OK(pp_moe_stage_layers(&m, 13, 27, layers, payload, &count, &err), &err);
    PP_CHECK_INT(count, 14);
    for (i = 0; i < count; i++) { PP_CHECK_INT(layers[i], 13 + i); PP_CHECK_INT(payload[i], 12 + i); }
    m.payload_layers = 27;
    PP_CHECK_OK(pp_moe_stage_layers(&m, 13, 27, layers, payload, &count, &err), &err);
    for (i = 0; i < count; i++) PP_CHECK_INT(payload[i], 13 + i);
    m.payload_layers = 26;   /* the compressed size, given explicitly */
    PP_CHECK_OK(pp_moe_stage_layers(&m, 13, 27, layers, payload, &count, &err), &err);
    PP_CHECK_INT(payload[0], 12);
    m.payload_layers = 20;
    PP_CHECK_FAILS(pp_moe_stage_layers(&m, 0, 13, layers, payload, &count, &err), &err, PP_EINVAL,
                   "payload_layers=20: the recording's layer axis must hold one slot per MoE layer (26) or per decoder layer (27)");
    m.payload_layers = 0;
    PP_CHECK_FAILS(pp_moe_stage_layers(&m, 13, 28, layers, payload, &count, &err), &err, PP_EINVAL, "layers [13, 28)");
    PP_CHECK_FAILS(pp_moe_stage_layers(&m, 5, 4, layers, payload, &count, &err), &err, PP_EINVAL, "first <= last");
}

/* Any cut of the model into consecutive stages (here 4 virtual stages of 7, 7, 7, 6 layers with
 * moe_freq 2 after 3 dense layers) replays every MoE slot once, in order. */
static void stages_in_a_row_cover_every_moe_slot_once(void)
{
    pp_moe_layout m;
    int32_t layers[27], payload[27];
    int cuts[5] = { 0, 7, 14, 21, 27 }, s, i, next = 0, count;
    pp_error err;
    memset(&m, 0, sizeof m);
    m.num_layers = 27; m.first_k_dense = 3; m.moe_freq = 2;
    for (s = 0; s < 4; s++) {
        PP_CHECK_OK(pp_moe_stage_layers(&m, cuts[s], cuts[s + 1], layers, payload, &count, &err), &err);
        for (i = 0; i < count; i++) {
            PP_CHECK(layers[i] >= 3 && layers[i] % 2 == 0);
            PP_CHECK_INT(payload[i], next++);
        }
    }
    PP_CHECK_INT(next, pp_moe_count(&m));
}

/* The cp = 2 microbatch of sequences 5 and 11 (cu_seqlens_padded 0 8 20, see test_cp.c).
 * Rank 0 holds positions 0 1 6 7 | 8 9 10 17 18 19: sequence 0's tokens 0 1 (rows 0 1) and two
 * pads, sequence 1's tokens 0 1 2 (rows 5 6 7: it starts at row 5) and 9 10 (rows 14 15) and a
 * pad. Rank 1 holds 2 3 4 5 | 11 .. 16: rows 2 3 4, a pad, then sequence 1's tokens 3 .. 8 =
 * rows 8 .. 13. */
static void rows_of_two_packed_sequences_under_cp2(void)
{
    static const int32_t lengths[2] = { 5, 11 };
    static const int64_t want0[10] = { 0, 1, -1, -1, 5, 6, 7, 14, 15, -1 };
    static const int64_t want1[10] = { 2, 3, 4, -1, 8, 9, 10, 11, 12, 13 };
    static const int64_t padded_batch[2] = { 0, 16 };    /* a [2, 16] recording instead */
    pp_pack_plan_config pc;
    pp_pack_plan *plan = NULL;
    pp_replay_config rc;
    pp_replay_map *map = NULL;
    pp_error err;
    memset(&pc, 0, sizeof pc);
    pc.pack.capacity = 20; pc.pack.algo = PP_PACK_CONCATENATIVE; pc.cp = 2;
    PP_CHECK_OK(pp_pack_plan_build(lengths, 2, &pc, &plan, &err), &err);
    if (!plan) return;
    memset(&rc, 0, sizeof rc);
    rc.model.num_layers = 4; rc.model.first_k_dense = 1;
    rc.first_layer = 0; rc.last_layer = 2;
    PP_CHECK_OK(pp_replay_map_build(plan, 0, &rc, &map, &err), &err);
    if (map) {
        PP_CHECK_INT(map->num_layers, 1);       /* layer 0 dense, layer 1 MoE (slot 0) */
        PP_CHECK_INT(map->layers[0], 1);
        PP_CHECK_INT(map->payload[0], 0);
        PP_CHECK_INT(map->num_tokens, 10);
        PP_CHECK(rows_equal(map->rows, want0, 10));
    }
    pp_replay_map_free(map);
    rc.cp_rank = 1;
    PP_CHECK_OK(pp_replay_map_build(plan, 0, &rc, &map, &err), &err);
    if (map) PP_CHECK(rows_equal(map->rows, want1, 10));
    pp_replay_map_free(map);
    /* Sequence parallel, tp 2: rank 1's ten tokens, tp rank 1 takes the second five. */
    rc.tp = 2; rc.tp_rank = 1; rc.sequence_parallel = 1;
    PP_CHECK_OK(pp_replay_map_build(plan, 0, &rc, &map, &err), &err);
    if (map) { PP_CHECK_INT(map->num_tokens, 5); PP_CHECK(rows_equal(map->rows, want1 + 5, 5)); }
    pp_replay_map_free(map);
    /* A [batch, 16] recording: sequence 1 starts at row 16, so 5 .. 15 become 16 .. 26. */
    rc.tp = 0; rc.tp_rank = 0; rc.sequence_parallel = 0; rc.cp_rank = 0;
    rc.record_offsets = padded_batch;
    PP_CHECK_OK(pp_replay_map_build(plan, 0, &rc, &map, &err), &err);
    if (map) PP_CHECK(map->rows[0] == 0 && map->rows[4] == 16 && map->rows[8] == 26 && map->rows[9] == -1);
    pp_replay_map_free(map);
    /* A stage of dense layers only has nothing to replay. */
    rc.record_offsets = NULL;
    rc.first_layer = 0; rc.last_layer = 1;
    PP_CHECK_OK(pp_replay_map_build(plan, 0, &rc, &map, &err), &err);
    if (map) { PP_CHECK_INT(map->num_layers, 0); PP_CHECK_INT(map->num_tokens, 0); PP_CHECK(map->rows == NULL); }
    pp_replay_map_free(map);
    /* Errors. */
    rc.last_layer = 2; rc.cp_rank = 2;
    PP_CHECK_FAILS(pp_replay_map_build(plan, 0, &rc, &map, &err), &err, PP_EINVAL, "cp_rank=2: must be in 0 .. cp-1 = 1");
    rc.cp_rank = 0;
    PP_CHECK_FAILS(pp_replay_map_build(plan, 1, &rc, &map, &err), &err, PP_EINVAL, "bin=1");
    rc.tp = 3; rc.tp_rank = 0; rc.sequence_parallel = 1;
    PP_CHECK_FAILS(pp_replay_map_build(plan, 0, &rc, &map, &err), &err, PP_EINVAL,
                   "sequence_parallel: the 10 tokens of cp rank 0 do not split evenly over tp=3");
    rc.tp = 2; rc.tp_rank = 2;
    PP_CHECK_FAILS(pp_replay_map_build(plan, 0, &rc, &map, &err), &err, PP_EINVAL, "tp_rank=2");
    PP_CHECK(map == NULL);
    pp_pack_plan_free(plan);
}

/* The host gather: recording [rows, 3 slots, topk 2] with value row*100 + slot*10 + k. */
static void replay_gather_copies_rows_at_the_layer_slot_and_marks_padding(void)
{
    static const int32_t lengths[2] = { 5, 11 };
    int32_t recording[16 * 3 * 2], dst[2 * 10 * 2];
    pp_pack_plan_config pc;
    pp_pack_plan *plan = NULL;
    pp_replay_config rc;
    pp_replay_map *map = NULL;
    pp_error err;
    int r, s, k;
    for (r = 0; r < 16; r++) for (s = 0; s < 3; s++) for (k = 0; k < 2; k++) recording[(r * 3 + s) * 2 + k] = r * 100 + s * 10 + k;
    memset(&pc, 0, sizeof pc);
    pc.pack.capacity = 20; pc.pack.algo = PP_PACK_CONCATENATIVE; pc.cp = 2;
    PP_CHECK_OK(pp_pack_plan_build(lengths, 2, &pc, &plan, &err), &err);
    if (!plan) return;
    memset(&rc, 0, sizeof rc);
    rc.model.num_layers = 3;                  /* all MoE; this stage holds layers 1 and 2 */
    rc.first_layer = 1; rc.last_layer = 3;
    PP_CHECK_OK(pp_replay_map_build(plan, 0, &rc, &map, &err), &err);
    if (!map) { pp_pack_plan_free(plan); return; }
    PP_CHECK_INT(map->num_layers, 2);
    PP_CHECK_OK(pp_replay_gather(map, recording, 16, 3, 2, dst, &err), &err);
    /* layer slot 1, local token 4 = row 5: 5*100 + 10 + k; token 2 is padding. */
    PP_CHECK_INT(dst[(0 * 10 + 4) * 2 + 0], 510);
    PP_CHECK_INT(dst[(0 * 10 + 4) * 2 + 1], 511);
    PP_CHECK_INT(dst[(1 * 10 + 7) * 2 + 1], 1421);   /* slot 2, token 7 = row 14 */
    PP_CHECK_INT(dst[(1 * 10 + 2) * 2 + 0], -1);
    PP_CHECK_INT(dst[(1 * 10 + 2) * 2 + 1], -1);
    PP_CHECK_FAILS(pp_replay_gather(map, recording, 15, 3, 2, dst, &err), &err, PP_EINVAL,
                   "recorded row 15 is past the recording's 15 rows");
    PP_CHECK_FAILS(pp_replay_gather(map, recording, 16, 2, 2, dst, &err), &err, PP_EINVAL,
                   "layer 2: slot 2 is outside the recording's 2 layer slots");
    PP_CHECK_FAILS(pp_replay_gather(map, recording, 16, 3, 0, dst, &err), &err, PP_EINVAL, "topk=0");
    pp_replay_map_free(map);
    pp_pack_plan_free(plan);
}

static uint32_t rng_state = 4242u;
static uint32_t rnd(void) { rng_state ^= rng_state << 13; rng_state ^= rng_state >> 17; rng_state ^= rng_state << 5; return rng_state; }

/* Over a whole random batch (every microbatch, every cp and tp rank) each recorded row is
 * replayed exactly once, and the non-padding local tokens are exactly the real tokens. */
static void every_recorded_row_is_replayed_once_across_all_ranks(void)
{
    int trial;
    for (trial = 0; trial < 30; trial++) {
        int n = 1 + (int)(rnd() % 60), i, b, r, t, ok = 1;
        int32_t lengths[60];
        int64_t total = 0;
        char *seen;
        pp_pack_plan_config pc;
        pp_pack_plan *plan = NULL;
        pp_error err;
        for (i = 0; i < n; i++) { lengths[i] = 1 + (int32_t)(rnd() % 300); total += lengths[i]; }
        memset(&pc, 0, sizeof pc);
        pc.pack.capacity = 1200; pc.pack.algo = (pp_pack_algo)(rnd() % PP_PACK_ALGO_COUNT);
        pc.cp = 1 + (int)(rnd() % 4); pc.tp = 1 + (int)(rnd() % 2); pc.dp = 1 + (int)(rnd() % 2); pc.pp = 1 + (int)(rnd() % 3);
        if (pp_pack_plan_build(lengths, n, &pc, &plan, &err) != PP_OK) {
            PP_CHECK_MSG(strstr(err.message, "only") != NULL, "trial %d: %s", trial, err.message);
            continue;
        }
        seen = (char *)calloc((size_t)total, 1);
        for (b = 0; b < plan->num_bins; b++)
            for (r = 0; r < plan->cp; r++) {
                int tr;
                for (tr = 0; tr < plan->tp; tr++) {
                    pp_replay_config rc;
                    pp_replay_map *map = NULL;
                    memset(&rc, 0, sizeof rc);
                    rc.model.num_layers = 2; rc.first_layer = 0; rc.last_layer = 2;
                    rc.cp_rank = r; rc.tp = plan->tp; rc.tp_rank = tr; rc.sequence_parallel = 1;
                    if (pp_replay_map_build(plan, b, &rc, &map, &err) != PP_OK) { ok = 0; continue; }
                    for (t = 0; t < map->num_tokens; t++) {
                        int64_t row = map->rows[t];
                        if (row < -1 || row >= total || (row >= 0 && seen[row]++)) ok = 0;
                    }
                    pp_replay_map_free(map);
                }
            }
        for (i = 0; i < total; i++) if (!seen[i]) ok = 0;
        PP_CHECK_MSG(ok, "trial %d: rows not replayed exactly once (%d sequences, cp %d, tp %d, %s)", trial, n, plan->cp,
                     plan->tp, pp_pack_algo_name(pc.pack.algo));
        free(seen);
        pp_pack_plan_free(plan);
    }
}

/* The same 27-layer model through the layers section: Megatron's moe_layer_freq "[0]+[1]*26",
 * pp 2, 13 layers on the first stage. Rank 1 builds layers [13, 27); its MoE slots 12 .. 25
 * equal the layers section's own MoE indices (pp_layers_type_range). */
static void replay_config_from_a_layer_split(void)
{
    pp_layers_config lc;
    pp_layers *l = NULL;
    pp_replay_config rc;
    pp_error err;
    int32_t layers[27], payload[27];
    int count, first, cnt, i;
    memset(&lc, 0, sizeof lc);
    lc.num_layers = 27; lc.pp = 2; lc.first = 13; lc.moe_layer_freq = "[0]+[1]*26";
    PP_CHECK_OK(pp_layers_build(&lc, &l, &err), &err);
    if (!l) return;
    memset(&rc, 0, sizeof rc);
    PP_CHECK_OK(pp_replay_config_from_layers(l, 1, 0, &rc, &err), &err);
    PP_CHECK_INT(rc.first_layer, 13);
    PP_CHECK_INT(rc.last_layer, 27);
    PP_CHECK_INT(pp_moe_count(&rc.model), 26);
    PP_CHECK_OK(pp_moe_stage_layers(&rc.model, rc.first_layer, rc.last_layer, layers, payload, &count, &err), &err);
    PP_CHECK_OK(pp_layers_type_range(l, 1, PP_LAYER_MOE, &first, &cnt, &err), &err);
    PP_CHECK_INT(count, cnt);
    for (i = 0; i < count; i++) {
        PP_CHECK_INT(payload[i], first + i);
        PP_CHECK_INT(payload[i], pp_layers_type_index(l, layers[i], PP_LAYER_MOE));
    }
    PP_CHECK_OK(pp_replay_config_from_layers(l, 0, 0, &rc, &err), &err);
    PP_CHECK(rc.first_layer == 0 && rc.last_layer == 13);
    PP_CHECK_FAILS(pp_replay_config_from_layers(l, 2, 0, &rc, &err), &err, PP_EINVAL, "pp_rank=2, chunk=0");
    pp_layers_free(l);
}

/* Under the V placement (zbv, dualpipev) rank r's chunk 1 is stage 2*pp-1-r, so the replay
 * config is taken by stage: pp 2, vpp 2, 8 layers in stages of 2, 2, 2, 2, every other layer MoE.
 * Rank 0's chunk 1 is stage 3 (layers 6, 7), which the looped numbering (chunk*pp + rank = 2)
 * would have taken for layers 4, 5. */
static void replay_config_by_stage_follows_the_v_placement(void)
{
    pp_layers_config lc;
    pp_layers *l = NULL;
    pp_schedule_config sc;
    pp_schedule *s = NULL;
    pp_replay_config rc;
    pp_error err;
    memset(&lc, 0, sizeof lc);
    lc.num_layers = 8; lc.pp = 2; lc.vpp = 2; lc.moe_layer_freq = "2";
    PP_CHECK_OK(pp_layers_build(&lc, &l, &err), &err);
    memset(&sc, 0, sizeof sc);
    sc.kind = PP_ZBV; sc.pp = 2; sc.mb = 4;
    PP_CHECK_OK(pp_schedule_build(&sc, &s, &err), &err);
    if (!l || !s) { pp_layers_free(l); pp_schedule_free(s); return; }
    memset(&rc, 0, sizeof rc);
    PP_CHECK_INT(pp_rank_chunk_stage(s, 0, 1), 3);
    PP_CHECK_OK(pp_replay_config_from_stage(l, pp_rank_chunk_stage(s, 0, 1), &rc, &err), &err);
    PP_CHECK(rc.first_layer == 6 && rc.last_layer == 8);
    PP_CHECK_OK(pp_replay_config_from_layers(l, 0, 1, &rc, &err), &err);   /* looped: stage 2 */
    PP_CHECK(rc.first_layer == 4 && rc.last_layer == 6);
    PP_CHECK_FAILS(pp_replay_config_from_stage(l, 4, &rc, &err), &err, PP_EINVAL, "stage=4: the split has 4 stages");
    pp_schedule_free(s);
    pp_layers_free(l);
}

const pp_test_case pp_suite_replay[] = {
    PP_TEST(moe_layout_follows_megatron_freq_and_first_k_dense),
    PP_TEST(uneven_27_layer_split_lines_up_with_the_recording),
    PP_TEST(stages_in_a_row_cover_every_moe_slot_once),
    PP_TEST(rows_of_two_packed_sequences_under_cp2),
    PP_TEST(replay_gather_copies_rows_at_the_layer_slot_and_marks_padding),
    PP_TEST(every_recorded_row_is_replayed_once_across_all_ranks),
    PP_TEST(replay_config_from_a_layer_split),
    PP_TEST(replay_config_by_stage_follows_the_v_placement),
    {0}
};
