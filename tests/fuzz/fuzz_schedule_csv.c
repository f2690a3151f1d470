/* fuzz_schedule_csv.c — libFuzzer harness for pp_schedule_read_csv (pipepar.h >>draw) and what
 * `pipepar schedule|simulate --from-csv FILE` does with it (examples/cli_schedule.c, make_plan
 * and the two commands): pp_plan_build (>>plan) reads it, strips the communication (--relower)
 * and proves the compute order, lowers it when it has none, splits overlapped FB actions and
 * backwards (--split-overlaps, --split-backward) and validates; then simulate, size the I->W
 * buffers (pp_schedule_rank_peaks) and draw every form.
 *
 * Input: the CSV file itself (one row per rank, one action per cell; blank and '#' lines are
 * skipped by the reader). The first line, when it is a '#' comment, also picks the CLI flags:
 * the words relower, split-overlaps, split-backward, and for the simulation grouped, p2p
 * (latency 0.05 and 1 MB at 10 GB/s per transfer), iw (I = W = 1) and memstage (stage s keeps
 * s + 1 units of memory). A schedule that validates must also survive a round trip through
 * pp_schedule_write_csv and the reader: the same ranks, stages, microbatches and programs, and
 * the copy validates too.
 *
 *   clang -std=c99 -D_POSIX_C_SOURCE=200809L -g -O1 -fsanitize=fuzzer,address,undefined \
 *         -fno-sanitize-recover=all tests/fuzz/fuzz_schedule_csv.c tests/fuzz/fuzz_impl.c -o build/fuzz_schedule_csv -lm -lpthread
 *   build/fuzz_schedule_csv -dict=tests/fuzz/schedule.dict -max_len=4096 tests/fuzz/corpus/schedule_csv
 * Replay without clang: see replay_main.c. */
#include "../../pipepar.h"
#include "fuzz_common.h"

static int has_word(const char *line, size_t len, const char *word)
{
    size_t n = strlen(word), i;
    for (i = 0; i + n <= len; i++)
        if (memcmp(line + i, word, n) == 0) return 1;
    return 0;
}

/* pp_schedule_write_csv into memory, read back: the same schedule, still valid. */
static void round_trip(const pp_schedule *s)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    pp_schedule *t = NULL;
    pp_error err;
    int r, i;
    if (!f) return;
    FUZZ_CHECK(pp_schedule_write_csv(s, f, &err) == PP_OK);
    fclose(f);
    if (pp_schedule_read_csv(buf, len, &t, &err) != PP_OK) {
        fprintf(stderr, "round trip: read back failed: %s\n", err.message);
        FUZZ_CHECK(!"a written CSV reads back");
    }
    FUZZ_CHECK(t->pp == s->pp && t->vpp == s->vpp && t->mb == s->mb && t->placement == s->placement);
    for (r = 0; r < s->pp; r++) {
        FUZZ_CHECK(t->length[r] == s->length[r]);
        for (i = 0; i < s->length[r]; i++) {
            pp_action a = s->actions[r][i], b = t->actions[r][i];
            FUZZ_CHECK(a.op == b.op && a.stage == b.stage && a.mb == b.mb);
            if (a.op == PP_OP_FB) FUZZ_CHECK(a.stage2 == b.stage2 && a.mb2 == b.mb2);
        }
    }
    if (pp_schedule_validate(t, &err) != PP_OK) {
        fprintf(stderr, "round trip: the copy does not validate: %s\n", err.message);
        FUZZ_CHECK(!"a written CSV validates again");
    }
    pp_schedule_free(t);
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    size_t first_len = 0;
    int relower = 0, split_overlaps = 0, split_backward = 0, r;
    pp_sim_costs costs;
    pp_plan_config pc;
    pp_plan *plan = NULL;
    const pp_schedule *s;
    pp_sim_result *sim = NULL;
    double *memstage = NULL;
    pp_error err;
    pp_status st;
    FILE *out = fuzz_devnull();

    memset(&costs, 0, sizeof costs);
    while (first_len < size && text[first_len] != '\n') first_len++;
    if (size && text[0] == '#') {
        relower = has_word(text, first_len, "relower");
        split_overlaps = has_word(text, first_len, "split-overlaps");
        split_backward = has_word(text, first_len, "split-backward");
        costs.grouped = has_word(text, first_len, "grouped");
        if (has_word(text, first_len, "p2p")) {
            costs.p2p_latency = 0.05; costs.activation_bytes = 1e6; costs.p2p_seconds_per_byte = 1e-10;
        }
        if (has_word(text, first_len, "iw")) { costs.i = 1; costs.w = 1; }
    }

    /* make_plan */
    memset(&pc, 0, sizeof pc);
    pc.csv = text; pc.csv_len = size; pc.keep_csv_comm = !relower;
    pc.split_overlaps = split_overlaps; pc.split_backward = split_backward;
    st = pp_plan_build(&pc, &plan, &err);
    FUZZ_CHECK(err.status == st);
    if (st != PP_OK) { FUZZ_CHECK(plan == NULL); return 0; }
    s = plan->schedule;
    FUZZ_CHECK(s->pp >= 1 && s->vpp >= 1 && s->mb >= 1 && s->num_stages == s->pp * s->vpp && s->lowered);

    /* schedule / simulate */
    if (size && text[0] == '#' && has_word(text, first_len, "memstage")) {
        memstage = (double *)calloc((size_t)s->num_stages, sizeof(double));
        if (memstage) for (r = 0; r < s->num_stages; r++) memstage[r] = r + 1;
        costs.memory_stage = memstage;
    }
    if (pp_simulate(s, &costs, &sim, &err) != PP_OK) goto done;
    FUZZ_CHECK(sim->makespan >= 0);
    for (r = 0; r < s->pp; r++) {
        int live = -1, awaiting = -1;
        FUZZ_CHECK(pp_schedule_rank_peaks(s, r, NULL, 1, &live, &awaiting, &err) == PP_OK);
        FUZZ_CHECK(live >= 0 && awaiting >= 0);
        FUZZ_CHECK(live == sim->peak_live[r]);
    }
    FUZZ_CHECK(pp_schedule_write_torch(s, out, &err) == PP_OK);
    FUZZ_CHECK(pp_schedule_write_csv(s, out, &err) == PP_OK);
    FUZZ_CHECK(pp_schedule_write_svg(s, sim, out, &err) == PP_OK);
    FUZZ_CHECK(pp_schedule_write_json(s, sim, out, &err) == PP_OK);
    FUZZ_CHECK(pp_schedule_draw_ascii(s, sim, out, &err) == PP_OK);
    round_trip(s);
done:
    pp_sim_result_free(sim);
    pp_plan_free(plan);
    free(memstage);
    return 0;
}
