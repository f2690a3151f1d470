/* fuzz_moe_freq.c — libFuzzer harness for the moe_layer_freq parser of pp_layers_build
 * (pipepar.h >>layers, pp__moe_pattern: Megatron's --moe-layer-freq, an integer N or a Python list
 * expression such as "([1]*3+[0]*1)*3"), as `pipepar layers --layers N --moe-freq ...` uses it.
 *
 * Input: line 1 holds num_layers and pp (integers; default 8 and 1); everything after the first
 * newline is the expression (newlines included: the parser skips them as blanks). On success:
 * the consistency checks of fuzz_layers_check.h, is_moe[] holds only 0 and 1, the MoE type
 * ranges of the stages add up to the MoE layers, and an integer N marks exactly i % N == 0.
 *
 *   clang -std=c99 -D_POSIX_C_SOURCE=200809L -g -O1 -fsanitize=fuzzer,address,undefined \
 *         -fno-sanitize-recover=all tests/fuzz/fuzz_moe_freq.c tests/fuzz/fuzz_impl.c -o build/fuzz_moe_freq -lm -lpthread
 *   build/fuzz_moe_freq -dict=tests/fuzz/layers.dict -max_len=4096 tests/fuzz/corpus/moe_freq
 * Replay without clang: see replay_main.c. */
#include "../../pipepar.h"
#include "fuzz_common.h"
#include "fuzz_layers_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_cstr(data, size), *line[2] = { NULL, NULL };
    long v[2] = { 8, 1 };
    pp_layers_config cfg;
    pp_layers *l = NULL;
    pp_error err;
    pp_status st;
    int s, g, moe = 0, ranged = 0;
    fuzz_lines(text, line, 2);
    fuzz_ints(line[0], v, 2, -2, 1 << 16);
    memset(&cfg, 0, sizeof cfg);
    cfg.num_layers = (int)v[0]; cfg.pp = (int)v[1];
    cfg.moe_layer_freq = line[1] ? line[1] : "";
    st = pp_layers_build(&cfg, &l, &err);
    FUZZ_CHECK(err.status == st);
    if (st != PP_OK) { FUZZ_CHECK(l == NULL); free(text); return 0; }
    check_layers(l);
    for (g = 0; g < l->num_layers; g++) { FUZZ_CHECK(l->is_moe[g] <= 1); moe += l->is_moe[g]; }
    for (s = 0; s < l->num_stages; s++) {
        int first, count;
        FUZZ_CHECK(pp_layers_type_range(l, s, PP_LAYER_MOE, &first, &count, &err) == PP_OK);
        FUZZ_CHECK(first == ranged);
        ranged += count;
    }
    FUZZ_CHECK(ranged == moe);
    if (!strchr(cfg.moe_layer_freq, '[')) {
        long n = strtol(cfg.moe_layer_freq, NULL, 10);
        FUZZ_CHECK(n >= 1);
        for (g = 0; g < l->num_layers; g++) FUZZ_CHECK(l->is_moe[g] == (g % n == 0));
    }
    pp_layers_free(l);
    free(text);
    return 0;
}
