/* Tests of >>errors and what the header promises under bad input and faults (its "What pipepar
 * promises" paragraph): the version macros, messages that name the rank once and say where they
 * were, text readers that refuse NUL bytes and stop at their bound, size arithmetic that stays in
 * range (run under UBSan by make test), long values cut in messages. */
#include <stdlib.h>
#include "pp_test.h"

static void version_string_is_the_three_numbers(void)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%d.%d.%d", PIPEPAR_VERSION_MAJOR, PIPEPAR_VERSION_MINOR, PIPEPAR_VERSION_PATCH);
    PP_CHECK_STR(buf, PIPEPAR_VERSION_STRING);
}

/* --- the rank named once ------------------------------------------------------------------------ */

#ifndef PIPEPAR_NO_THREADS
static pp_status fail_on_rank_1(void *user, int rank, pp_transport *t, pp_error *err)
{
    (void)t;
    if (rank != 1) return PP_OK;
    return pp_error_set(err, PP_EINVAL, "%s", (const char *)user);
}

/* pp_threads_run prefixes "rank R: " to the failing rank's message, unless the message opens
 * with that rank already (the executor's do): "rank 1: rank 1: ..." never. */
static void threads_run_names_the_failing_rank_once(void)
{
    pp_error err;
    PP_CHECK_FAILS(pp_threads_run(2, fail_on_rank_1, (void *)"rank 1: callbacks.loss: must not be NULL", NULL, NULL, &err),
                   &err, PP_EINVAL, "rank 1: callbacks.loss");
    PP_CHECK_STR(err.message, "rank 1: callbacks.loss: must not be NULL");
    pp_threads_run(2, fail_on_rank_1, (void *)"rank 1 position 3 (1F0) posting its group: x", NULL, NULL, &err);
    PP_CHECK_STR(err.message, "rank 1 position 3 (1F0) posting its group: x");
    pp_threads_run(2, fail_on_rank_1, (void *)"callbacks.loss: must not be NULL", NULL, NULL, &err);
    PP_CHECK_STR(err.message, "rank 1: callbacks.loss: must not be NULL");
    /* another rank's number, or a longer one that starts with the same digit, is not this rank */
    pp_threads_run(2, fail_on_rank_1, (void *)"rank 10: x", NULL, NULL, &err);
    PP_CHECK_STR(err.message, "rank 1: rank 10: x");
    pp_threads_run(2, fail_on_rank_1, (void *)"rank 0 sent too much", NULL, NULL, &err);
    PP_CHECK_STR(err.message, "rank 1: rank 0 sent too much");
}

static size_t one_float(void *user, int boundary, const pp_mb_info *info)
{
    (void)user; (void)boundary; (void)info;
    return sizeof(float);
}
static int fill(void *user, const pp_mb_info *info, void *x) { (void)user; (void)info; *(float *)x = 1; return 0; }
static int copy_forward(void *user, const pp_mb_info *info, const void *in, void *out)
{
    (void)user; (void)info;
    *(float *)out = *(const float *)in;
    return 0;
}
static int unit_loss(void *user, const pp_mb_info *info, const void *out, void *grad_out, pp_loss *loss)
{
    (void)user; (void)info; (void)out;
    if (grad_out) *(float *)grad_out = 1;
    loss->loss = 1;
    return 0;
}
static int copy_backward(void *user, const pp_mb_info *info, const void *in, const void *grad_out, void *grad_in)
{
    (void)user; (void)info; (void)in;
    if (grad_in) *(float *)grad_in = *(const float *)grad_out;
    return 0;
}

/* Rank 0 runs a step; rank 1 never arrives. The check that the ranks run the same schedule, an
 * all-reduce before the first action, times out on rank 0, and says so: "before the step", not a
 * program position, and the rank once. */
static pp_status step_alone_on_rank_0(void *user, int rank, pp_transport *t, pp_error *err)
{
    pp_executor_config cfg;
    pp_executor *ex = NULL;
    pp_status st;
    if (rank != 0) return PP_OK;
    memset(&cfg, 0, sizeof cfg);
    cfg.schedule = (const pp_schedule *)user;
    cfg.transport = *t;
    cfg.timeout_s = 0.2;
    cfg.callbacks.tensor_bytes = one_float;
    cfg.callbacks.input = fill;
    cfg.callbacks.forward = copy_forward;
    cfg.callbacks.loss = unit_loss;
    cfg.callbacks.backward = copy_backward;
    st = pp_executor_create(&cfg, &ex, err);
    if (st == PP_OK) st = pp_run_step(ex, NULL, NULL, err);
    pp_executor_free(ex);
    return st;
}

static void executor_check_before_the_step_says_so(void)
{
    pp_schedule_config sc;
    pp_schedule *s = NULL;
    pp_error err;
    const char *second;
    memset(&sc, 0, sizeof sc);
    sc.kind = PP_1F1B; sc.pp = 2; sc.mb = 2;
    PP_CHECK_OK(pp_schedule_build(&sc, &s, &err), &err);
    PP_CHECK_OK(pp_schedule_lower(s, &err), &err);
    PP_CHECK_FAILS(pp_threads_run(2, step_alone_on_rank_0, s, NULL, NULL, &err), &err, PP_ETIMEOUT, "timed out");
    PP_CHECK_MSG(strncmp(err.message, "rank 0 before the step, checking that the ranks run the same schedule: ", 71) == 0,
                 "not said to be before the step: %s", err.message);
    PP_CHECK(strstr(err.message, "position") == NULL);
    second = strstr(err.message + 1, "rank 0");
    PP_CHECK_MSG(second == NULL, "rank 0 named twice: %s", err.message);
    pp_schedule_free(s);
}
#endif

/* --- text readers --------------------------------------------------------------------------------- */

static void csv_reader_refuses_a_nul_byte(void)
{
    static const char text[] = "0F0,0B0\n\0x\n";   /* the NUL is byte 8 */
    pp_schedule *s = NULL;
    pp_error err;
    PP_CHECK_FAILS(pp_schedule_read_csv(text, sizeof text - 1, &s, &err), &err, PP_EPARSE,
                   "CSV: byte 8 is a NUL: expected text");
    PP_CHECK(s == NULL);
    PP_CHECK_OK(pp_schedule_read_csv(text, 8, &s, &err), &err);   /* the text before it reads */
    pp_schedule_free(s);
}

/* Row r holds stage r's forward: pp rows, looped, vpp 1. PP_CSV_MAX_RANKS rows read; one more is
 * refused before any schedule is made (lowering and validation are quadratic in pp). */
static void csv_reader_stops_at_pp_csv_max_ranks_rows(void)
{
    size_t cap = (size_t)(PP_CSV_MAX_RANKS + 1) * 16, len = 0;
    char *text = (char *)malloc(cap);
    pp_schedule *s = NULL;
    pp_error err;
    int r;
    PP_CHECK(text != NULL);
    if (!text) return;
    for (r = 0; r < PP_CSV_MAX_RANKS; r++) len += (size_t)snprintf(text + len, cap - len, "%dF0\n", r);
    PP_CHECK_OK(pp_schedule_read_csv(text, len, &s, &err), &err);
    PP_CHECK(s && s->pp == PP_CSV_MAX_RANKS && s->vpp == 1);
    pp_schedule_free(s);
    s = NULL;
    len += (size_t)snprintf(text + len, cap - len, "%dF0\n", PP_CSV_MAX_RANKS);
    PP_CHECK_FAILS(pp_schedule_read_csv(text, len, &s, &err), &err, PP_EPARSE,
                   "CSV: more than 4096 rows (ranks): at most PP_CSV_MAX_RANKS=4096");
    PP_CHECK(s == NULL);
    free(text);
}

/* --- size arithmetic ------------------------------------------------------------------------------ */

/* 2*cp of the largest cp overflows an int: the messages compute it in 64 bits, and cp itself is
 * bounded so that every position of the split stays in 32 bits. */
static void cp_with_the_largest_cp_stays_in_range(void)
{
    int32_t cu[2] = { 0, 0 }, index[1], source[1];
    pp_error err;
    PP_CHECK_FAILS(pp_cp_bshd_gather(5, INT32_MAX, source, &err), &err, PP_EINVAL,
                   "seq_len=5: must be a multiple of 2*cp=4294967294");
    PP_CHECK_FAILS(pp_cp_bshd_indices(6, (1 << 30) + 1, 0, index, &err), &err, PP_EINVAL, "2*cp=2147483650");
    PP_CHECK_FAILS(pp_cp_thd_indices(cu, 1, INT32_MAX, 0, index, &err), &err, PP_EINVAL,
                   "cp=2147483647: must be between 1 and 1073741823");
    PP_CHECK_FAILS(pp_cp_thd_gather(cu, 1, (1 << 30) + 1, source, &err), &err, PP_EINVAL, "must be between 1 and 1073741823");
    PP_CHECK_OK(pp_cp_thd_indices(cu, 1, INT32_MAX / 2, 5, index, &err), &err);   /* the largest cp: an empty sequence */
}

static void pack_plan_with_the_largest_cp_stays_in_range(void)
{
    static const int32_t lengths[1] = { 4 };
    pp_pack_plan_config cfg;
    pp_pack_plan *plan = NULL;
    pp_error err;
    memset(&cfg, 0, sizeof cfg);
    cfg.pack.capacity = 8;
    cfg.cp = INT32_MAX;
    cfg.seq_multiple = 4;
    PP_CHECK_FAILS(pp_pack_plan_build(lengths, 1, &cfg, &plan, &err), &err, PP_EINVAL, "2*cp=4294967294");
    cfg.seq_multiple = 0;
    cfg.bin_multiple = 6;
    cfg.cp = 2;
    PP_CHECK_FAILS(pp_pack_plan_build(lengths, 1, &cfg, &plan, &err), &err, PP_EINVAL, "multiple of 2*cp=4");
    cfg.cp = (1 << 30) + 7;
    cfg.seq_multiple = 2;
    PP_CHECK_FAILS(pp_pack_plan_build(lengths, 1, &cfg, &plan, &err), &err, PP_EINVAL, "2*cp=2147483662");
    PP_CHECK(plan == NULL);
}

/* --- long values in messages -------------------------------------------------------------------- */

static void long_names_are_cut_in_messages(void)
{
    char name[4096];
    pp_schedule_kind kind;
    pp_pack_algo algo;
    unsigned dims;
    pp_error err;
    memset(name, 'x', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    PP_CHECK_FAILS(pp_schedule_kind_parse(name, &kind, &err), &err, PP_EINVAL, "xxx...': unknown (one of gpipe");
    PP_CHECK(strlen(err.message) < 300);
    PP_CHECK_FAILS(pp_pack_algo_parse(name, &algo, &err), &err, PP_EINVAL, "xxx...: unknown packing algorithm");
    PP_CHECK(strlen(err.message) < 400);
    PP_CHECK_FAILS(pp_grid_dims_parse(name, &dims, &err), &err, PP_EINVAL, "xxx...': 'xxxxxxxxxxxxxxxx' is not a dimension");
    PP_CHECK(strlen(err.message) < 300);
}

const pp_test_case pp_suite_errors[] = {
    PP_TEST(version_string_is_the_three_numbers),
#ifndef PIPEPAR_NO_THREADS
    PP_TEST(threads_run_names_the_failing_rank_once),
    PP_TEST(executor_check_before_the_step_says_so),
#endif
    PP_TEST(csv_reader_refuses_a_nul_byte),
    PP_TEST(csv_reader_stops_at_pp_csv_max_ranks_rows),
    PP_TEST(cp_with_the_largest_cp_stays_in_range),
    PP_TEST(pack_plan_with_the_largest_cp_stays_in_range),
    PP_TEST(long_names_are_cut_in_messages),
    { 0, 0 }
};
