/* fuzz_layer_costs.c — libFuzzer harness for the --layer-costs FILE reader of `pipepar search`
 * (read_layer_costs in examples/cli_search.c, a static function: this file includes
 * cli_search.c unchanged and redirects its fopen to the fuzz input with fmemopen), then the
 * layout search the CLI runs on the layers it read (pp_search with cfg.layers and
 * cfg.layer_costs, pipepar.h >>search), and the CLI's --embedding / --loss parser
 * (parse_layer_costs). Error lines go to stderr: fuzz with -close_fd_mask=2.
 *
 * Input: the file, "F I W [M]" per layer (spaces, tabs or commas; '#' comments; blank lines).
 * Its first line, when a '#' comment, also sets the search: "pp=P mb=M vpp=V kind=K" (small
 * values: pp 1..4, mb 1..8, vpp 1..2; kind a pp_schedule_kind_parse name or greedy; default
 * pp=2 mb=4 vpp=1 kind=1f1b: a search of every kind and vpp takes seconds per input under
 * ASan; greedy is capped at pp 2, mb 4, vpp 1) and "--embedding F,I,W[,M] --loss F,I,W[,M]
 * --loss-deferred W" as the CLI reads them. On success: every layer's numbers are finite and >= 0, the search
 * ranks at least one schedule, each entry's split covers every layer with stages of at least
 * one, and the entry's layout text (pp_search_layout_text) builds with pp_layers_build into the
 * same split.
 *
 *   clang -std=c99 -D_POSIX_C_SOURCE=200809L -g -O1 -fsanitize=fuzzer,address,undefined \
 *         -fno-sanitize-recover=all tests/fuzz/fuzz_layer_costs.c tests/fuzz/fuzz_impl.c -o build/fuzz_layer_costs -lm -lpthread
 *   build/fuzz_layer_costs -close_fd_mask=2 -max_len=4096 tests/fuzz/corpus/layer_costs
 * Replay without clang: see replay_main.c. */
#include "fuzz_fopen.h"   /* fopen in examples/cli_search.c reads the fuzz input */
#include "../../examples/cli_search.c"
#undef fopen
#include "fuzz_common.h"

/* The word after key in line (up to a blank), copied into buf; 0 when absent. */
static int word_after(const char *line, const char *key, char *buf, size_t size)
{
    const char *p = strstr(line, key);
    size_t n = 0;
    if (!p) return 0;
    p += strlen(key);
    while (p[n] && p[n] != ' ' && p[n] != '\t' && p[n] != '\n' && p[n] != '\r' && n + 1 < size) n++;
    memcpy(buf, p, n);
    buf[n] = '\0';
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *first = NULL, word[64];
    pp_layer_costs *costs = NULL;
    pp_search_config cfg;
    pp_search_result *res = NULL;
    pp_error err;
    pp_status st;
    int n = 0, k, s;

    fuzz_file = data;
    fuzz_file_size = size;
    memset(&cfg, 0, sizeof cfg);
    cfg.pp = 2; cfg.mb = 4; cfg.vpp = 1; cfg.kind = PP_1F1B;
    if (size && data[0] == '#') {
        size_t len = 0;
        while (len < size && data[len] != '\n') len++;
        first = fuzz_cstr(data, len);
        cfg.pp = (int)fuzz_key_long(first, "pp=", 2, 1, 4);
        cfg.mb = (int)fuzz_key_long(first, "mb=", 4, 1, 8);
        cfg.vpp = (int)fuzz_key_long(first, "vpp=", 1, 1, 2);
        if (word_after(first, "kind=", word, sizeof word)) {
            if (!strcmp(word, "greedy")) {            /* 64 flag sets per split: keep it small */
                cfg.kind = PP_CUSTOM;
                if (cfg.pp > 2) cfg.pp = 2;
                if (cfg.mb > 4) cfg.mb = 4;
                cfg.vpp = 1;
            }
            else if (pp_schedule_kind_parse(word, &cfg.kind, NULL) != PP_OK) goto out;
        }
        if (word_after(first, "--embedding ", word, sizeof word) && !parse_layer_costs("--embedding", word, &cfg.embedding))
            goto out;
        if (word_after(first, "--loss ", word, sizeof word) && !parse_layer_costs("--loss", word, &cfg.loss)) goto out;
        if (word_after(first, "--loss-deferred ", word, sizeof word) &&
            !cli_parse_double("--loss-deferred", word, 0, &cfg.loss_deferred)) goto out;
    }
    if (read_layer_costs(FUZZ_PATH, &costs, &n) != 0) { FUZZ_CHECK(costs == NULL); goto out; }
    FUZZ_CHECK(n >= 1 && n <= 4096);
    for (k = 0; k < n; k++) {
        FUZZ_CHECK(costs[k].f >= 0 && costs[k].f <= 1e300 && costs[k].i >= 0 && costs[k].i <= 1e300);
        FUZZ_CHECK(costs[k].w >= 0 && costs[k].w <= 1e300 && costs[k].memory >= 0 && costs[k].memory <= 1e300);
    }
    cfg.layers = n;
    cfg.layer_costs = costs;
    cfg.max_layouts = cfg.kind == PP_CUSTOM ? 4 : 16;   /* one input stays fast; the descent still runs */
    st = pp_search(&cfg, &res, &err);
    FUZZ_CHECK(err.status == st);
    if (st != PP_OK) { FUZZ_CHECK(res == NULL); goto out; }
    FUZZ_CHECK(res->count >= 1);
    for (k = 0; k < res->count; k++) {
        const pp_search_entry *e = &res->entries[k];
        int stages = cfg.pp * e->vpp, sum = 0, need;
        char small[256], *buf = small;
        pp_layers_config lc;
        pp_layers *l = NULL;
        FUZZ_CHECK(e->stage_layers != NULL && e->vpp >= 1);
        for (s = 0; s < stages; s++) { FUZZ_CHECK(e->stage_layers[s] >= 1); sum += e->stage_layers[s]; }
        FUZZ_CHECK(sum == n);
        need = pp_search_layout_text(e->stage_layers, stages, small, sizeof small);
        FUZZ_CHECK(need > 0);
        if ((size_t)need >= sizeof small) {
            buf = (char *)malloc((size_t)need + 1);
            FUZZ_CHECK(buf != NULL);
            FUZZ_CHECK(pp_search_layout_text(e->stage_layers, stages, buf, (size_t)need + 1) == need);
        }
        FUZZ_CHECK(strlen(buf) == (size_t)need);
        memset(&lc, 0, sizeof lc);
        lc.pp = cfg.pp; lc.layout = buf;
        if (pp_layers_build(&lc, &l, &err) != PP_OK) {
            fprintf(stderr, "search layout '%s' does not build: %s\n", buf, err.message);
            FUZZ_CHECK(!"pp_search_layout_text gives a layout pp_layers_build takes");
        }
        FUZZ_CHECK(l->num_stages == stages);
        for (s = 0; s < stages; s++) FUZZ_CHECK(l->count[s] == e->stage_layers[s]);
        pp_layers_free(l);
        if (buf != small) free(buf);
        if (k) FUZZ_CHECK(!(res->entries[k - 1].fits < e->fits));    /* fitting ones first */
    }
    FUZZ_CHECK((res->best != NULL) == (res->entries[0].fits != 0));
    if (res->best) FUZZ_CHECK(pp_schedule_validate(res->best, &err) == PP_OK);
out:
    pp_search_result_free(res);
    free(costs);
    free(first);
    return 0;
}
