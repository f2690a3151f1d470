/* fuzz_pack_algo.c — libFuzzer harness for pp_pack_algo_parse (pipepar.h >>pack), the --algo
 * value of `pipepar pack` and `pipepar replay`.
 *
 * Input: the name as bytes, NUL-terminated on a copy. A name that parses must give a real
 * algorithm whose pp_pack_algo_name parses back to it, and must equal (ignoring ASCII case)
 * either that name or one of the documented short forms; one that does not must fail with
 * PP_EINVAL and leave *algo alone.
 *
 *   clang -std=c99 -D_POSIX_C_SOURCE=200809L -g -O1 -fsanitize=fuzzer,address,undefined \
 *         -fno-sanitize-recover=all tests/fuzz/fuzz_pack_algo.c tests/fuzz/fuzz_impl.c -o build/fuzz_pack_algo -lm -lpthread
 *   build/fuzz_pack_algo -dict=tests/fuzz/names.dict tests/fuzz/corpus/pack_algo
 * Replay without clang: see replay_main.c. */
#include "../../pipepar.h"
#include "fuzz_common.h"

static int same_nocase(const char *a, const char *b)
{
    for (; *a && *b; a++, b++) {
        int x = (unsigned char)*a, y = (unsigned char)*b;
        if (x >= 'A' && x <= 'Z') x += 32;
        if (y >= 'A' && y <= 'Z') y += 32;
        if (x != y) return 0;
    }
    return *a == *b;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const short_forms[PP_PACK_ALGO_COUNT] = {
        "ffd", "bfd", "ffs", "mffd", "concat", "knapsack", "balanced_knapsack"
    };
    char *name = fuzz_cstr(data, size);
    pp_pack_algo algo = (pp_pack_algo)-7, again;
    pp_error err;
    pp_status st = pp_pack_algo_parse(name, &algo, &err);
    FUZZ_CHECK(err.status == st && memchr(err.message, '\0', sizeof err.message));
    if (st == PP_OK) {
        FUZZ_CHECK((int)algo >= 0 && algo < PP_PACK_ALGO_COUNT);
        FUZZ_CHECK(same_nocase(name, pp_pack_algo_name(algo)) || same_nocase(name, short_forms[algo]));
        FUZZ_CHECK(pp_pack_algo_parse(pp_pack_algo_name(algo), &again, NULL) == PP_OK && again == algo);
    } else {
        FUZZ_CHECK(st == PP_EINVAL && algo == (pp_pack_algo)-7);
    }
    free(name);
    return 0;
}
