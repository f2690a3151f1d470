/* fuzz_layers_hybrid.c — libFuzzer harness for pp_layers_build with a hybrid (Mamba) layer
 * pattern (pipepar.h >>layers, pp__layers_from_hybrid), as `pipepar layers --hybrid ...` uses it.
 *
 * Input, split at the first newline:
 *     line 1   the pattern: M * - E G D + C H W symbols, '|' between stages, "/..." MTP depths
 *     line 2   optional: pp vpp num_layers mtp_layers first last (integers; 0 = unset / 1)
 * On success: the consistency checks of fuzz_layers_check.h, no layout string (hybrid has
 * none), and the pattern the result spells (l->pattern, '|' between every two stages) must
 * build again into the same stages.
 *
 *   clang -std=c99 -D_POSIX_C_SOURCE=200809L -g -O1 -fsanitize=fuzzer,address,undefined \
 *         -fno-sanitize-recover=all tests/fuzz/fuzz_layers_hybrid.c tests/fuzz/fuzz_impl.c -o build/fuzz_layers_hybrid -lm -lpthread
 *   build/fuzz_layers_hybrid -dict=tests/fuzz/layers.dict -max_len=4096 tests/fuzz/corpus/layers_hybrid
 * Replay without clang: see replay_main.c. */
#include "../../pipepar.h"
#include "fuzz_common.h"
#include "fuzz_layers_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_cstr(data, size), *line[2] = { NULL, NULL };
    long v[6] = { 0, 0, 0, 0, 0, 0 };
    pp_layers_config cfg;
    pp_layers *l = NULL, *m = NULL;
    pp_error err;
    pp_status st;
    int s;
    fuzz_lines(text, line, 2);
    fuzz_ints(line[1], v, 6, -2, 1L << 21);
    memset(&cfg, 0, sizeof cfg);
    cfg.hybrid = line[0];
    cfg.pp = (int)v[0]; cfg.vpp = (int)v[1]; cfg.num_layers = (int)v[2]; cfg.mtp_layers = (int)v[3];
    cfg.first = (int)v[4]; cfg.last = (int)v[5];
    st = pp_layers_build(&cfg, &l, &err);
    FUZZ_CHECK(err.status == st);
    if (st != PP_OK) { FUZZ_CHECK(l == NULL); free(text); return 0; }
    FUZZ_CHECK(l->form == PP_LAYERS_HYBRID && l->layout == NULL && l->pattern != NULL);
    check_layers(l);
    memset(&cfg, 0, sizeof cfg);
    cfg.pp = l->pp; cfg.hybrid = l->pattern;
    if (pp_layers_build(&cfg, &m, &err) != PP_OK) {
        fprintf(stderr, "pattern '%.200s' does not build again: %s\n", l->pattern, err.message);
        FUZZ_CHECK(!"l->pattern parses back");
    }
    FUZZ_CHECK(m->num_stages == l->num_stages && m->num_layers == l->num_layers && m->mtp_layers == l->mtp_layers);
    for (s = 0; s < l->num_stages; s++) FUZZ_CHECK(m->first[s] == l->first[s] && m->count[s] == l->count[s]);
    FUZZ_CHECK(memcmp(m->layer_type, l->layer_type, (size_t)l->num_layers) == 0);
    FUZZ_CHECK(strcmp(m->pattern, l->pattern) == 0);
    pp_layers_free(m);
    pp_layers_free(l);
    free(text);
    return 0;
}
