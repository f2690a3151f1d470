/* fuzz_cli_args.c — libFuzzer harness for the command-line parsing of every subcommand of
 * build/pipepar: the parse steps of examples/cli_*.c (parse_schedule_flags for schedule and
 * simulate, search_parse, grid_parse, layers_parse, mimo_parse, pack_parse, cp_parse,
 * replay_parse), which walk the flags with cli_next (examples/cli.h) and check every rule that
 * needs no file and no library work. The files are included here unchanged.
 *
 * Input: the first byte picks the subcommand (byte % 9: schedule, simulate, search, grid, layers,
 * mimo, pack, cp, replay); the rest is its argument words, separated by '\n' or NUL (at most 64).
 * Checked (examples/cli.h's contract): the parse returns 0 (accepted), -1 (--help) or 2 (refused;
 * 1 only for "out of memory"); a refusal prints exactly one line on stderr, "pipepar: " and at
 * most 1024 characters, whatever the length of the words; an accepted line prints nothing on
 * stderr, and its options keep the documented ranges (pp, mb, the one input of cp, ...).
 * stderr and stdout are swapped for a memory stream and /dev/null while a parse runs.
 *
 *   clang -std=c99 -D_POSIX_C_SOURCE=200809L -g -O1 -fsanitize=fuzzer,address,undefined \
 *         -fno-sanitize-recover=all tests/fuzz/fuzz_cli_args.c tests/fuzz/fuzz_impl.c -o build/fuzz_cli_args -lm -lpthread
 *   build/fuzz_cli_args -dict=tests/fuzz/cli.dict -max_len=4096 tests/fuzz/corpus/cli_args
 * Replay without clang: see replay_main.c. */
#include "../../examples/cli_schedule.c"
#include "../../examples/cli_search.c"
#include "../../examples/cli_grid.c"
#include "../../examples/cli_layers.c"
#include "../../examples/cli_mimo.c"
#include "../../examples/cli_data.c"
#include "fuzz_common.h"

#define MAX_WORDS 64

static const char *const commands[9] = { "schedule", "simulate", "search", "grid", "layers",
                                         "mimo", "pack", "cp", "replay" };

/* The options an accepted line must satisfy, per subcommand. */
static void check_accepted(int which, int argc, char **argv)
{
    switch (which) {
    case 0: case 1: {
        schedule_flags fl;
        FUZZ_CHECK(parse_schedule_flags(argc, argv, which, &fl) == 0);
        if (!fl.from_csv)
            FUZZ_CHECK(fl.cfg.kind > 0 && fl.cfg.pp >= 1 && fl.cfg.pp <= PP_CSV_MAX_RANKS && fl.cfg.mb >= 1);
        else
            FUZZ_CHECK(fl.cfg.kind == 0 && fl.cfg.pp == 0 && fl.cfg.mb == 0 && !fl.cfg.vpp && !fl.cfg.group);
        FUZZ_CHECK(!fl.relower || fl.from_csv);
        FUZZ_CHECK(fl.costs.f >= 0 && fl.costs.f <= 1e300 && fl.costs.p2p_latency >= 0);
        FUZZ_CHECK(fl.bytes <= 0 || fl.costs.p2p_seconds_per_byte > 0);
        break;
    }
    case 2: {
        search_opts o;
        FUZZ_CHECK(search_parse(argc, argv, &o) == 0);
        FUZZ_CHECK(o.cfg.pp >= 1 && o.cfg.mb >= 1 && (long)o.cfg.pp * o.cfg.mb <= 8192);
        FUZZ_CHECK((o.cfg.costs.i > 0) == (o.cfg.costs.w > 0));
        FUZZ_CHECK(!(o.cfg.vpp && o.cfg.max_vpp));
        FUZZ_CHECK(!o.cfg.costs.f_stage || o.cfg.vpp >= 1);
        search_opts_free(&o);
        break;
    }
    case 3: {
        grid_opts o;
        FUZZ_CHECK(grid_parse(argc, argv, &o) == 0);
        FUZZ_CHECK(o.cfg.world >= 1 && o.cfg.world <= (1 << 24) && o.rank >= -1);
        break;
    }
    case 4: {
        layers_opts o;
        FUZZ_CHECK(layers_parse(argc, argv, &o) == 0);
        FUZZ_CHECK(o.costs_text || o.cfg.num_layers || o.cfg.layout || o.cfg.hybrid);
        FUZZ_CHECK(o.chunk < 0 || o.rank >= 0);
        break;
    }
    case 5: {
        mimo_opts o;
        FUZZ_CHECK(mimo_parse(argc, argv, &o) == 0);
        FUZZ_CHECK(o.cfg.num_modules >= 1 && o.cfg.num_modules <= PP_MIMO_MAX_MODULES && o.pc.mb >= 1);
        FUZZ_CHECK(!o.program || o.rank >= 0);
        break;
    }
    case 6: {
        pack_opts o;
        FUZZ_CHECK(pack_parse(argc, argv, &o) == 0);
        FUZZ_CHECK(o.cfg.pack.capacity >= 1 && !(o.inline_list && o.path));
        FUZZ_CHECK(!(o.cfg.variable_shapes && o.cfg.same_shape_all_ranks));
        break;
    }
    case 7: {
        cp_opts o;
        FUZZ_CHECK(cp_parse(argc, argv, &o) == 0);
        FUZZ_CHECK(o.cp >= 1 && o.rank < o.cp && (o.seq_len_s != NULL) + (o.cu_s != NULL) + (o.len_s != NULL) == 1);
        FUZZ_CHECK(o.seq_len >= 0 && o.seq_len <= CLI_MAX_PRINTED_TOKENS);
        break;
    }
    default: {
        replay_opts o;
        FUZZ_CHECK(replay_parse(argc, argv, &o) == 0);
        FUZZ_CHECK(o.rc.model.num_layers >= 1 && o.cfg.pack.capacity >= 1 && (o.have_stage != (o.pp_rank >= 0)));
        FUZZ_CHECK(!o.have_stage || (o.rc.first_layer >= 0 && o.rc.first_layer <= o.rc.last_layer));
        break;
    }
    }
}

/* The subcommand's parse: its return value. */
static int parse(int which, int argc, char **argv)
{
    switch (which) {
    case 0: case 1: { schedule_flags fl; return parse_schedule_flags(argc, argv, which, &fl); }
    case 2: { search_opts o; int rc = search_parse(argc, argv, &o); search_opts_free(&o); return rc; }
    case 3: { grid_opts o; return grid_parse(argc, argv, &o); }
    case 4: { layers_opts o; return layers_parse(argc, argv, &o); }
    case 5: { mimo_opts o; return mimo_parse(argc, argv, &o); }
    case 6: { pack_opts o; return pack_parse(argc, argv, &o); }
    case 7: { cp_opts o; return cp_parse(argc, argv, &o); }
    default: { replay_opts o; return replay_parse(argc, argv, &o); }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text, *argv[MAX_WORDS + 2], *err_text = NULL;
    size_t err_len = 0, i, start = 0, len;
    int argc = 1, which, rc, lines = 0;
    FILE *saved_err = stderr, *saved_out = stdout, *capture;
    if (size == 0) return 0;
    which = data[0] % 9;
    len = size - 1;
    text = fuzz_cstr(data + 1, len);   /* len bytes and a NUL */
    argv[0] = (char *)commands[which];
    for (i = 0; len > 0 && i <= len && argc <= MAX_WORDS; i++)   /* words end at '\n', NUL or the end */
        if (i == len || text[i] == '\n' || text[i] == '\0') {
            text[i] = '\0';
            argv[argc++] = text + start;
            start = i + 1;
        }
    argv[argc] = NULL;

    capture = open_memstream(&err_text, &err_len);
    FUZZ_CHECK(capture != NULL);
    stderr = capture;
    stdout = fuzz_devnull();
    rc = parse(which, argc, argv);
    stderr = saved_err;
    stdout = saved_out;
    fclose(capture);

    for (i = 0; i < err_len; i++) lines += err_text[i] == '\n';
    if (rc == 0 || rc == -1) {
        FUZZ_CHECK(err_len == 0);
    } else {
        if (!(rc == 2 || (rc == 1 && strstr(err_text, "out of memory")))) {
            fprintf(stderr, "exit %d: %s\n", rc, err_text);
            FUZZ_CHECK(!"a parse exits 0, 2 (refused) or 1 (out of memory)");
        }
        if (lines != 1 || err_text[err_len - 1] != '\n' || strncmp(err_text, "pipepar: ", 9) != 0 || err_len > 1024) {
            fprintf(stderr, "refusal of %zu bytes, %d lines: %.2000s\n", err_len, lines, err_text);
            FUZZ_CHECK(!"a refusal is one line, 'pipepar: ...', at most 1024 characters");
        }
    }
    if (rc == 0) {   /* parse again: the options it gives (an accepted line prints nothing) */
        stdout = fuzz_devnull();
        check_accepted(which, argc, argv);
        stdout = saved_out;
    }
    free(err_text);
    free(text);
    return 0;
}
