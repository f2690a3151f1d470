/* fuzz_layers_balance.c — libFuzzer harness for pp_layers_balance (pipepar.h >>layers) fed the way
 * `pipepar layers --costs LIST [--memory LIST] ...` feeds it: the lists are read by the CLI's
 * own parser, layers_parse_list of examples/cli_layers.c (included here unchanged; its error
 * lines go to stderr: fuzz with -close_fd_mask=2 to keep them out of the log).
 *
 * Input, split at newlines:
 *     line 1   --costs, e.g. "3,1*30,4" (numbers >= 0, x*N repeats x)
 *     line 2   optional --memory, same form; empty or "-" means none
 *     line 3   optional: pp vpp mtp_layers (integers)
 *     line 4   optional: memory_cap embedding_cost embedding_memory loss_cost loss_memory
 *              mtp_cost mtp_memory (numbers as strtod reads them, passed on unchecked)
 *     line 5   optional: moe_layer_freq
 *     line 6   optional: a hybrid pattern whose symbols are the layers (pp_balance_config.hybrid)
 * On success: the consistency checks of fuzz_layers_check.h; stage costs that add up as
 * documented, max_cost their maximum, every stage under the memory cap; and for small cases
 * (at most 10 layers and 5 stages) max_cost equal to the smallest bottleneck over every
 * contiguous split, found by brute force with the same order of summation. A failure must not
 * be the search's "internal error" (that is a bug report, not a verdict on the input).
 *
 *   clang -std=c99 -D_POSIX_C_SOURCE=200809L -g -O1 -fsanitize=fuzzer,address,undefined \
 *         -fno-sanitize-recover=all tests/fuzz/fuzz_layers_balance.c tests/fuzz/fuzz_impl.c -o build/fuzz_layers_balance -lm -lpthread
 *   build/fuzz_layers_balance -close_fd_mask=2 -dict=tests/fuzz/layers.dict tests/fuzz/corpus/layers_balance
 * Replay without clang: see replay_main.c. */
#include "../../examples/cli_layers.c"
#include "fuzz_common.h"
#include "fuzz_layers_check.h"

typedef struct brute {
    const pp_balance_config *cfg;
    int n, S;
    double front_c, back_c, front_m, back_m, best;
    int found;
} brute;

/* Every split of layers [i, n) into stages s .. S-1, the bottleneck so far in worst. */
static void brute_rec(brute *b, int s, int i, double worst)
{
    int j, k;
    for (j = (s == b->S - 1 ? b->n : i); j <= b->n; j++) {
        double acc = s == 0 ? b->front_c : 0, accm = s == 0 ? b->front_m : 0, w;
        for (k = i; k < j; k++) {
            acc += b->cfg->cost ? b->cfg->cost[k] : 1.0;
            if (b->cfg->memory) accm += b->cfg->memory[k];
        }
        if (s == b->S - 1) { acc += b->back_c; accm += b->back_m; }
        if (b->cfg->memory_cap > 0 && accm > b->cfg->memory_cap) continue;
        w = worst > acc ? worst : acc;
        if (s == b->S - 1) {
            if (!b->found || w < b->best) { b->best = w; b->found = 1; }
        } else {
            brute_rec(b, s + 1, j, w);
        }
    }
}

static void check_balance(const pp_balance_config *cfg, const pp_layers *l)
{
    int s, k, j;
    double max = 0;
    check_layers(l);
    FUZZ_CHECK(l->form == PP_LAYERS_BALANCED && l->stage_cost != NULL && l->num_layers == cfg->num_layers);
    FUZZ_CHECK((l->stage_memory != NULL) == (cfg->memory != NULL));
    for (s = 0; s < l->num_stages; s++) {
        if (l->stage_cost[s] > max) max = l->stage_cost[s];
        if (cfg->memory_cap > 0) FUZZ_CHECK(l->stage_memory[s] <= cfg->memory_cap);
    }
    FUZZ_CHECK(max == l->max_cost);
    if (cfg->num_layers <= 10 && l->num_stages <= 5) {
        brute b;
        memset(&b, 0, sizeof b);
        b.cfg = cfg; b.n = cfg->num_layers; b.S = l->num_stages;
        b.front_c = cfg->embedding_cost;
        for (k = 0; k < cfg->mtp_layers; k++) b.back_c += cfg->mtp_cost;
        b.back_c += cfg->loss_cost;
        if (cfg->memory) {
            b.front_m = cfg->embedding_memory;
            for (k = 0; k < cfg->mtp_layers; k++) b.back_m += cfg->mtp_memory;
            b.back_m += cfg->loss_memory;
        }
        brute_rec(&b, 0, 0, 0);
        FUZZ_CHECK(b.found);
        if (b.best != l->max_cost) {
            fprintf(stderr, "balance: max_cost %.17g, brute force %.17g\n", l->max_cost, b.best);
            FUZZ_CHECK(!"the balanced split minimises the largest stage cost");
        }
    }
    for (s = 0, j = 0; s < l->num_stages; s++) j += l->count[s];
    FUZZ_CHECK(j == cfg->num_layers);
    if (cfg->hybrid) {                  /* the pattern: the symbols in order, '|' between the stages */
        const char *p = l->pattern, *h = cfg->hybrid;
        FUZZ_CHECK(p != NULL && l->layout == NULL);
        for (s = 0; p && s < l->num_stages; s++) {
            for (k = 0; k < l->count[s]; k++) FUZZ_CHECK(*p++ == *h++);
            FUZZ_CHECK(*p++ == (s + 1 < l->num_stages ? '|' : '\0'));
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_cstr(data, size), *line[6] = { NULL, NULL, NULL, NULL, NULL, NULL };
    double *costs = NULL, *memory = NULL, d[7] = { 0, 0, 0, 0, 0, 0, 0 };
    long v[3] = { 0, 0, 0 };
    int n_cost, n_mem = -1, k;
    pp_balance_config bal;
    pp_layers *l = NULL;
    pp_error err;
    pp_status st;
    fuzz_lines(text, line, 6);
    memset(&bal, 0, sizeof bal);
    if ((n_cost = layers_parse_list("--costs", line[0], &costs)) < 0) goto out;
    if (line[1] && line[1][0] && strcmp(line[1], "-") &&
        (n_mem = layers_parse_list("--memory", line[1], &memory)) < 0) goto out;
    if (memory && n_mem != n_cost) goto out;                    /* the CLI refuses it */
    fuzz_ints(line[2], v, 3, -2, 1L << 21);
    if (line[3]) {
        const char *p = line[3];
        for (k = 0; k < 7 && *p; k++) {
            char *end;
            d[k] = strtod(p, &end);
            if (end == p) break;
            p = end;
        }
    }
    bal.num_layers = n_cost;
    bal.pp = (int)v[0]; bal.vpp = (int)v[1]; bal.mtp_layers = (int)v[2];
    bal.cost = costs; bal.memory = memory;
    bal.memory_cap = d[0]; bal.embedding_cost = d[1]; bal.embedding_memory = d[2];
    bal.loss_cost = d[3]; bal.loss_memory = d[4]; bal.mtp_cost = d[5]; bal.mtp_memory = d[6];
    bal.moe_layer_freq = line[4] && line[4][0] ? line[4] : NULL;
    bal.hybrid = line[5] && line[5][0] ? line[5] : NULL;
    st = pp_layers_balance(&bal, &l, &err);
    FUZZ_CHECK(err.status == st);
    if (st == PP_OK) check_balance(&bal, l);
    else FUZZ_CHECK(l == NULL);
    if (st != PP_OK && !strncmp(err.message, "balance: internal error", 23)) {   /* valid input, lost split */
        fprintf(stderr, "%s\n", err.message);
        FUZZ_CHECK(!"no internal error");
    }
out:
    pp_layers_free(l);
    free(costs);
    free(memory);
    free(text);
    return 0;
}
