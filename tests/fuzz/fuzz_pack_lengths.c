/* fuzz_pack_lengths.c — libFuzzer harness for the lengths FILE reader of `pipepar pack` and
 * `pipepar replay` (data_read_lengths in examples/cli_data.c, a static function reading through
 * cli_read_file: this file includes cli_data.c unchanged and redirects its fopen to the fuzz
 * input with fmemopen), then what `pipepar pack` does with the lengths: pp_pack_plan_build
 * (pipepar.h >>pack, every packing algorithm), and the context-parallel split and router-replay
 * map of each microbatch (pipepar.h >>cp, pipepar.h >>replay). Error lines go to stderr: fuzz with
 * -close_fd_mask=2.
 *
 * Input: the lengths file (integers separated by spaces, commas or newlines; '#' comments).
 * Its first line, when a '#' comment, also sets the flags as key=value words: capacity, algo
 * (a pp_pack_algo_parse name), dp, pp, vpp, tp, cp, seq-multiple, microbatch-multiple,
 * min-bins, bin-multiple, max-seqs, seed, delta, assign (round-robin, tokens, attention) and
 * the words variable-shapes, same-shape. Without capacity it is the longest length.
 * On success: the bins hold every sequence once and at most capacity tokens each, the bin count
 * is a multiple of dp and at least the lower bound, microbatch paddings and cu_seqlens agree,
 * and (for microbatches up to 65536 tokens) the gather map, every cp rank's split and rows, and
 * the replay map of a 4-layer all-MoE model build and agree with each other.
 *
 *   clang -std=c99 -D_POSIX_C_SOURCE=200809L -g -O1 -fsanitize=fuzzer,address,undefined \
 *         -fno-sanitize-recover=all tests/fuzz/fuzz_pack_lengths.c tests/fuzz/fuzz_impl.c -o build/fuzz_pack_lengths -lm -lpthread
 *   build/fuzz_pack_lengths -close_fd_mask=2 -max_len=4096 tests/fuzz/corpus/pack_lengths
 * Replay without clang: see replay_main.c. */
#include "fuzz_fopen.h"   /* fopen in examples/cli.h and cli_data.c reads the fuzz input */
#include "../../examples/cli_data.c"
#undef fopen
#include "fuzz_common.h"

/* "key=" at the start of line or after a blank: its integer (clamped), else def. */
static long key_long(const char *line, const char *key, long def, long lo, long hi)
{
    const char *p = line;
    size_t n = strlen(key);
    while ((p = strstr(p, key)) != NULL) {
        if ((p == line || p[-1] == ' ' || p[-1] == '\t') && p[n] == '=') return fuzz_key_long(p + n, "=", def, lo, hi);
        p += n;
    }
    return def;
}

static int key_word(const char *line, const char *key, char *buf, size_t size)
{
    const char *p = line;
    size_t n = strlen(key), k = 0;
    while ((p = strstr(p, key)) != NULL) {
        if ((p == line || p[-1] == ' ' || p[-1] == '\t') && p[n] == '=') {
            p += n + 1;
            while (p[k] && p[k] != ' ' && p[k] != '\t' && p[k] != '\r' && k + 1 < size) k++;
            memcpy(buf, p, k);
            buf[k] = '\0';
            return 1;
        }
        p += n;
    }
    return 0;
}

static void check_plan(const pp_pack_plan *plan, const pp_pack_plan_config *cfg, const int32_t *lengths, int n)
{
    const pp_packing *p = plan->bins;
    unsigned char *seen = (unsigned char *)calloc((size_t)n + 1, 1);
    int b, k, r;
    FUZZ_CHECK(seen != NULL);
    FUZZ_CHECK(plan->num_seqs == n && p->num_seqs == n && plan->num_bins == p->num_bins);
    FUZZ_CHECK(plan->num_bins % plan->dp == 0 && plan->num_microbatches == plan->num_bins / plan->dp);
    FUZZ_CHECK(pp_pack_lower_bound(plan->padded_lengths, n, cfg->pack.capacity) <= plan->num_bins);
    FUZZ_CHECK(p->bin_offsets[0] == 0 && p->bin_offsets[p->num_bins] == n);
    for (b = 0; b < p->num_bins; b++) {
        int64_t tokens = 0;
        const int32_t *cu = pp_pack_plan_cu_seqlens(plan, b), *cup = pp_pack_plan_cu_seqlens_padded(plan, b);
        int cnt = pp_pack_plan_bin_size(plan, b);
        FUZZ_CHECK(cnt >= 1 && cnt == p->bin_offsets[b + 1] - p->bin_offsets[b]);
        if (cfg->pack.max_sequences_per_bin > 0) FUZZ_CHECK(cnt <= cfg->pack.max_sequences_per_bin);
        FUZZ_CHECK(cu[0] == 0 && cup[0] == 0);
        for (k = 0; k < cnt; k++) {
            int32_t s = p->seqs[p->bin_offsets[b] + k];
            FUZZ_CHECK(s >= 0 && s < n && !seen[s]);
            seen[s] = 1;
            FUZZ_CHECK(plan->lengths[s] == lengths[s] && plan->padded_lengths[s] >= lengths[s]);
            FUZZ_CHECK(plan->padded_lengths[s] % plan->seq_multiple == 0);
            tokens += plan->padded_lengths[s];
            FUZZ_CHECK(cu[k + 1] == cu[k] + lengths[s]);
            if (k + 1 < cnt) FUZZ_CHECK(cup[k + 1] == cup[k] + plan->padded_lengths[s]);
        }
        FUZZ_CHECK(tokens == p->bin_tokens[b] && tokens <= cfg->pack.capacity);
        FUZZ_CHECK(cup[cnt] == plan->bin_padded_tokens[b] && plan->bin_padded_tokens[b] >= tokens);
        FUZZ_CHECK(plan->bin_padded_tokens[b] % plan->bin_multiple == 0);
        FUZZ_CHECK(plan->bin_rank[b] >= 0 && plan->bin_rank[b] < plan->dp);
        FUZZ_CHECK(plan->bin_microbatch[b] >= 0 && plan->bin_microbatch[b] < plan->num_microbatches);
        FUZZ_CHECK(plan->microbatch_bin[plan->bin_rank[b] * plan->num_microbatches + plan->bin_microbatch[b]] == b);
        if (plan->bin_padded_tokens[b] <= 65536) {
            int32_t total = plan->bin_padded_tokens[b], local = total / plan->cp, t;
            int64_t *rows = (int64_t *)malloc(sizeof(int64_t) * (size_t)(total ? total : 1));
            int64_t *crow = (int64_t *)malloc(sizeof(int64_t) * (size_t)(local ? local : 1));
            int32_t *index = (int32_t *)malloc(sizeof(int32_t) * (size_t)(local ? local : 1));
            pp_error err;
            FUZZ_CHECK(rows && crow && index);
            FUZZ_CHECK(pp_pack_plan_gather(plan, b, NULL, rows, &err) == PP_OK);
            FUZZ_CHECK(total % plan->cp == 0);
            for (r = 0; r < plan->cp; r++) {
                pp_replay_config rc;
                pp_replay_map *map = NULL;
                if (pp_cp_plan_indices(plan, b, r, index, &err) != PP_OK) {
                    fprintf(stderr, "cp split of bin %d, rank %d: %s\n", b, r, err.message);
                    FUZZ_CHECK(!"every microbatch of a plan splits over its cp ranks");
                }
                FUZZ_CHECK(pp_cp_plan_rows(plan, b, r, NULL, crow, &err) == PP_OK);
                for (t = 0; t < local; t++) {
                    FUZZ_CHECK(index[t] >= 0 && index[t] < total);
                    FUZZ_CHECK(crow[t] == rows[index[t]]);
                }
                memset(&rc, 0, sizeof rc);
                rc.model.num_layers = 4; rc.first_layer = 0; rc.last_layer = 4; rc.cp_rank = r;
                FUZZ_CHECK(pp_replay_map_build(plan, b, &rc, &map, &err) == PP_OK);
                FUZZ_CHECK(map->num_layers == 4 && map->num_tokens == local);
                for (t = 0; t < local; t++) FUZZ_CHECK(map->rows[t] == crow[t]);
                pp_replay_map_free(map);
            }
            free(rows); free(crow); free(index);
        }
    }
    for (k = 0; k < n; k++) FUZZ_CHECK(seen[k]);
    free(seen);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *first = NULL, word[64];
    int32_t *lengths = NULL;
    pp_pack_plan_config cfg;
    pp_pack_plan *plan = NULL;
    pp_error err;
    pp_status st;
    int n, k;

    fuzz_file = data;
    fuzz_file_size = size;
    memset(&cfg, 0, sizeof cfg);
    if (size && data[0] == '#') {
        size_t len = 0;
        while (len < size && data[len] != '\n') len++;
        first = fuzz_cstr(data, len);
        cfg.pack.capacity = (int32_t)key_long(first, "capacity", 0, -2, INT32_MAX);
        if (key_word(first, "algo", word, sizeof word) && pp_pack_algo_parse(word, &cfg.pack.algo, NULL) != PP_OK) goto out;
        cfg.dp = (int)key_long(first, "dp", 0, -2, 1 << 20);
        cfg.pp = (int)key_long(first, "pp", 0, -2, 1 << 20);
        cfg.vpp = (int)key_long(first, "vpp", 0, -2, 1 << 20);
        cfg.tp = (int)key_long(first, "tp", 0, -2, 1 << 20);
        cfg.cp = (int)key_long(first, "cp", 0, -2, 1 << 20);
        cfg.seq_multiple = (int)key_long(first, "seq-multiple", 0, -2, INT32_MAX);
        cfg.bin_multiple = (int)key_long(first, "microbatch-multiple", 0, -2, INT32_MAX);
        cfg.pack.min_bin_count = (int)key_long(first, "min-bins", 0, -2, INT32_MAX);
        cfg.pack.bin_count_multiple = (int)key_long(first, "bin-multiple", 0, -2, INT32_MAX);
        cfg.pack.max_sequences_per_bin = (int)key_long(first, "max-seqs", 0, -2, INT32_MAX);
        cfg.pack.seed = (uint64_t)key_long(first, "seed", 0, 0, 0x7fffffffL);
        k = (int)key_long(first, "delta", 0, -2, 1 << 24);
        cfg.pack.knapsack_delta = k == 0 ? -1 : k;          /* as the CLI maps --delta 0 */
        if (key_word(first, "assign", word, sizeof word))
            cfg.assign = !strcmp(word, "tokens") ? PP_ASSIGN_TOKENS : !strcmp(word, "attention") ? PP_ASSIGN_ATTENTION
                                                                                             : PP_ASSIGN_ROUND_ROBIN;
        cfg.variable_shapes = strstr(first, "variable-shapes") != NULL;
        cfg.same_shape_all_ranks = strstr(first, "same-shape") != NULL;
    }
    n = data_read_lengths(NULL, FUZZ_PATH, &lengths);
    if (n < 0) { FUZZ_CHECK(lengths == NULL); goto out; }
    FUZZ_CHECK(n >= 1);
    if (cfg.pack.capacity == 0)
        for (k = 0; k < n; k++) if (lengths[k] > cfg.pack.capacity) cfg.pack.capacity = lengths[k];
    if (cfg.pack.capacity == 0) goto out;                   /* the CLI requires --capacity */
    st = pp_pack_plan_build(lengths, n, &cfg, &plan, &err);
    FUZZ_CHECK(err.status == st);
    if (st == PP_OK) check_plan(plan, &cfg, lengths, n);
    else FUZZ_CHECK(plan == NULL);
out:
    pp_pack_plan_free(plan);
    free(lengths);
    free(first);
    return 0;
}
