/* fuzz_action_parse.c — libFuzzer harness for pp_action_parse (pipepar.h >>schedule).
 *
 * Input: the bytes of one action cell as text ("4F0", "1SEND_F3", "(0F1;3B0)OVERLAP_F_B"),
 * NUL-terminated on a copy. On success the action is formatted with pp_action_format and
 * parsed back, which must give the same action (the CSV writer and reader rely on it), and the
 * pp_error must carry the returned status and a terminated message.
 *
 *   clang -std=c99 -D_POSIX_C_SOURCE=200809L -g -O1 -fsanitize=fuzzer,address,undefined \
 *         -fno-sanitize-recover=all tests/fuzz/fuzz_action_parse.c tests/fuzz/fuzz_impl.c -o build/fuzz_action_parse -lm -lpthread
 *   build/fuzz_action_parse -dict=tests/fuzz/schedule.dict tests/fuzz/corpus/action_parse
 * Replay without clang: see replay_main.c. */
#include "../../pipepar.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_cstr(data, size), buf[128];
    pp_action a, b;
    pp_error err;
    pp_status st;
    int n;
    memset(&a, 0x5a, sizeof a);
    st = pp_action_parse(text, &a, &err);
    FUZZ_CHECK(err.status == st);
    FUZZ_CHECK(memchr(err.message, '\0', sizeof err.message) != NULL);
    if (st == PP_OK) {
        FUZZ_CHECK(a.op >= 0 && a.op < PP_OP_COUNT);
        FUZZ_CHECK(a.stage >= 0 && a.mb >= 0);
        if (a.op == PP_OP_FB) FUZZ_CHECK(a.stage2 >= 0 && a.mb2 >= 0);
        else FUZZ_CHECK(a.stage2 == -1 && a.mb2 == -1);
        n = pp_action_format(a, buf, sizeof buf);
        FUZZ_CHECK(n > 0 && (size_t)n < sizeof buf);
        FUZZ_CHECK(pp_action_parse(buf, &b, NULL) == PP_OK);
        FUZZ_CHECK(a.op == b.op && a.stage == b.stage && a.mb == b.mb && a.stage2 == b.stage2 && a.mb2 == b.mb2);
    } else {
        FUZZ_CHECK(st == PP_EPARSE);
    }
    free(text);
    return 0;
}
