/* Tests of >>cp: the load-balanced 2*cp split, position for position as Megatron-LM's
 * get_batch_on_this_cp_rank (BSHD) and TransformerEngine's thd_get_partitioned_indices (THD). */
#include <stdlib.h>
#include "pp_test.h"

static int equals(const int32_t *a, const int32_t *b, int n)
{
    int i;
    for (i = 0; i < n; i++) if (a[i] != b[i]) return 0;
    return 1;
}

/* Two sequences of 5 and 11 tokens, cp = 2: each pads to a multiple of 2*cp = 4, so 8 and 12;
 * packed in that order cu_seqlens_padded = 0 8 20. Sequence 0 splits into 4 chunks of 2:
 * [0 1] [2 3] [4 5] [6 7]; sequence 1 into 4 chunks of 3 from 8: [8 9 10] [11 12 13] [14 15 16]
 * [17 18 19]. Rank 0 takes chunks 0 and 3 of each, rank 1 chunks 1 and 2. Of rank 0's tokens,
 * 6 7 (sequence 0, positions 6 7 >= 5) and 19 (sequence 1, position 11 >= 11) are padding. */
static void cp2_two_packed_sequences_of_5_and_11_tokens(void)
{
    static const int32_t cu[3] = { 0, 8, 20 };
    static const int32_t rank0[10] = { 0, 1, 6, 7, 8, 9, 10, 17, 18, 19 };
    static const int32_t rank1[10] = { 2, 3, 4, 5, 11, 12, 13, 14, 15, 16 };
    static const int32_t lengths[2] = { 5, 11 };
    int32_t index[10], source[20], local[3];
    pp_pack_plan_config cfg;
    pp_pack_plan *plan = NULL;
    pp_error err;
    int g;
    PP_CHECK_OK(pp_cp_thd_indices(cu, 2, 2, 0, index, &err), &err);
    PP_CHECK(equals(index, rank0, 10));
    PP_CHECK_OK(pp_cp_thd_indices(cu, 2, 2, 1, index, &err), &err);
    PP_CHECK(equals(index, rank1, 10));
    /* Gathered outputs [rank 0's 10 | rank 1's 10]: position 6 is rank 0's slot 2, 11 rank 1's slot 4. */
    PP_CHECK_OK(pp_cp_thd_gather(cu, 2, 2, source, &err), &err);
    PP_CHECK_INT(source[6], 2);
    PP_CHECK_INT(source[11], 10 + 4);
    for (g = 0; g < 10; g++) { PP_CHECK_INT(source[rank0[g]], g); PP_CHECK_INT(source[rank1[g]], 10 + g); }
    PP_CHECK_OK(pp_cp_thd_local_cu_seqlens(cu, 2, 2, local, &err), &err);
    PP_CHECK(local[0] == 0 && local[1] == 4 && local[2] == 10);
    /* The same through a pack plan: concatenative keeps the order 5, 11. */
    memset(&cfg, 0, sizeof cfg);
    cfg.pack.capacity = 20; cfg.pack.algo = PP_PACK_CONCATENATIVE; cfg.cp = 2;
    PP_CHECK_OK(pp_pack_plan_build(lengths, 2, &cfg, &plan, &err), &err);
    if (!plan) return;
    PP_CHECK_INT(plan->num_bins, 1);
    PP_CHECK(equals(pp_pack_plan_cu_seqlens_padded(plan, 0), cu, 3));
    PP_CHECK_OK(pp_cp_plan_indices(plan, 0, 0, index, &err), &err);
    PP_CHECK(equals(index, rank0, 10));
    PP_CHECK_OK(pp_cp_plan_indices(plan, 0, 1, index, &err), &err);
    PP_CHECK(equals(index, rank1, 10));
    PP_CHECK_FAILS(pp_cp_plan_indices(plan, 0, 2, index, &err), &err, PP_EINVAL, "rank=2");
    PP_CHECK_FAILS(pp_cp_plan_indices(plan, 3, 0, index, &err), &err, PP_EINVAL, "bin=3");
    pp_pack_plan_free(plan);
}

/* BSHD, 8 tokens, cp 2: rank 0 [0 1 6 7], rank 1 [2 3 4 5]. 16 tokens, cp 4, chunks of 2:
 * rank r holds chunks r and 7-r. */
static void bshd_rank_r_holds_chunks_r_and_2cp_minus_1_minus_r(void)
{
    static const int32_t r0[4] = { 0, 1, 6, 7 }, r1[4] = { 2, 3, 4, 5 };
    static const int32_t c4[4][4] = { { 0, 1, 14, 15 }, { 2, 3, 12, 13 }, { 4, 5, 10, 11 }, { 6, 7, 8, 9 } };
    int32_t index[4], source[16];
    pp_error err;
    int r;
    PP_CHECK_OK(pp_cp_bshd_indices(8, 2, 0, index, &err), &err);
    PP_CHECK(equals(index, r0, 4));
    PP_CHECK_OK(pp_cp_bshd_indices(8, 2, 1, index, &err), &err);
    PP_CHECK(equals(index, r1, 4));
    for (r = 0; r < 4; r++) {
        PP_CHECK_OK(pp_cp_bshd_indices(16, 4, r, index, &err), &err);
        PP_CHECK(equals(index, c4[r], 4));
    }
    PP_CHECK_OK(pp_cp_bshd_gather(16, 4, source, &err), &err);
    PP_CHECK_INT(source[15], 3);        /* rank 0, slot 3 */
    PP_CHECK_INT(source[8], 3 * 4 + 2); /* rank 3, slot 2 */
    /* cp 1 is the identity, for any length (no split, so no multiple of 2*cp needed). */
    PP_CHECK_OK(pp_cp_bshd_indices(3, 1, 0, index, &err), &err);
    PP_CHECK(index[0] == 0 && index[1] == 1 && index[2] == 2);
    {
        static const int32_t cu[3] = { 0, 3, 8 };
        int32_t idx[8];
        int g;
        PP_CHECK_OK(pp_cp_thd_indices(cu, 2, 1, 0, idx, &err), &err);
        for (g = 0; g < 8; g++) PP_CHECK_INT(idx[g], g);
        PP_CHECK_OK(pp_cp_thd_gather(cu, 2, 1, idx, &err), &err);
        for (g = 0; g < 8; g++) PP_CHECK_INT(idx[g], g);
    }
}

static uint32_t rng_state = 99u;
static uint32_t rnd(void) { rng_state ^= rng_state << 13; rng_state ^= rng_state >> 17; rng_state ^= rng_state << 5; return rng_state; }

/* TransformerEngine's thd_partition_indices_kernel, token by token: local cu = cu / cp, binary
 * search for the token's sequence, then index += cu_local[seq] * cp + (len/2) * offset with
 * offset = rank in the first half and 2*(cp-1) - rank in the second (the half index itself adds
 * the remaining half). Written from its formula, independent of pipepar's loop. */
static int32_t te_partitioned_index(const int32_t *cu, int batch, int cp, int rank, int32_t token)
{
    int left = 1, right = batch, seq;
    int32_t len, index, offset;
    while (left < right) {   /* the last i with cu[i] / cp <= token */
        int mid = (left + right) / 2;
        if (cu[mid] / cp <= token) left = mid + 1; else right = mid;
    }
    seq = left - 1;
    len = cu[seq + 1] / cp - cu[seq] / cp;
    index = token - cu[seq] / cp;
    offset = index < len / 2 ? rank : (cp - 1) * 2 - rank;
    return index + cu[seq] / cp * cp + len / 2 * offset;
}

/* Megatron-LM's get_batch_on_this_cp_rank for one row: view [2*cp, seq_len/(2*cp)], select rows
 * cp_rank and 2*cp - cp_rank - 1, flatten. */
static int32_t megatron_bshd_index(int32_t seq_len, int cp, int rank, int32_t j)
{
    int32_t chunk = seq_len / (2 * cp), row = j / chunk == 0 ? rank : 2 * cp - rank - 1;
    return row * chunk + j % chunk;
}

/* Random packings and cp sizes: every local position equals TE's / Megatron's; the ranks' index
 * maps together are a permutation of the microbatch and the gather map is its inverse. */
static void random_splits_agree_with_te_and_megatron_and_are_permutations(void)
{
    int trial;
    for (trial = 0; trial < 200; trial++) {
        int cp = 1 + (int)(rnd() % 8), n = 1 + (int)(rnd() % 12), i, r;
        int32_t cu[13], total, local, *index, *source, *seen;
        int ok = 1;
        pp_error err;
        cu[0] = 0;
        for (i = 0; i < n; i++) cu[i + 1] = cu[i] + 2 * cp * (int32_t)(1 + rnd() % 9);
        total = cu[n]; local = total / cp;
        index = (int32_t *)malloc(sizeof(int32_t) * (size_t)local);
        source = (int32_t *)malloc(sizeof(int32_t) * (size_t)total);
        seen = (int32_t *)calloc((size_t)total, sizeof(int32_t));
        PP_CHECK_OK(pp_cp_thd_gather(cu, n, cp, source, &err), &err);
        for (r = 0; r < cp; r++) {
            int32_t j;
            PP_CHECK_OK(pp_cp_thd_indices(cu, n, cp, r, index, &err), &err);
            for (j = 0; j < local; j++) {
                if (index[j] != te_partitioned_index(cu, n, cp, r, j)) ok = 0;
                if (index[j] < 0 || index[j] >= total || seen[index[j]]++) ok = 0;
                else if (source[index[j]] != r * local + j) ok = 0;
            }
        }
        PP_CHECK_MSG(ok, "trial %d: cp=%d, %d sequences", trial, cp, n);
        /* BSHD: one row of the first sequence's length. */
        for (r = 0; r < cp; r++) {
            int32_t j;
            PP_CHECK_OK(pp_cp_bshd_indices(cu[1], cp, r, index, &err), &err);
            for (j = 0; j < cu[1] / cp; j++) if (index[j] != megatron_bshd_index(cu[1], cp, r, j)) ok = 0;
        }
        PP_CHECK_MSG(ok, "trial %d: BSHD differs from Megatron's", trial);
        free(index); free(source); free(seen);
    }
}

/* With pp > 1 the last sequence of a short microbatch takes the tail padding; its padded length
 * stays a multiple of 2*cp, so the split works. Lengths 10, 6, 4, 3, cp 2, capacity 12, pp 2:
 * padded 12, 8, 4, 4. FFD (ties: higher index first): [0] 12, [1 3] 12, [2] 4; with pp 2 every
 * microbatch is padded to 12, so bin 2 = [2] has cu_seqlens_padded 0 12 and splits into chunks
 * of 3: rank 0 holds 0 1 2 9 10 11, rank 1 holds 3 .. 8. Sequence 2 starts at row 10 + 6 = 16 of
 * the flat input and has 4 real tokens: packed positions 0 .. 3. */
static void tail_padding_of_the_last_sequence_splits_like_any_other(void)
{
    static const int32_t lengths[4] = { 10, 6, 4, 3 };
    static const int32_t want0[6] = { 0, 1, 2, 9, 10, 11 }, want1[6] = { 3, 4, 5, 6, 7, 8 };
    pp_pack_plan_config cfg;
    pp_pack_plan *plan = NULL;
    pp_error err;
    int32_t index[6];
    int64_t rows[12];
    memset(&cfg, 0, sizeof cfg);
    cfg.pack.capacity = 12; cfg.cp = 2; cfg.pp = 2;
    PP_CHECK_OK(pp_pack_plan_build(lengths, 4, &cfg, &plan, &err), &err);
    if (!plan) return;
    PP_CHECK_INT(plan->num_bins, 3);
    PP_CHECK_INT(plan->bin_padded_tokens[2], 12);
    PP_CHECK_INT(pp_pack_plan_cu_seqlens_padded(plan, 2)[1], 12);
    PP_CHECK_OK(pp_cp_plan_indices(plan, 2, 0, index, &err), &err);
    PP_CHECK(equals(index, want0, 6));
    PP_CHECK_OK(pp_cp_plan_indices(plan, 2, 1, index, &err), &err);
    PP_CHECK(equals(index, want1, 6));
    PP_CHECK_OK(pp_pack_plan_gather(plan, 2, NULL, rows, &err), &err);
    PP_CHECK(rows[0] == 16 && rows[3] == 19 && rows[4] == -1 && rows[11] == -1);
    /* Rank 0's local tokens 0 1 2 9 10 11 come from rows 16 17 18 and three pads; rank 1's 3 .. 8
     * from row 19 and five pads. */
    PP_CHECK_OK(pp_cp_plan_rows(plan, 2, 0, NULL, rows, &err), &err);
    PP_CHECK(rows[0] == 16 && rows[1] == 17 && rows[2] == 18 && rows[3] == -1 && rows[5] == -1);
    PP_CHECK_OK(pp_cp_plan_rows(plan, 2, 1, NULL, rows, &err), &err);
    PP_CHECK(rows[0] == 19 && rows[1] == -1 && rows[5] == -1);
    PP_CHECK_FAILS(pp_cp_plan_rows(plan, 2, 2, NULL, rows, &err), &err, PP_EINVAL, "rank=2");
    pp_pack_plan_free(plan);
}

static void bad_boundaries_name_the_sequence_and_the_rule(void)
{
    int32_t cu[3] = { 0, 6, 20 }, index[16], source[20];
    pp_error err;
    PP_CHECK_FAILS(pp_cp_thd_indices(cu, 2, 2, 0, index, &err), &err, PP_EINVAL,
                   "sequence 0: padded length 6 is not a multiple of 2*cp=4");
    cu[1] = 24;
    PP_CHECK_FAILS(pp_cp_thd_indices(cu, 2, 2, 0, index, &err), &err, PP_EINVAL,
                   "cu_seqlens_padded[2]=20: smaller than the entry before it (24)");
    cu[0] = 4; cu[1] = 8;
    PP_CHECK_FAILS(pp_cp_thd_gather(cu, 2, 2, source, &err), &err, PP_EINVAL, "cu_seqlens_padded[0]=4: must be 0");
    cu[0] = 0;
    PP_CHECK_FAILS(pp_cp_thd_indices(cu, 2, 2, 2, index, &err), &err, PP_EINVAL, "rank=2: must be in 0 .. cp-1 = 1");
    PP_CHECK_FAILS(pp_cp_thd_indices(cu, 2, 0, 0, index, &err), &err, PP_EINVAL, "cp=0");
    PP_CHECK_FAILS(pp_cp_thd_indices(NULL, 2, 2, 0, index, &err), &err, PP_EINVAL, "cu_seqlens_padded");
    PP_CHECK_FAILS(pp_cp_thd_indices(cu, 2, 2, 0, NULL, &err), &err, PP_EINVAL, "index");
    PP_CHECK_FAILS(pp_cp_bshd_indices(10, 2, 0, index, &err), &err, PP_EINVAL, "seq_len=10: must be a multiple of 2*cp=4");
    PP_CHECK_FAILS(pp_cp_bshd_gather(-4, 2, source, &err), &err, PP_EINVAL, "seq_len=-4");
    PP_CHECK_FAILS(pp_cp_thd_local_cu_seqlens(cu, -1, 2, index, &err), &err, PP_EINVAL, "num_seqs=-1");
    /* No sequences: nothing to do, and that is fine. */
    PP_CHECK_OK(pp_cp_thd_indices(cu, 0, 2, 1, index, &err), &err);
}

const pp_test_case pp_suite_cp[] = {
    PP_TEST(cp2_two_packed_sequences_of_5_and_11_tokens),
    PP_TEST(bshd_rank_r_holds_chunks_r_and_2cp_minus_1_minus_r),
    PP_TEST(random_splits_agree_with_te_and_megatron_and_are_permutations),
    PP_TEST(tail_padding_of_the_last_sequence_splits_like_any_other),
    PP_TEST(bad_boundaries_name_the_sequence_and_the_rule),
    {0}
};
