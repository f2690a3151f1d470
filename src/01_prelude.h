
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifndef PIPEPAR_API
#define PIPEPAR_API extern
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ============================================================================================
 * >>errors
 * Every call that can fail returns a pp_status. Pass a pp_error to get a sentence that names the
 * parameter, its value and the rule it broke, e.g.
 *     "vpp=2: gpipe runs one chunk per rank (use interleaved or looped-bfs for several)".
 * The code list is one X-macro, so the enum and the names cannot drift apart.
 * ============================================================================================ */
#define PP_STATUS_LIST(X)                                                                   \
    X(PP_OK,           "ok")                                                                \
    X(PP_EINVAL,       "invalid argument")                                                  \
    X(PP_ENOMEM,       "out of memory")                                                     \
    X(PP_EPARSE,       "parse error")                                                       \
    X(PP_EUNSUPPORTED, "unsupported combination")                                           \
    X(PP_EINVALID_SCHEDULE, "schedule breaks a rule")                                       \
    X(PP_EDEADLOCK,    "schedule deadlocks")                                                \
    X(PP_ETIMEOUT,     "timed out")                                                         \
    X(PP_EABORTED,     "aborted by another rank")                                           \
    X(PP_ETRANSPORT,   "transport failure")                                                 \
    X(PP_ECALLBACK,    "user callback failed")                                              \
    X(PP_EIO,          "input/output error")                                                \
    X(PP_ECUDA,        "CUDA error")

typedef enum pp_status {
#define PP__STATUS_ENUM(code, text) code,
    PP_STATUS_LIST(PP__STATUS_ENUM)
#undef PP__STATUS_ENUM
    PP_STATUS_COUNT
} pp_status;

#define PP_ERROR_MESSAGE_SIZE 512

typedef struct pp_error {
    pp_status status;                       /* same value the call returned */
    char message[PP_ERROR_MESSAGE_SIZE];    /* one line, no trailing newline */
} pp_error;

PIPEPAR_API const char *pp_status_name(pp_status status);        /* "PP_EINVAL" */
/* Fills *err (when not NULL) with status and a printf-formatted one-line message, and returns
 * status: for code beside the header (the GPU companions, a trainer's own wrappers) that reports
 * errors the pipepar way. */
PIPEPAR_API pp_status pp_error_set(pp_error *err, pp_status status, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
PIPEPAR_API const char *pp_status_description(pp_status status); /* "invalid argument" */
