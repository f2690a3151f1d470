/* pp_test.h — the tiny test framework of pipepar's tests.
 *
 * A test file tests/test_NAME.c holds static test functions and one table:
 *     static void schedule_1f1b_warmup_is_pp_minus_rank_minus_1(void) { PP_CHECK(...); }
 *     const pp_test_case pp_suite_NAME[] = { PP_TEST(schedule_1f1b_...), {0} };
 * The Makefile finds every tests/test_*.c and registers its suite; the runner
 * (tests/run_tests.c) prints one line per failed check and ends with "N passed, N failed".
 * Run one suite or one test: build/run_tests schedule   build/run_tests schedule/1f1b       */
#ifndef PP_TEST_H
#define PP_TEST_H
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "../pipepar.h"

typedef struct pp_test_case { const char *name; void (*fn)(void); } pp_test_case;
#define PP_TEST(fn) { #fn, fn }

void pp_test_fail(const char *file, int line, const char *fmt, ...);
/* One rank's compute actions in PyTorch's spelling, space separated (communication left out). */
void pp_test_compute_order(const pp_schedule *s, int rank, char *buf, size_t size);
/* How many actions of every rank's program are `op`. */
int pp_test_count_op(const pp_schedule *s, pp_op op);

#define PP_CHECK(cond) \
    do { if (!(cond)) pp_test_fail(__FILE__, __LINE__, "check failed: %s", #cond); } while (0)
#define PP_CHECK_MSG(cond, ...) \
    do { if (!(cond)) pp_test_fail(__FILE__, __LINE__, __VA_ARGS__); } while (0)
#define PP_CHECK_INT(a, b) \
    do { long long pp__a = (long long)(a), pp__b = (long long)(b); \
         if (pp__a != pp__b) pp_test_fail(__FILE__, __LINE__, "%s == %lld, expected %s == %lld", \
                                           #a, pp__a, #b, pp__b); } while (0)
#define PP_CHECK_NEAR(a, b, tol) \
    do { double pp__a = (double)(a), pp__b = (double)(b); \
         if (!(fabs(pp__a - pp__b) <= (tol))) pp_test_fail(__FILE__, __LINE__, \
             "%s == %.9g, expected %.9g (tolerance %g)", #a, pp__a, pp__b, (double)(tol)); } while (0)
#define PP_CHECK_STR(a, b) \
    do { const char *pp__a = (a), *pp__b = (b); \
         if (strcmp(pp__a, pp__b) != 0) pp_test_fail(__FILE__, __LINE__, \
             "%s == \"%s\", expected \"%s\"", #a, pp__a, pp__b); } while (0)
#define PP_CHECK_CONTAINS(haystack, needle) \
    do { const char *pp__h = (haystack), *pp__n = (needle); \
         if (!strstr(pp__h, pp__n)) pp_test_fail(__FILE__, __LINE__, \
             "%s == \"%s\" does not contain \"%s\"", #haystack, pp__h, pp__n); } while (0)
/* A call that must succeed: on failure prints the pp_error message. */
#define PP_CHECK_OK(call, errp) \
    do { pp_status pp__s = (call); if (pp__s != PP_OK) pp_test_fail(__FILE__, __LINE__, \
         "%s returned %s: %s", #call, pp_status_name(pp__s), (errp)->message); } while (0)
/* A call that must fail with `status` and a message containing `needle`. */
#define PP_CHECK_FAILS(call, errp, status, needle) \
    do { pp_status pp__s = (call); \
         if (pp__s != (status)) pp_test_fail(__FILE__, __LINE__, "%s returned %s, expected %s (%s)", \
             #call, pp_status_name(pp__s), pp_status_name(status), (errp)->message); \
         else if (!strstr((errp)->message, (needle))) pp_test_fail(__FILE__, __LINE__, \
             "%s: message \"%s\" does not contain \"%s\"", #call, (errp)->message, (needle)); } while (0)

/* Directory of tests/data, set by the runner (works from any working directory). */
const char *pp_test_data_dir(void);
/* tests/impl.c: >= 0 makes pipepar's allocations fail after that many more succeed; -1 (the
 * default) never. Set it only while one thread calls pipepar, and put it back to -1. */
extern long pp_test_alloc_countdown;
#endif
