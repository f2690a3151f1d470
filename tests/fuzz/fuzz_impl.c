/* fuzz_impl.c — pipepar's implementation for the fuzz harnesses: compiled once per build mode
 * (tests/fuzz/run.sh) and linked into every harness, so that each harness compiles only itself. */
#define PIPEPAR_IMPLEMENTATION
#include "../../pipepar.h"
