/* fuzz_schedule_kind.c — libFuzzer harness for pp_schedule_kind_parse (pipepar.h >>schedule), the
 * --kind / --schedule value of `pipepar schedule`, `simulate`, `search` and `mimo`.
 *
 * Input: the name as bytes, NUL-terminated on a copy. A name that parses must be a real kind
 * (not PP_KIND_NONE) whose pp_schedule_kind_name is the input itself; one that does not must
 * fail with PP_EINVAL and leave *kind alone. Both outcomes fill pp_error consistently.
 *
 *   clang -std=c99 -D_POSIX_C_SOURCE=200809L -g -O1 -fsanitize=fuzzer,address,undefined \
 *         -fno-sanitize-recover=all tests/fuzz/fuzz_schedule_kind.c tests/fuzz/fuzz_impl.c -o build/fuzz_schedule_kind -lm -lpthread
 *   build/fuzz_schedule_kind -dict=tests/fuzz/names.dict tests/fuzz/corpus/schedule_kind
 * Replay without clang: see replay_main.c. */
#include "../../pipepar.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *name = fuzz_cstr(data, size);
    pp_schedule_kind kind = (pp_schedule_kind)-7;
    pp_error err;
    pp_status st = pp_schedule_kind_parse(name, &kind, &err);
    FUZZ_CHECK(err.status == st && memchr(err.message, '\0', sizeof err.message));
    if (st == PP_OK) {
        FUZZ_CHECK(kind > PP_KIND_NONE && kind < PP_KIND_COUNT);
        FUZZ_CHECK(strcmp(pp_schedule_kind_name(kind), name) == 0);
    } else {
        FUZZ_CHECK(st == PP_EINVAL && kind == (pp_schedule_kind)-7);
    }
    free(name);
    return 0;
}
