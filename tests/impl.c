/* The one translation unit of the tests that holds pipepar's implementation. */
#define PIPEPAR_IMPLEMENTATION
#include "../pipepar.h"
