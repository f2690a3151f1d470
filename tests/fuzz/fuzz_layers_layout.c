/* fuzz_layers_layout.c — libFuzzer harness for pp_layers_build with a Megatron layout string
 * (pipeline_model_parallel_layout, e.g. "Et*3|(tt|)*29,m|L"; pipepar.h >>layers, the layout and
 * moe_layer_freq parsers), as `pipepar layers --layout ... [--moe-freq ...]` uses it.
 *
 * Input, split at the first two newlines:
 *     line 1   the layout string
 *     line 2   optional: moe_layer_freq ("4", "[0]*3+[1]*58"); empty or "-" means none
 *     line 3   optional: pp vpp num_layers mtp_layers (integers, default 0 = unset / 1)
 * On success: the stages must tile the decoder layers and items, every query (stage ranges,
 * type ranges, stage text, layer -> stage, type index) must agree with them, the text and JSON
 * writers must succeed, and the layout the result spells (l->layout, documented to parse back
 * to the same split) must build again into the same stages.
 *
 *   clang -std=c99 -D_POSIX_C_SOURCE=200809L -g -O1 -fsanitize=fuzzer,address,undefined \
 *         -fno-sanitize-recover=all tests/fuzz/fuzz_layers_layout.c tests/fuzz/fuzz_impl.c -o build/fuzz_layers_layout -lm -lpthread
 *   build/fuzz_layers_layout -dict=tests/fuzz/layers.dict -max_len=4096 tests/fuzz/corpus/layers_layout
 * Replay without clang: see replay_main.c. */
#include "../../pipepar.h"
#include "fuzz_common.h"
#include "fuzz_layers_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_cstr(data, size), *line[3] = { NULL, NULL, NULL };
    long v[4] = { 0, 0, 0, 0 };
    pp_layers_config cfg;
    pp_layers *l = NULL;
    pp_error err;
    pp_status st;
    fuzz_lines(text, line, 3);
    fuzz_ints(line[2], v, 4, -2, 1L << 21);
    memset(&cfg, 0, sizeof cfg);
    cfg.layout = line[0];
    cfg.moe_layer_freq = line[1] && line[1][0] && strcmp(line[1], "-") ? line[1] : NULL;
    cfg.pp = (int)v[0]; cfg.vpp = (int)v[1]; cfg.num_layers = (int)v[2]; cfg.mtp_layers = (int)v[3];
    st = pp_layers_build(&cfg, &l, &err);
    FUZZ_CHECK(err.status == st);
    if (st == PP_OK) {
        FUZZ_CHECK(l->form == PP_LAYERS_LAYOUT && l->layout != NULL);
        check_layers(l);
        check_layout_round_trip(l, cfg.moe_layer_freq);
    } else {
        FUZZ_CHECK(l == NULL);
    }
    pp_layers_free(l);
    free(text);
    return 0;
}
