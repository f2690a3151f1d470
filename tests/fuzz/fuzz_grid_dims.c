/* fuzz_grid_dims.c — libFuzzer harness for the rank-grid text parsers (pipepar.h >>grid):
 * pp_grid_dims_parse (a group mask, `pipepar grid --group dp-cp`) and the order of
 * pp_grid_init (`pipepar grid --order tp-cp-dp-pp`), both through pp__dims_split.
 *
 * Input, split at newlines:
 *     line 1   the group mask text, e.g. "dp-cp"
 *     line 2   the order text, e.g. "tp-cp-dp-pp" (empty: the default)
 *     line 3   optional: world tp cp pp dp (integers; world defaults to 8)
 * Checks: a parsed mask is a non-empty subset of PP_GROUP_ALL and pp_grid_dims_format spells it
 * so that it parses back to itself. A grid that initialises has sizes multiplying to world, its
 * order text re-initialises to the same strides, and (for world <= 4096) every rank's
 * coordinates map back to it, and its group of the parsed mask lists it as member `index`
 * (checked for every rank up to world 512, else for ranks 0..63: the listing is O(world)).
 *
 *   clang -std=c99 -D_POSIX_C_SOURCE=200809L -g -O1 -fsanitize=fuzzer,address,undefined \
 *         -fno-sanitize-recover=all tests/fuzz/fuzz_grid_dims.c tests/fuzz/fuzz_impl.c -o build/fuzz_grid_dims -lm -lpthread
 *   build/fuzz_grid_dims -dict=tests/fuzz/grid.dict tests/fuzz/corpus/grid_dims
 * Replay without clang: see replay_main.c. */
#include "../../pipepar.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_cstr(data, size), *line[3] = { NULL, NULL, NULL }, buf[64];
    long v[5] = { 8, 0, 0, 0, 0 };
    unsigned dims = 0, again = 0;
    int have_dims, n, r, d, *members = NULL;
    pp_grid_config cfg;
    pp_grid g, h;
    pp_error err;
    pp_status st;
    fuzz_lines(text, line, 3);

    st = pp_grid_dims_parse(line[0], &dims, &err);
    FUZZ_CHECK(err.status == st);
    have_dims = st == PP_OK;
    if (have_dims) {
        FUZZ_CHECK(dims != 0 && (dims & ~PP_GROUP_ALL) == 0);
        n = pp_grid_dims_format(dims, buf, sizeof buf);
        FUZZ_CHECK(n > 0 && (size_t)n < sizeof buf);
        FUZZ_CHECK(pp_grid_dims_parse(buf, &again, NULL) == PP_OK && again == dims);
    }

    memset(&cfg, 0, sizeof cfg);
    fuzz_ints(line[2], v, 5, -2, 0x7fffffffL);
    cfg.world = (int)v[0]; cfg.tp = (int)v[1]; cfg.cp = (int)v[2]; cfg.pp = (int)v[3]; cfg.dp = (int)v[4];
    cfg.order = line[1];
    st = pp_grid_init(&cfg, &g, &err);
    FUZZ_CHECK(err.status == st);
    if (st != PP_OK) goto out;
    {
        long long prod = 1;
        unsigned seen = 0;
        for (d = 0; d < PP_DIM_COUNT; d++) {
            FUZZ_CHECK(g.size[d] >= 1);
            prod *= g.size[d];
            seen |= 1u << g.order[d];
        }
        FUZZ_CHECK(prod == g.world && seen == PP_GROUP_ALL);
    }
    n = pp_grid_order_format(&g, buf, sizeof buf);
    FUZZ_CHECK(n > 0 && (size_t)n < sizeof buf);
    cfg.order = buf;
    FUZZ_CHECK(pp_grid_init(&cfg, &h, &err) == PP_OK);
    for (d = 0; d < PP_DIM_COUNT; d++) FUZZ_CHECK(h.order[d] == g.order[d] && h.stride[d] == g.stride[d]);
    if (g.world <= 4096) {
        members = (int *)malloc(sizeof(int) * (size_t)g.world);
        FUZZ_CHECK(members != NULL);
        for (r = 0; r < g.world; r++) {
            int coord[PP_DIM_COUNT];
            FUZZ_CHECK(pp_grid_coords(&g, r, coord, &err) == PP_OK);
            FUZZ_CHECK(pp_grid_rank(&g, coord) == r);
            if (have_dims && (r < 64 || g.world <= 512)) {   /* members: O(world) per rank */
                pp_grid_group_info info;
                FUZZ_CHECK(pp_grid_group(&g, r, dims, &info, &err) == PP_OK);
                FUZZ_CHECK(info.size == pp_grid_group_size(&g, dims) && info.size * info.count == g.world);
                FUZZ_CHECK(pp_grid_group_members(&g, dims, info.color, members, g.world, &err) == PP_OK);
                FUZZ_CHECK(info.index >= 0 && info.index < info.size && members[info.index] == r);
            }
        }
        FUZZ_CHECK(pp_grid_coords(&g, g.world, NULL, NULL) != PP_OK);
    }
out:
    free(members);
    free(text);
    return 0;
}
