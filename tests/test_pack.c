/* Tests of >>pack: the packers reproduce NeMo RL / Megatron-LM outcomes exactly, the bin-count
 * constraints follow NeMo RL's rules, and the distributed plan pads and assigns as documented. */
#include <stdlib.h>
#include "pp_test.h"

/* Bin b of a packing as a freshly compared list. */
static int pack_bin_equals(const pp_packing *p, int b, const int32_t *want, int n)
{
    int k;
    if (p->bin_offsets[b + 1] - p->bin_offsets[b] != n) return 0;
    for (k = 0; k < n; k++) if (p->seqs[p->bin_offsets[b] + k] != want[k]) return 0;
    return 1;
}

/* Every sequence in exactly one bin, no bin over capacity or over the sequence cap, bin_tokens
 * right, no empty bin. */
static int pack_is_valid(const pp_packing *p, const int32_t *lengths, int n, int32_t capacity, int max_seqs)
{
    char *seen = (char *)calloc((size_t)(n > 0 ? n : 1), 1);
    int b, k, ok = p->num_seqs == n && p->bin_offsets[0] == 0 && p->bin_offsets[p->num_bins] == n;
    for (b = 0; ok && b < p->num_bins; b++) {
        int64_t sum = 0;
        int cnt = p->bin_offsets[b + 1] - p->bin_offsets[b];
        if (cnt < 1 || (max_seqs && cnt > max_seqs)) ok = 0;
        for (k = p->bin_offsets[b]; ok && k < p->bin_offsets[b + 1]; k++) {
            int s = p->seqs[k];
            if (s < 0 || s >= n || seen[s]) { ok = 0; break; }
            seen[s] = 1;
            sum += lengths[s];
        }
        if (sum > capacity || sum != p->bin_tokens[b]) ok = 0;
    }
    free(seen);
    return ok;
}

/* --- the reference vectors ----------------------------------------------------------------- */

static int read_ints(const char *line, int32_t *out, int cap)
{
    int n = 0;
    char *end;
    while (*line) {
        long v = strtol(line, &end, 10);
        if (end == line) break;
        if (n < cap) out[n] = (int32_t)v;
        n++;
        line = end;
    }
    return n;
}

/* tests/data/pack_vectors.txt comes from tests/data/pack_reference.py, which packs the slow way
 * NeMo RL's and Megatron-LM's Python does; every bin, its order and its contents' order must
 * match. */
static void pack_all_algorithms_match_the_python_reference_vectors(void)
{
    char path[4200], line[65536], algo_name[64];
    FILE *f;
    int cases = 0, errors = 0;
    static int32_t lengths[8192], want[8192];
    snprintf(path, sizeof path, "%s/pack_vectors.txt", pp_test_data_dir());
    f = fopen(path, "r");
    PP_CHECK_MSG(f != NULL, "cannot open %s", path);
    if (!f) return;
    while (fgets(line, sizeof line, f)) {
        pp_pack_config cfg;
        pp_packing *p = NULL;
        pp_error err;
        pp_status st;
        int id, cap, minb, mult, maxseq, delta, n = 0, b = 0, failed = 0;
        unsigned long long seed;
        if (strncmp(line, "case ", 5) != 0) continue;
        if (sscanf(line, "case %d %63s capacity=%d min=%d multiple=%d maxseq=%d seed=%llu delta=%d", &id, algo_name,
                   &cap, &minb, &mult, &maxseq, &seed, &delta) != 8) {
            PP_CHECK_MSG(0, "bad case line: %s", line);
            break;
        }
        memset(&cfg, 0, sizeof cfg);
        PP_CHECK_OK(pp_pack_algo_parse(algo_name, &cfg.algo, &err), &err);
        cfg.capacity = cap; cfg.min_bin_count = minb; cfg.bin_count_multiple = mult;
        cfg.max_sequences_per_bin = maxseq; cfg.seed = seed; cfg.knapsack_delta = delta;
        if (!fgets(line, sizeof line, f) || strncmp(line, "lengths", 7) != 0) { PP_CHECK(0); break; }
        n = read_ints(line + 7, lengths, 8192);
        st = pp_pack(lengths, n, &cfg, &p, &err);
        cases++;
        while (fgets(line, sizeof line, f) && strncmp(line, "end", 3) != 0) {
            if (strncmp(line, "error", 5) == 0) {
                errors++;
                PP_CHECK_MSG(st == PP_EINVAL && strstr(err.message, "only"), "case %d: expected the too-few-"
                             "sequences error, got %s", id, pp_status_name(st));
                failed = 1;
            } else if (strncmp(line, "bin", 3) == 0) {
                int cnt = read_ints(line + 3, want, 8192);
                if (st != PP_OK) { if (!failed) PP_CHECK_MSG(0, "case %d (%s): %s", id, algo_name, err.message); failed = 1; continue; }
                if (b >= p->num_bins || !pack_bin_equals(p, b, want, cnt)) {
                    if (!failed) PP_CHECK_MSG(0, "case %d (%s): bin %d differs from the reference", id, algo_name, b);
                    failed = 1;
                }
                b++;
            }
        }
        if (st == PP_OK && !failed) PP_CHECK_MSG(b == p->num_bins, "case %d (%s): %d bins, reference %d", id,
                                                 algo_name, p->num_bins, b);
        if (st == PP_OK) PP_CHECK(pack_is_valid(p, lengths, n, cfg.capacity, cfg.max_sequences_per_bin));
        pp_packing_free(p);
    }
    fclose(f);
    PP_CHECK(cases >= 60);
    PP_CHECK(errors >= 1);
}

/* --- hand-worked examples ------------------------------------------------------------------- */

/* Lengths 5 5 5 5 3 3 3 2 2 2 2 1, capacity 10. FFD order (longest first, higher index first on
 * ties): 3 2 1 0 6 5 4 10 9 8 7 11. 3+2 fill bin 0, 1+0 bin 1; 6,5,4 (3 each) open bin 2 (9);
 * 10 (2) does not fit bin 2 (room 1): bin 3, so do 9 8 7 (bin 3 = 8); 11 (1) goes to bin 2. */
static void ffd_worked_example_places_ties_higher_index_first(void)
{
    static const int32_t len[12] = { 5, 5, 5, 5, 3, 3, 3, 2, 2, 2, 2, 1 };
    static const int32_t b0[] = { 3, 2 }, b1[] = { 1, 0 }, b2[] = { 6, 5, 4, 11 }, b3[] = { 10, 9, 8, 7 };
    pp_pack_config cfg;
    pp_packing *p = NULL;
    pp_error err;
    memset(&cfg, 0, sizeof cfg);
    cfg.capacity = 10;
    PP_CHECK_OK(pp_pack(len, 12, &cfg, &p, &err), &err);
    if (!p) return;
    PP_CHECK_INT(p->num_bins, 4);
    PP_CHECK(pack_bin_equals(p, 0, b0, 2));
    PP_CHECK(pack_bin_equals(p, 1, b1, 2));
    PP_CHECK(pack_bin_equals(p, 2, b2, 4));
    PP_CHECK(pack_bin_equals(p, 3, b3, 4));
    PP_CHECK_INT(p->bin_tokens[2], 10);
    PP_CHECK_INT(p->total_tokens, 38);
    pp_packing_free(p);
}

/* Best fit, same order, capacity 11: 3 2 fill bin 0 (room 1), 1 0 bin 1 (room 1), 6 5 4 open
 * bin 2 (room 2). 10 (2) fits only bin 2 and fills it. 9 8 7 open bin 3 (room 5). 11 (1) fits
 * bins 0, 1 (room 1) and 3 (room 5): the tightest, earliest on ties, is bin 0. First fit would
 * have given the same here except that best fit never looks at bin 3's larger room. */
static void bfd_worked_example_chooses_the_tightest_bin(void)
{
    static const int32_t len[12] = { 5, 5, 5, 5, 3, 3, 3, 2, 2, 2, 2, 1 };
    static const int32_t b0[] = { 3, 2, 11 }, b1[] = { 1, 0 }, b2[] = { 6, 5, 4, 10 }, b3[] = { 9, 8, 7 };
    pp_pack_config cfg;
    pp_packing *p = NULL;
    pp_error err;
    memset(&cfg, 0, sizeof cfg);
    cfg.capacity = 11;
    cfg.algo = PP_PACK_BFD;
    PP_CHECK_OK(pp_pack(len, 12, &cfg, &p, &err), &err);
    if (!p) return;
    PP_CHECK_INT(p->num_bins, 4);
    PP_CHECK(pack_bin_equals(p, 0, b0, 3));
    PP_CHECK(pack_bin_equals(p, 1, b1, 2));
    PP_CHECK(pack_bin_equals(p, 2, b2, 4));
    PP_CHECK(pack_bin_equals(p, 3, b3, 3));
    PP_CHECK_INT(p->bin_tokens[2], 11);
    pp_packing_free(p);
}

/* Constraints: FFD of 4 4 1 1 1 1 into 10 gives [1 0 5 4] [3 2] (4+4+1+1, 1+1). min_bin_count 5
 * needs 3 more bins; sources from most sequences: bin 0 (4), then bin 1 (2). New bins take the
 * last sequence of bin 0 until one is left: 4, 5... bin 0 is [1 0 5 4]: moves 4, then 5, then 0,
 * leaving [1]. Result [1] [3 2] [4] [5] [0]. */
static void extra_bins_take_the_last_sequence_of_the_fullest_bin(void)
{
    static const int32_t len[6] = { 4, 4, 1, 1, 1, 1 };
    static const int32_t b0[] = { 1 }, b1[] = { 3, 2 }, b2[] = { 4 }, b3[] = { 5 }, b4[] = { 0 };
    pp_pack_config cfg;
    pp_packing *p = NULL;
    pp_error err;
    memset(&cfg, 0, sizeof cfg);
    cfg.capacity = 10;
    cfg.min_bin_count = 5;
    PP_CHECK_OK(pp_pack(len, 6, &cfg, &p, &err), &err);
    if (!p) return;
    PP_CHECK_INT(p->num_bins, 5);
    PP_CHECK(pack_bin_equals(p, 0, b0, 1));
    PP_CHECK(pack_bin_equals(p, 1, b1, 2));
    PP_CHECK(pack_bin_equals(p, 2, b2, 1));
    PP_CHECK(pack_bin_equals(p, 3, b3, 1));
    PP_CHECK(pack_bin_equals(p, 4, b4, 1));
    pp_packing_free(p);
    /* bin_count_multiple 4 with 2 natural bins: 4 bins. */
    cfg.min_bin_count = 0;
    cfg.bin_count_multiple = 4;
    PP_CHECK_OK(pp_pack(len, 6, &cfg, &p, &err), &err);
    if (p) PP_CHECK_INT(p->num_bins, 4);
    pp_packing_free(p);
    /* Already a multiple: untouched. */
    cfg.bin_count_multiple = 2;
    PP_CHECK_OK(pp_pack(len, 6, &cfg, &p, &err), &err);
    if (p) PP_CHECK_INT(p->num_bins, 2);
    pp_packing_free(p);
}

/* NeMo RL's ConcatenativePacker docstring: [4,1,3,2,1,3,4,5] into 5 -> [0,1] [2,3] [4,5] [6] [7]. */
static void concatenative_matches_the_nemo_rl_docstring(void)
{
    static const int32_t len[8] = { 4, 1, 3, 2, 1, 3, 4, 5 };
    static const int32_t b0[] = { 0, 1 }, b1[] = { 2, 3 }, b2[] = { 4, 5 }, b3[] = { 6 }, b4[] = { 7 };
    pp_pack_config cfg;
    pp_packing *p = NULL;
    pp_error err;
    memset(&cfg, 0, sizeof cfg);
    cfg.capacity = 5;
    cfg.algo = PP_PACK_CONCATENATIVE;
    PP_CHECK_OK(pp_pack(len, 8, &cfg, &p, &err), &err);
    if (!p) return;
    PP_CHECK_INT(p->num_bins, 5);
    PP_CHECK(pack_bin_equals(p, 0, b0, 2) && pack_bin_equals(p, 1, b1, 2) && pack_bin_equals(p, 2, b2, 2) &&
             pack_bin_equals(p, 3, b3, 1) && pack_bin_equals(p, 4, b4, 1));
    pp_packing_free(p);
}

/* --- errors --------------------------------------------------------------------------------- */

static void bad_lengths_and_configs_name_the_value_and_the_rule(void)
{
    int32_t len[4] = { 3, 9, 2, 1 };
    pp_pack_config cfg;
    pp_packing *p = NULL;
    pp_error err;
    memset(&cfg, 0, sizeof cfg);
    cfg.capacity = 8;
    PP_CHECK_FAILS(pp_pack(len, 4, &cfg, &p, &err), &err, PP_EINVAL, "lengths[1]=9: exceeds the bin capacity (8)");
    PP_CHECK(p == NULL);
    len[1] = 0;
    PP_CHECK_FAILS(pp_pack(len, 4, &cfg, &p, &err), &err, PP_EINVAL, "lengths[1]=0: a sequence needs at least 1 token");
    len[1] = -4;
    PP_CHECK_FAILS(pp_pack(len, 4, &cfg, &p, &err), &err, PP_EINVAL, "lengths[1]=-4");
    len[1] = 2;
    cfg.min_bin_count = 5;
    PP_CHECK_FAILS(pp_pack(len, 4, &cfg, &p, &err), &err, PP_EINVAL, "5 bins are needed but there are only 4 sequences");
    cfg.min_bin_count = 0;
    cfg.bin_count_multiple = -2;
    PP_CHECK_FAILS(pp_pack(len, 4, &cfg, &p, &err), &err, PP_EINVAL, "bin_count_multiple=-2");
    cfg.bin_count_multiple = 0;
    cfg.min_bin_count = -1;
    PP_CHECK_FAILS(pp_pack(len, 4, &cfg, &p, &err), &err, PP_EINVAL, "min_bin_count=-1");
    cfg.min_bin_count = 0;
    cfg.max_sequences_per_bin = -1;
    PP_CHECK_FAILS(pp_pack(len, 4, &cfg, &p, &err), &err, PP_EINVAL, "max_sequences_per_bin=-1");
    cfg.max_sequences_per_bin = 0;
    cfg.capacity = 0;
    PP_CHECK_FAILS(pp_pack(len, 4, &cfg, &p, &err), &err, PP_EINVAL, "capacity=0");
    cfg.capacity = 8;
    cfg.algo = (pp_pack_algo)42;
    PP_CHECK_FAILS(pp_pack(len, 4, &cfg, &p, &err), &err, PP_EINVAL, "algo=42");
    cfg.algo = PP_PACK_FFD;
    PP_CHECK_FAILS(pp_pack(NULL, 4, &cfg, &p, &err), &err, PP_EINVAL, "lengths: NULL");
    PP_CHECK_FAILS(pp_pack(len, -1, &cfg, &p, &err), &err, PP_EINVAL, "n=-1");
    PP_CHECK_FAILS(pp_pack(len, 4, NULL, &p, &err), &err, PP_EINVAL, "cfg");
    PP_CHECK(pp_pack(len, 4, &cfg, NULL, NULL) == PP_EINVAL);   /* NULL error is allowed */
    /* No sequences: no bins, unless bins are demanded. */
    PP_CHECK_OK(pp_pack(len, 0, &cfg, &p, &err), &err);
    if (p) PP_CHECK_INT(p->num_bins, 0);
    pp_packing_free(p);
    cfg.min_bin_count = 1;
    PP_CHECK_FAILS(pp_pack(len, 0, &cfg, &p, &err), &err, PP_EINVAL, "only 0 sequences");
}

static void algorithm_names_parse_in_any_case_and_short_form(void)
{
    pp_pack_algo a;
    pp_error err;
    int i;
    for (i = 0; i < (int)PP_PACK_ALGO_COUNT; i++) {
        PP_CHECK_OK(pp_pack_algo_parse(pp_pack_algo_name((pp_pack_algo)i), &a, &err), &err);
        PP_CHECK_INT(a, i);
    }
    PP_CHECK_OK(pp_pack_algo_parse("FIRST_FIT_DECREASING", &a, &err), &err);   /* NeMo RL's enum name */
    PP_CHECK_INT(a, PP_PACK_FFD);
    PP_CHECK_OK(pp_pack_algo_parse("mffd", &a, &err), &err);
    PP_CHECK_INT(a, PP_PACK_MFFD);
    PP_CHECK_FAILS(pp_pack_algo_parse("next_fit", &a, &err), &err, PP_EINVAL, "algo=next_fit: unknown");
    PP_CHECK_STR(pp_pack_algo_name((pp_pack_algo)99), "unknown");
}

static void lower_bound_is_the_ceiling_of_tokens_over_capacity(void)
{
    static const int32_t len[3] = { 10, 10, 1 };
    PP_CHECK_INT(pp_pack_lower_bound(len, 3, 7), 3);
    PP_CHECK_INT(pp_pack_lower_bound(len, 3, 21), 1);
    PP_CHECK_INT(pp_pack_lower_bound(len, 3, 20), 2);
    PP_CHECK_INT(pp_pack_lower_bound(len, 0, 20), 0);
}

/* --- fast equals slow ----------------------------------------------------------------------- */

static uint32_t rng_state = 12345u;
static uint32_t rnd(void) { rng_state ^= rng_state << 13; rng_state ^= rng_state >> 17; rng_state ^= rng_state << 5; return rng_state; }

static int cmp_desc_pairs(const void *x, const void *y)   /* (length, index) both descending */
{
    const int32_t *a = (const int32_t *)x, *b = (const int32_t *)y;
    if (a[0] != b[0]) return a[0] > b[0] ? -1 : 1;
    return a[1] > b[1] ? -1 : (a[1] < b[1] ? 1 : 0);
}

/* The O(n * bins) first fit / best fit on FFD order, as NeMo RL scans; bin_of[i] out. */
static int naive_fit(const int32_t *len, int n, int32_t cap, int best, int max_seqs, int32_t *bin_of, int32_t *order_out)
{
    int32_t *pairs = (int32_t *)malloc(sizeof(int32_t) * 2 * (size_t)n);
    int32_t *room = (int32_t *)malloc(sizeof(int32_t) * (size_t)n), *cnt = (int32_t *)calloc((size_t)n, sizeof(int32_t));
    int i, b, bins = 0;
    for (i = 0; i < n; i++) { pairs[2 * i] = len[i]; pairs[2 * i + 1] = i; }
    qsort(pairs, (size_t)n, 2 * sizeof(int32_t), cmp_desc_pairs);
    for (i = 0; i < n; i++) {
        int32_t l = pairs[2 * i], s = pairs[2 * i + 1];
        int pick = -1;
        for (b = 0; b < bins; b++) {
            if (room[b] < l || (max_seqs && cnt[b] >= max_seqs)) continue;
            if (!best) { pick = b; break; }
            if (pick < 0 || room[b] < room[pick]) pick = b;
        }
        if (pick < 0) { pick = bins++; room[pick] = cap; }
        room[pick] -= l; cnt[pick]++;
        bin_of[s] = pick;
        order_out[i] = s;
    }
    free(pairs); free(room); free(cnt);
    return bins;
}

/* The tree-based first fit and treap-based best fit give exactly the bins of the scanning
 * versions, including past 2048 bins (where the tournament tree over blocks of bins grows). */
static void tree_first_fit_and_best_fit_equal_the_scanning_versions(void)
{
    int trial;
    for (trial = 0; trial < 24; trial++) {
        int n = trial < 20 ? (int)(rnd() % 400) + 1 : 6000, i, k, best = trial % 2, ok = 1;
        int32_t cap = trial < 20 ? (int32_t)(rnd() % 100) + 1 : 10;
        int max_seqs = trial % 3 == 0 ? (int)(rnd() % 4) + 1 : 0;
        int32_t *len = (int32_t *)malloc(sizeof(int32_t) * (size_t)n), *bin_of = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
        int32_t *order = (int32_t *)malloc(sizeof(int32_t) * (size_t)n), *pos = (int32_t *)calloc((size_t)n + 1, sizeof(int32_t));
        pp_pack_config cfg;
        pp_packing *p = NULL;
        pp_error err;
        int bins;
        for (i = 0; i < n; i++) len[i] = (int32_t)(rnd() % (uint32_t)cap) + 1;
        bins = naive_fit(len, n, cap, best, max_seqs, bin_of, order);
        memset(&cfg, 0, sizeof cfg);
        cfg.capacity = cap; cfg.algo = best ? PP_PACK_BFD : PP_PACK_FFD; cfg.max_sequences_per_bin = max_seqs;
        PP_CHECK_OK(pp_pack(len, n, &cfg, &p, &err), &err);
        if (!p) { free(len); free(bin_of); free(order); free(pos); continue; }
        if (trial >= 20) PP_CHECK(p->num_bins > 2048);
        PP_CHECK_INT(p->num_bins, bins);
        /* Same bin for every sequence, same order inside each bin. */
        for (i = 0; i < n && ok; i++) {
            int s = order[i], b = bin_of[s];
            if (b >= p->num_bins) { ok = 0; break; }
            k = p->bin_offsets[b] + pos[b]++;
            if (k >= p->bin_offsets[b + 1] || p->seqs[k] != s) ok = 0;
        }
        PP_CHECK_MSG(ok, "trial %d (%s, n=%d, capacity=%d, max_seqs=%d): bins differ from the scan", trial,
                     best ? "bfd" : "ffd", n, (int)cap, max_seqs);
        pp_packing_free(p);
        free(len); free(bin_of); free(order); free(pos);
    }
}

/* --- properties on random inputs ------------------------------------------------------------ */

static void random_packings_hold_every_sequence_once_within_capacity_and_constraints(void)
{
    int trial;
    for (trial = 0; trial < 140; trial++) {
        int algo = trial % (int)PP_PACK_ALGO_COUNT, n = (int)(rnd() % 300), i;
        int32_t cap = (int32_t)(rnd() % 5000) + 1;
        int32_t *len = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n + 1));
        pp_pack_config cfg;
        pp_packing *p = NULL;
        pp_error err;
        pp_status st;
        int64_t target;
        for (i = 0; i < n; i++) {   /* long-tailed: mostly short, some near capacity */
            uint32_t r = rnd() % 100;
            len[i] = r < 70 ? (int32_t)(rnd() % (uint32_t)(cap / 10 + 1)) + 1 : (int32_t)(rnd() % (uint32_t)cap) + 1;
        }
        memset(&cfg, 0, sizeof cfg);
        cfg.capacity = cap; cfg.algo = (pp_pack_algo)algo;
        cfg.min_bin_count = (int)(rnd() % 8);
        cfg.bin_count_multiple = (int)(rnd() % 5);
        cfg.max_sequences_per_bin = rnd() % 4 == 0 ? (int)(rnd() % 5) + 1 : 0;
        cfg.seed = rnd();
        cfg.knapsack_delta = (int)(rnd() % 7) - 2;
        st = pp_pack(len, n, &cfg, &p, &err);
        if (st != PP_OK) {   /* only ever for too few sequences */
            PP_CHECK_MSG(strstr(err.message, "only") != NULL, "trial %d: %s", trial, err.message);
            free(len);
            continue;
        }
        PP_CHECK_MSG(pack_is_valid(p, len, n, cap, cfg.max_sequences_per_bin), "trial %d (%s) invalid", trial,
                     pp_pack_algo_name(cfg.algo));
        target = p->num_bins;
        PP_CHECK(target >= cfg.min_bin_count);
        if (cfg.bin_count_multiple > 1) PP_CHECK(target % cfg.bin_count_multiple == 0);
        PP_CHECK(p->num_bins >= pp_pack_lower_bound(len, n, cap));
        pp_packing_free(p);
        free(len);
    }
}

/* --- the distributed plan -------------------------------------------------------------------- */

/* tp 2, cp 2: sequences pad to multiples of tp*cp*2 = 8. Lengths 5, 11, 3 -> 8, 16, 8. Capacity
 * 24, dp 1: FFD over padded lengths (16, 8, 8; ties higher index first: 1, 2, 0): bin 0 = [1 2]
 * (24), bin 1 = [0] (8). cu_seqlens [0 11 14] and [0 5]; padded [0 16 24] and [0 8]. */
static void plan_pads_sequences_to_tp_cp_2_and_builds_cu_seqlens(void)
{
    static const int32_t len[3] = { 5, 11, 3 };
    pp_pack_plan_config cfg;
    pp_pack_plan *plan = NULL;
    pp_error err;
    const int32_t *cu, *cup;
    memset(&cfg, 0, sizeof cfg);
    cfg.pack.capacity = 24; cfg.tp = 2; cfg.cp = 2;
    PP_CHECK_OK(pp_pack_plan_build(len, 3, &cfg, &plan, &err), &err);
    if (!plan) return;
    PP_CHECK_INT(plan->seq_multiple, 8);
    PP_CHECK_INT(plan->padded_lengths[0], 8);
    PP_CHECK_INT(plan->padded_lengths[1], 16);
    PP_CHECK_INT(plan->num_bins, 2);
    PP_CHECK_INT(pp_pack_plan_bin_size(plan, 0), 2);
    cu = pp_pack_plan_cu_seqlens(plan, 0);
    cup = pp_pack_plan_cu_seqlens_padded(plan, 0);
    PP_CHECK(cu[0] == 0 && cu[1] == 11 && cu[2] == 14);
    PP_CHECK(cup[0] == 0 && cup[1] == 16 && cup[2] == 24);
    cu = pp_pack_plan_cu_seqlens(plan, 1);
    cup = pp_pack_plan_cu_seqlens_padded(plan, 1);
    PP_CHECK(cu[0] == 0 && cu[1] == 5 && cup[1] == 8);
    PP_CHECK_INT(plan->bin_real_tokens[0], 14);
    PP_CHECK_INT(plan->bin_padded_tokens[0], 24);
    PP_CHECK_INT(plan->bin_padded_tokens[1], 8);
    PP_CHECK(pp_pack_plan_cu_seqlens(plan, 2) == NULL);
    PP_CHECK_INT(pp_pack_plan_bin_size(plan, -1), -1);
    pp_pack_plan_free(plan);
    /* cp = 1, tp = 1: no padding at all (multiple 1). */
    cfg.tp = 0; cfg.cp = 0;
    PP_CHECK_OK(pp_pack_plan_build(len, 3, &cfg, &plan, &err), &err);
    if (plan) { PP_CHECK_INT(plan->seq_multiple, 1); PP_CHECK_INT(plan->padded_lengths[0], 5); }
    pp_pack_plan_free(plan);
}

/* With pp > 1 every microbatch of a rank has one length, the rank's largest; the tail padding
 * joins the bin's last sequence. Lengths 10 6 4 3, capacity 10, dp 2, pp 2: FFD bins [0] (10),
 * [1 2] (10), [3] (3); the multiple of dp makes 4 bins: from the fullest bin [1 2] moves 2 ->
 * [0] [1] [3] [2]. Round robin: rank 0 gets bins 0, 2 (10, 3), rank 1 bins 1, 3 (6, 4).
 * Rank 0 pads to 10, rank 1 to 6: bin 2 = [3] padded [0 10], bin 3 = [2] padded [0 6]. */
static void plan_with_pp_pads_each_ranks_microbatches_to_its_largest(void)
{
    static const int32_t len[4] = { 10, 6, 4, 3 };
    pp_pack_plan_config cfg;
    pp_pack_plan *plan = NULL;
    pp_error err;
    memset(&cfg, 0, sizeof cfg);
    cfg.pack.capacity = 10; cfg.dp = 2; cfg.pp = 2;
    PP_CHECK_OK(pp_pack_plan_build(len, 4, &cfg, &plan, &err), &err);
    if (!plan) return;
    PP_CHECK_INT(plan->num_bins, 4);
    PP_CHECK_INT(plan->num_microbatches, 2);
    PP_CHECK(plan->bins->seqs[plan->bins->bin_offsets[2]] == 3 && plan->bins->seqs[plan->bins->bin_offsets[3]] == 2);
    PP_CHECK(plan->bin_rank[0] == 0 && plan->bin_rank[1] == 1 && plan->bin_rank[2] == 0 && plan->bin_rank[3] == 1);
    PP_CHECK(plan->bin_microbatch[2] == 1 && plan->microbatch_bin[1 * 2 + 1] == 3);
    PP_CHECK_INT(plan->bin_padded_tokens[0], 10);
    PP_CHECK_INT(plan->bin_padded_tokens[2], 10);
    PP_CHECK_INT(plan->bin_padded_tokens[1], 6);
    PP_CHECK_INT(plan->bin_padded_tokens[3], 6);
    PP_CHECK_INT(pp_pack_plan_cu_seqlens_padded(plan, 2)[1], 10);
    PP_CHECK_INT(pp_pack_plan_cu_seqlens(plan, 2)[1], 3);
    pp_pack_plan_free(plan);
    /* All ranks alike: 10 everywhere. */
    cfg.same_shape_all_ranks = 1;
    PP_CHECK_OK(pp_pack_plan_build(len, 4, &cfg, &plan, &err), &err);
    if (plan) PP_CHECK_INT(plan->bin_padded_tokens[3], 10);
    pp_pack_plan_free(plan);
    /* Variable shapes: each keeps its own. */
    cfg.same_shape_all_ranks = 0; cfg.variable_shapes = 1;
    PP_CHECK_OK(pp_pack_plan_build(len, 4, &cfg, &plan, &err), &err);
    if (plan) { PP_CHECK_INT(plan->bin_padded_tokens[2], 3); PP_CHECK_INT(plan->bin_padded_tokens[3], 4); }
    pp_pack_plan_free(plan);
    /* bin_multiple 4 without pp: 10 -> 12, 3 -> 4. */
    cfg.pp = 1; cfg.bin_multiple = 4;
    PP_CHECK_OK(pp_pack_plan_build(len, 4, &cfg, &plan, &err), &err);
    if (plan) { PP_CHECK_INT(plan->bin_padded_tokens[0], 12); PP_CHECK_INT(plan->bin_padded_tokens[2], 4); }
    pp_pack_plan_free(plan);
}

/* Virtual pipelining makes the bin count a multiple of dp*pp; every rank gets the same count. */
static void plan_with_vpp_makes_bins_a_multiple_of_dp_times_pp(void)
{
    int32_t len[40];
    pp_pack_plan_config cfg;
    pp_pack_plan *plan = NULL;
    pp_error err;
    int i, r, b;
    for (i = 0; i < 40; i++) len[i] = 1 + (i * 37) % 50;
    memset(&cfg, 0, sizeof cfg);
    cfg.pack.capacity = 200; cfg.dp = 3; cfg.pp = 4; cfg.vpp = 2;
    PP_CHECK_OK(pp_pack_plan_build(len, 40, &cfg, &plan, &err), &err);
    if (!plan) return;
    PP_CHECK(plan->num_bins % 12 == 0 && plan->num_bins >= 12);
    PP_CHECK_INT(plan->num_microbatches * 3, plan->num_bins);
    for (r = 0; r < 3; r++) {
        int cnt = 0;
        for (b = 0; b < plan->num_bins; b++) cnt += plan->bin_rank[b] == r;
        PP_CHECK_INT(cnt, plan->num_microbatches);
    }
    pp_pack_plan_free(plan);
}

/* Balanced assignment: each rank still gets num_microbatches bins, and the most loaded rank
 * carries no more than round robin's most loaded. */
static void plan_balanced_assignment_evens_out_tokens_per_rank(void)
{
    int trial;
    for (trial = 0; trial < 10; trial++) {
        int32_t len[300];
        int n = 100 + (int)(rnd() % 200), i, b, mode;
        int64_t worst[2] = { 0, 0 };
        for (i = 0; i < n; i++) len[i] = (int32_t)(rnd() % 900) + 1;
        for (mode = 0; mode < 2; mode++) {
            pp_pack_plan_config cfg;
            pp_pack_plan *plan = NULL;
            pp_error err;
            int64_t load[4] = { 0, 0, 0, 0 };
            int cnt[4] = { 0, 0, 0, 0 };
            memset(&cfg, 0, sizeof cfg);
            cfg.pack.capacity = 1000; cfg.dp = 4; cfg.pack.algo = PP_PACK_CONCATENATIVE;
            cfg.assign = mode ? PP_ASSIGN_TOKENS : PP_ASSIGN_ROUND_ROBIN;
            PP_CHECK_OK(pp_pack_plan_build(len, n, &cfg, &plan, &err), &err);
            if (!plan) return;
            for (b = 0; b < plan->num_bins; b++) { load[plan->bin_rank[b]] += plan->bins->bin_tokens[b]; cnt[plan->bin_rank[b]]++; }
            for (i = 0; i < 4; i++) {
                PP_CHECK_INT(cnt[i], plan->num_microbatches);
                if (load[i] > worst[mode]) worst[mode] = load[i];
            }
            for (b = 0; b < plan->num_bins; b++)
                PP_CHECK_INT(plan->microbatch_bin[plan->bin_rank[b] * plan->num_microbatches + plan->bin_microbatch[b]], b);
            pp_pack_plan_free(plan);
        }
        PP_CHECK(worst[1] <= worst[0]);
    }
}

/* Gather map: lengths 5, 11 with cp 2 pad to 8 and 12; in one bin of capacity 20 (FFD: 1 then
 * 0) packed rows are 5..15 of the flat input (sequence 1 starts at 5), then 1 pad, then rows
 * 0..4, then 3 pads. With explicit offsets for a [2, 16] padded batch: 16..26 and 0..4. */
static void gather_map_points_packed_tokens_at_input_rows_and_marks_padding(void)
{
    static const int32_t len[2] = { 5, 11 };
    static const int64_t offsets[2] = { 0, 16 };
    pp_pack_plan_config cfg;
    pp_pack_plan *plan = NULL;
    pp_error err;
    int64_t rows[20];
    int t;
    memset(&cfg, 0, sizeof cfg);
    cfg.pack.capacity = 20; cfg.cp = 2;
    PP_CHECK_OK(pp_pack_plan_build(len, 2, &cfg, &plan, &err), &err);
    if (!plan) return;
    PP_CHECK_INT(plan->num_bins, 1);
    PP_CHECK_INT(plan->bin_padded_tokens[0], 20);
    PP_CHECK_OK(pp_pack_plan_gather(plan, 0, NULL, rows, &err), &err);
    for (t = 0; t < 11; t++) PP_CHECK_INT(rows[t], 5 + t);
    for (t = 11; t < 12; t++) PP_CHECK_INT(rows[t], -1);
    for (t = 12; t < 17; t++) PP_CHECK_INT(rows[t], t - 12);
    for (t = 17; t < 20; t++) PP_CHECK_INT(rows[t], -1);
    PP_CHECK_OK(pp_pack_plan_gather(plan, 0, offsets, rows, &err), &err);
    PP_CHECK_INT(rows[0], 16);
    PP_CHECK_INT(rows[10], 26);
    PP_CHECK_INT(rows[12], 0);
    PP_CHECK_FAILS(pp_pack_plan_gather(plan, 1, NULL, rows, &err), &err, PP_EINVAL, "bin=1");
    pp_pack_plan_free(plan);
}

static void plan_errors_name_the_parameter_and_rule(void)
{
    static const int32_t len[3] = { 5, 11, 3 };
    pp_pack_plan_config cfg;
    pp_pack_plan *plan = NULL;
    pp_error err;
    memset(&cfg, 0, sizeof cfg);
    cfg.pack.capacity = 11; cfg.cp = 2;
    PP_CHECK_FAILS(pp_pack_plan_build(len, 3, &cfg, &plan, &err), &err, PP_EINVAL,
                   "lengths[1]=11: padded to a multiple of 4 it is 12 tokens, more than the bin capacity (11)");
    cfg.pack.capacity = 10; cfg.cp = 1;
    PP_CHECK_FAILS(pp_pack_plan_build(len, 3, &cfg, &plan, &err), &err, PP_EINVAL,
                   "lengths[1]=11: exceeds the bin capacity (10)");
    cfg.pack.capacity = 64; cfg.cp = 2;
    cfg.seq_multiple = 6;
    PP_CHECK_FAILS(pp_pack_plan_build(len, 3, &cfg, &plan, &err), &err, PP_EINVAL,
                   "seq_multiple=6: with cp=2 it must be a multiple of 2*cp=4");
    cfg.seq_multiple = 0;
    cfg.bin_multiple = 6;
    PP_CHECK_FAILS(pp_pack_plan_build(len, 3, &cfg, &plan, &err), &err, PP_EINVAL, "bin_multiple=6");
    cfg.bin_multiple = 0;
    cfg.dp = 2;
    cfg.pack.bin_count_multiple = 3;
    PP_CHECK_FAILS(pp_pack_plan_build(len, 3, &cfg, &plan, &err), &err, PP_EINVAL,
                   "bin_count_multiple=3: must be a multiple of dp (2)");
    cfg.pack.bin_count_multiple = 0;
    cfg.dp = 4;
    PP_CHECK_FAILS(pp_pack_plan_build(len, 3, &cfg, &plan, &err), &err, PP_EINVAL, "only 3 sequences");
    cfg.dp = -1;
    PP_CHECK_FAILS(pp_pack_plan_build(len, 3, &cfg, &plan, &err), &err, PP_EINVAL, "dp=-1");
    PP_CHECK(plan == NULL);
}

const pp_test_case pp_suite_pack[] = {
    PP_TEST(pack_all_algorithms_match_the_python_reference_vectors),
    PP_TEST(ffd_worked_example_places_ties_higher_index_first),
    PP_TEST(bfd_worked_example_chooses_the_tightest_bin),
    PP_TEST(extra_bins_take_the_last_sequence_of_the_fullest_bin),
    PP_TEST(concatenative_matches_the_nemo_rl_docstring),
    PP_TEST(bad_lengths_and_configs_name_the_value_and_the_rule),
    PP_TEST(algorithm_names_parse_in_any_case_and_short_form),
    PP_TEST(lower_bound_is_the_ceiling_of_tokens_over_capacity),
    PP_TEST(tree_first_fit_and_best_fit_equal_the_scanning_versions),
    PP_TEST(random_packings_hold_every_sequence_once_within_capacity_and_constraints),
    PP_TEST(plan_pads_sequences_to_tp_cp_2_and_builds_cu_seqlens),
    PP_TEST(plan_with_pp_pads_each_ranks_microbatches_to_its_largest),
    PP_TEST(plan_with_vpp_makes_bins_a_multiple_of_dp_times_pp),
    PP_TEST(plan_balanced_assignment_evens_out_tokens_per_rank),
    PP_TEST(gather_map_points_packed_tokens_at_input_rows_and_marks_padding),
    PP_TEST(plan_errors_name_the_parameter_and_rule),
    {0}
};
